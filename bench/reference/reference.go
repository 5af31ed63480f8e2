// Package reference holds the designs the service is measured against, in
// plain Go over plain HTTP:
//
//   - Server: the seeds' final flash-sale design. Per grab one Redis INCR
//     for the order id and one EVALSHA of a script that checks the stock and
//     the one-order-per-user set, takes the unit and XADDs the order to a
//     stream; one consumer goroutine reads the stream one entry at a time
//     and inserts each order in its own Postgres transaction.
//   - Ceiling: the cheapest answer an HTTP service can give a grab: the
//     same JWT check, then a constant body.
//   - GraphQLCeiling: the same for a grab as the service's contract
//     carries it: the POST /query body read, the JWT check, then the
//     constant bytes of a sold-out answer. No GraphQL server can answer
//     a grab for less; it bounds what the service can reach against the
//     plain ceiling.
//
// Both speak the same small API, which the load tool drives:
//
//	POST /vouchers            {"stock": N}   admin token → {"id": "7"}
//	POST /seckill/{voucherId}                user token  → {"code": "OK", "orderId": "..."}
//	GET  /stock/{voucherId}                              → {"remaining": N}
//	GET  /healthz
//
// Codes are the service's: OK, SOLD_OUT, LIMIT_REACHED, NOT_FOUND,
// UNAVAILABLE; a bad token is a 401 with code UNAUTHENTICATED.
package reference

import (
	"bytes"
	"context"
	"database/sql"
	_ "embed" // grab.lua
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"

	"flashsale/internal/auth"
)

// grabSource is the seeds' grab script, headed by its KEYS, ARGV and
// returns: grab.lua.
//
//go:embed grab.lua
var grabSource string

// grabScript runs grab.lua.
var grabScript = redis.NewScript(grabSource)

// epoch2023 is the origin of order ids' time part, as in the seeds'
// RedisIdWorker: id = seconds since 2023-01-01 << 32 | the day's counter.
var epoch2023 = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC).Unix()

const consumerGroup = "g1"

// Config is what a reference server needs.
type Config struct {
	Redis *redis.Client
	DB    *sql.DB
	// Tokens verifies bearer tokens (the service's HS256 rules).
	Tokens *auth.Tokens
	// Prefix starts every Redis key, so that several servers can share a
	// Redis without reading each other's orders.
	Prefix string
	Log    *slog.Logger
}

// Server is the seeds' design. Start its consumer with Run; serve Handler.
type Server struct {
	cfg Config
}

// New returns a server; Migrate creates its tables.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg}
}

// schema is the part of the service's tables the seeds' design uses, with
// the same guards the seeds relied on: stock never below zero, one order
// per user and voucher.
const schema = `
CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
	voucher_id BIGSERIAL PRIMARY KEY,
	initial_stock INT NOT NULL,
	stock INT NOT NULL CHECK (stock >= 0)
);
CREATE TABLE IF NOT EXISTS tb_voucher_order (
	id BIGINT PRIMARY KEY,
	user_id BIGINT NOT NULL,
	voucher_id BIGINT NOT NULL,
	status SMALLINT NOT NULL DEFAULT 1,
	create_time TIMESTAMPTZ NOT NULL DEFAULT now(),
	UNIQUE (user_id, voucher_id)
);`

// Migrate creates the tables and the order stream's consumer group.
func (s *Server) Migrate(ctx context.Context) error {
	if _, err := s.cfg.DB.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create reference tables: %w", err)
	}
	err := s.cfg.Redis.XGroupCreateMkStream(ctx, s.stream(), consumerGroup, "0").Err()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create order stream group: %w", err)
	}
	if err := grabScript.Load(ctx, s.cfg.Redis).Err(); err != nil {
		return fmt.Errorf("load grab script: %w", err)
	}
	return nil
}

func (s *Server) stream() string { return s.cfg.Prefix + "stream.orders" }

func (s *Server) stockKey(v int64) string {
	return s.cfg.Prefix + "seckill:stock:" + strconv.FormatInt(v, 10)
}

func (s *Server) buyersKey(v int64) string {
	return s.cfg.Prefix + "seckill:order:" + strconv.FormatInt(v, 10)
}

// Handler serves the API of the package comment.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /vouchers", s.createVoucher)
	mux.HandleFunc("POST /seckill/{id}", s.grab)
	mux.HandleFunc("GET /stock/{id}", s.stock)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return mux
}

func (s *Server) createVoucher(w http.ResponseWriter, r *http.Request) {
	id, err := s.cfg.Tokens.VerifyHeader(r.Header.Get("Authorization"))
	if err != nil {
		writeCode(w, http.StatusUnauthorized, "UNAUTHENTICATED")
		return
	}
	if !id.IsAdmin() {
		writeCode(w, http.StatusForbidden, "FORBIDDEN")
		return
	}
	var in struct {
		Stock int `json:"stock"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&in); err != nil || in.Stock < 1 {
		writeCode(w, http.StatusBadRequest, "BAD_USER_INPUT")
		return
	}
	var vid int64
	err = s.cfg.DB.QueryRowContext(r.Context(),
		`INSERT INTO tb_seckill_voucher (initial_stock, stock) VALUES ($1, $1) RETURNING voucher_id`, in.Stock).Scan(&vid)
	if err == nil {
		// Preheat: the stock goes to Redis when the voucher is created.
		err = s.cfg.Redis.Set(r.Context(), s.stockKey(vid), in.Stock, 0).Err()
	}
	if err != nil {
		s.cfg.Log.Error("create voucher", "err", err)
		writeCode(w, http.StatusInternalServerError, "INTERNAL")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": strconv.FormatInt(vid, 10)})
}

func (s *Server) grab(w http.ResponseWriter, r *http.Request) {
	id, err := s.cfg.Tokens.VerifyHeader(r.Header.Get("Authorization"))
	if err != nil {
		writeCode(w, http.StatusUnauthorized, "UNAUTHENTICATED")
		return
	}
	vid, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeCode(w, http.StatusOK, "NOT_FOUND")
		return
	}
	ctx := r.Context()
	orderID, err := s.nextOrderID(ctx)
	if err != nil {
		s.cfg.Log.Warn("order id", "err", err)
		writeCode(w, http.StatusServiceUnavailable, "UNAVAILABLE")
		return
	}
	res, err := grabScript.EvalSha(ctx, s.cfg.Redis,
		[]string{s.stockKey(vid), s.buyersKey(vid), s.stream()},
		vid, id.UserID, orderID).Int()
	if err != nil {
		s.cfg.Log.Warn("grab script", "err", err)
		writeCode(w, http.StatusServiceUnavailable, "UNAVAILABLE")
		return
	}
	switch res {
	case 0:
		writeJSON(w, http.StatusOK, map[string]string{"code": "OK", "orderId": strconv.FormatInt(orderID, 10)})
	case 1:
		writeCode(w, http.StatusOK, "SOLD_OUT")
	case 2:
		writeCode(w, http.StatusOK, "LIMIT_REACHED")
	default:
		writeCode(w, http.StatusOK, "NOT_FOUND")
	}
}

// nextOrderID is the seeds' RedisIdWorker: one INCR of the day's counter.
func (s *Server) nextOrderID(ctx context.Context) (int64, error) {
	now := time.Now().UTC()
	seq, err := s.cfg.Redis.Incr(ctx, s.cfg.Prefix+"icr:order:"+now.Format("2006:01:02")).Result()
	if err != nil {
		return 0, err
	}
	return (now.Unix()-epoch2023)<<32 | seq, nil
}

func (s *Server) stock(w http.ResponseWriter, r *http.Request) {
	vid, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeCode(w, http.StatusNotFound, "NOT_FOUND")
		return
	}
	n, err := s.cfg.Redis.Get(r.Context(), s.stockKey(vid)).Int()
	switch {
	case errors.Is(err, redis.Nil):
		writeCode(w, http.StatusNotFound, "NOT_FOUND")
	case err != nil:
		writeCode(w, http.StatusServiceUnavailable, "UNAVAILABLE")
	default:
		writeJSON(w, http.StatusOK, map[string]int{"remaining": n})
	}
}

// Run is the seeds' order consumer: one goroutine, one stream entry at a
// time, one transaction per order, then XACK. After an error it works
// through its pending entries (the seeds' handlePendingList) before it
// reads new ones. It returns when ctx ends.
func (s *Server) Run(ctx context.Context) {
	const consumer = "c1"
	pending := true // entries a previous run read but never acknowledged
	for ctx.Err() == nil {
		start := ">"
		if pending {
			start = "0"
		}
		streams, err := s.cfg.Redis.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: consumerGroup, Consumer: consumer,
			Streams: []string{s.stream(), start},
			Count:   1, Block: time.Second,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Log.Warn("read order stream", "err", err)
				sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		if len(streams) == 0 || len(streams[0].Messages) == 0 {
			pending = false
			continue
		}
		msg := streams[0].Messages[0]
		if err := s.insert(ctx, msg.Values); err != nil {
			if ctx.Err() == nil {
				s.cfg.Log.Warn("insert order", "err", err)
				pending = true
				sleep(ctx, 50*time.Millisecond)
			}
			continue
		}
		if err := s.cfg.Redis.XAck(ctx, s.stream(), consumerGroup, msg.ID).Err(); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("ack order", "err", err)
			pending = true
		}
	}
}

// insert writes one order and takes its unit off the database's stock in
// one transaction. An order already there (a re-delivered entry) changes
// nothing.
func (s *Server) insert(ctx context.Context, v map[string]any) error {
	id, err1 := strconv.ParseInt(fmt.Sprint(v["id"]), 10, 64)
	user, err2 := strconv.ParseInt(fmt.Sprint(v["userId"]), 10, 64)
	voucher, err3 := strconv.ParseInt(fmt.Sprint(v["voucherId"]), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("decode order entry: %w", err)
	}
	tx, err := s.cfg.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx,
		`INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
		id, user, voucher)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		if _, err := tx.ExecContext(ctx,
			`UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = $1 AND stock > 0`, voucher); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Ceiling answers every grab with a constant SOLD_OUT after the same
// token check: the most a plain HTTP service can do on this machine.
type Ceiling struct {
	Tokens *auth.Tokens

	mu   sync.Mutex
	next int64
}

// Handler serves the API of the package comment; vouchers are numbers
// only, and there is no stock.
func (c *Ceiling) Handler() http.Handler {
	soldOut := []byte(`{"code":"SOLD_OUT"}`)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /vouchers", func(w http.ResponseWriter, r *http.Request) {
		id, err := c.Tokens.VerifyHeader(r.Header.Get("Authorization"))
		if err != nil || !id.IsAdmin() {
			writeCode(w, http.StatusUnauthorized, "UNAUTHENTICATED")
			return
		}
		c.mu.Lock()
		c.next++
		n := c.next
		c.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"id": strconv.FormatInt(n, 10)})
	})
	mux.HandleFunc("POST /seckill/{id}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := c.Tokens.VerifyHeader(r.Header.Get("Authorization")); err != nil {
			writeCode(w, http.StatusUnauthorized, "UNAUTHENTICATED")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(soldOut)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return mux
}

// GraphQLCeiling answers every grab on POST /query with the constant
// bytes the service answers a sold-out grab with, after reading the body
// and the same token check. It parses nothing: an admin's body that
// names createVoucher gets a new voucher id, any other body the
// sold-out answer.
type GraphQLCeiling struct {
	Tokens *auth.Tokens

	mu   sync.Mutex
	next int64
	bufs sync.Pool
}

// graphQLSoldOut is the service's answer to a sold-out grab selecting
// code and orderId, byte for byte.
var graphQLSoldOut = []byte(`{"data":{"seckillVoucher":{"code":"SOLD_OUT","orderId":null}}}`)

// maxCeilingBody bounds a body read by the GraphQL ceiling, as the
// service bounds its own.
const maxCeilingBody = 64 << 10

// Handler serves POST /query and GET /healthz.
func (c *GraphQLCeiling) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /query", func(w http.ResponseWriter, r *http.Request) {
		buf, _ := c.bufs.Get().(*bytes.Buffer)
		if buf == nil {
			buf = new(bytes.Buffer)
		}
		defer func() { buf.Reset(); c.bufs.Put(buf) }()
		if _, err := buf.ReadFrom(io.LimitReader(r.Body, maxCeilingBody)); err != nil {
			writeCode(w, http.StatusBadRequest, "BAD_REQUEST")
			return
		}
		id, err := c.Tokens.VerifyHeader(r.Header.Get("Authorization"))
		if err != nil {
			writeCode(w, http.StatusUnauthorized, "UNAUTHENTICATED")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if id.IsAdmin() && bytes.Contains(buf.Bytes(), []byte("createVoucher")) {
			c.mu.Lock()
			c.next++
			n := c.next
			c.mu.Unlock()
			_, _ = fmt.Fprintf(w, `{"data":{"createVoucher":{"id":"%d"}}}`, n)
			return
		}
		_, _ = w.Write(graphQLSoldOut)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return mux
}

func writeCode(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]string{"code": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
