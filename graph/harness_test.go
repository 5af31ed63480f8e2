package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/internal/catalog"
	"flashsale/internal/gate"
	"flashsale/internal/redpackets"
	"flashsale/internal/seckill"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

const testSecret = "test-secret-0123456789abcdef"

// testServer is the GraphQL handler wired to a private Redis and a
// Postgres database of the test's own.
type testServer struct {
	client  *client.Client
	handler http.Handler
	db      *bun.DB
	redis   *testenv.RedisServer
	rdb     *redis.Client
	tokens  *auth.Tokens
	catalog *catalog.Service
	router  *actors.Router
	writer  *writer.Writer
	// gate guards every grab; gateCalls counts the Redis commands of its
	// request-path client (its pub/sub watcher has a client of its own).
	gate      *gate.Service
	gateCalls *testenv.Counter
	// rpWriter persists red-packet grabs.
	rpWriter *writer.Writer
}

// testGateOptions are the gate's options in tests (a release of a minute,
// tickets of two minutes, a light proof of work).
var testGateOptions = gate.Options{Key: gate.KeyFrom(testSecret), Difficulty: 8}

func newServer(tb testing.TB) *testServer {
	tb.Helper()
	return newServerWith(tb, func(*redis.Client) actors.Options { return patientOptions })
}

// patientOptions give the router's Redis calls room: these tests assert
// that every grab is decided (OK, SOLD_OUT, ...), and a call on a machine
// loaded by the race detector and parallel tests can take longer than the
// production deadlines (200 ms a call, 400 ms a batch), which would answer
// UNAVAILABLE by design. Tests of the deadlines set their own.
var patientOptions = actors.Options{CallTimeout: 2 * time.Second, BatchTimeout: 5 * time.Second}

// newServerWith lets a test set the router's options (rate limits, ...).
func newServerWith(tb testing.TB, options func(*redis.Client) actors.Options) *testServer {
	tb.Helper()
	return startServer(tb, options, nil)
}

// newStallingServer runs the grab scripts through a client the test can
// stall (see testenv.StallingClient); everything else reaches Redis
// directly.
func newStallingServer(tb testing.TB, opts actors.Options) (*testServer, *testenv.StallingClient) {
	tb.Helper()
	var grabs *testenv.StallingClient
	s := startServer(tb, func(*redis.Client) actors.Options { return opts }, func(s *testServer) redis.UniversalClient {
		grabs = testenv.MustStallingClient(tb, s.redis.Addr())
		return grabs
	})
	return s, grabs
}

// startServer wires the server; grabClient, if not nil, picks the client
// the grab scripts run on.
func startServer(tb testing.TB, options func(*redis.Client) actors.Options, grabClient func(*testServer) redis.UniversalClient) *testServer {
	tb.Helper()
	return startNode(tb, testenv.MustPostgres(tb), testenv.MustRedis(tb), options, grabClient, testGateOptions)
}

// startNode wires a server over a database and a Redis that other nodes
// of the test may share.
func startNode(tb testing.TB, db *bun.DB, rs *testenv.RedisServer, options func(*redis.Client) actors.Options, grabClient func(*testServer) redis.UniversalClient, gateOpts gate.Options) *testServer {
	tb.Helper()
	s := &testServer{db: db, redis: rs, tokens: auth.NewTokens(testSecret)}
	s.rdb = s.redis.Client()
	log := slog.New(slog.DiscardHandler)
	s.catalog = catalog.New(persistence.NewVouchers(s.db), persistence.NewStock(s.rdb), log)
	var grabs redis.UniversalClient = s.rdb
	if grabClient != nil {
		grabs = grabClient(s)
	}
	ids := testenv.MustOrderIDs(tb, s.db)
	s.router = actors.NewRouter(persistence.NewGrabs(grabs), ids, s.catalog, log, options(s.rdb))
	s.writer = testenv.StartOrderWriter(tb, s.db, s.rdb, writer.Options{})
	rds := persistence.NewRedPacketRedis(s.rdb)
	rpStore := persistence.NewRedPacketStore(s.db, rds)
	redPackets := redpackets.New(rpStore, ids, s.router.RedPackets(rds, rpStore), redpackets.Config{})
	s.rpWriter = testenv.StartRedPacketWriter(tb, s.db, s.rdb, writer.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	events := persistence.NewStock(s.rdb).Subscribe(ctx)
	bg.Go(func() { defer events.Close(); _ = s.router.Follow(ctx, events) })
	s.gateCalls = new(testenv.Counter)
	gateRdb := s.redis.Client()
	gateRdb.AddHook(s.gateCalls)
	s.gate = gate.New(persistence.NewGate(gateRdb), persistence.NewVouchers(s.db), log, gateOpts)
	if err := s.gate.Load(ctx); err != nil {
		tb.Fatal(err)
	}
	gateChanges := persistence.NewGate(s.rdb).Subscribe(ctx)
	bg.Go(func() { defer gateChanges.Close(); s.gate.Run(ctx, gateChanges) })
	tb.Cleanup(func() { s.router.Close(); cancel(); bg.Wait() })
	h := httpapi.NewHandler(&graph.Resolver{Catalog: s.catalog, Seckill: seckill.New(s.gate, s.router), DeadLetters: persistence.NewDeadLetters(s.db), Reconciler: persistence.NewReconciliations(s.db, s.rdb), Gate: s.gate, RedPackets: redPackets}, httpapi.HandlerOptions{Tokens: s.tokens, Log: log, Introspection: graph.IntrospectionPublic, CompiledGrabs: true})
	s.client = client.New(h)
	s.handler = h
	return s
}

// drained waits until every accepted order is in the database.
func (s *testServer) drained(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.writer.WaitDrained(ctx); err != nil {
		tb.Fatalf("order log not drained: %v", err)
	}
}

func (s *testServer) token(tb testing.TB, user int64, role auth.Role) string {
	tb.Helper()
	tok, err := s.tokens.Issue(auth.Identity{UserID: user, Role: role}, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func (s *testServer) admin(tb testing.TB) string { return s.token(tb, 1, auth.RoleAdmin) }

type gqlError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

func (e gqlError) code() string { c, _ := e.Extensions["code"].(string); return c }

// do runs one operation with an optional bearer token and returns the data
// (decoded into out when not nil) and the errors.
func (s *testServer) do(tb testing.TB, token, query string, vars map[string]any, out any) []gqlError {
	tb.Helper()
	var opts []client.Option
	if token != "" {
		opts = append(opts, client.AddHeader("Authorization", "Bearer "+token))
	}
	for k, v := range vars {
		opts = append(opts, client.Var(k, v))
	}
	resp, err := s.client.RawPost(query, opts...)
	if err != nil {
		// Requests rejected before execution with a status other than 200
		// (a body gqlgen never reads, a missing token: 401); the client
		// reports them as "http 4xx: <body>".
		_, body, ok := strings.Cut(err.Error(), ": ")
		if !ok || !strings.HasPrefix(err.Error(), "http 4") {
			tb.Fatalf("post: %v", err)
		}
		resp = &client.Response{}
		if err := json.Unmarshal([]byte(body), resp); err != nil {
			tb.Fatalf("post: %v", err)
		}
	}
	var errs []gqlError
	if len(resp.Errors) > 0 {
		if err := json.Unmarshal(resp.Errors, &errs); err != nil {
			tb.Fatalf("decode errors %s: %v", resp.Errors, err)
		}
	}
	if out != nil && resp.Data != nil {
		raw, _ := json.Marshal(resp.Data)
		if err := json.Unmarshal(raw, out); err != nil {
			tb.Fatalf("decode data %s: %v", raw, err)
		}
	}
	return errs
}

// post sends one operation straight to the handler over HTTP (no client:
// the rush tests send thousands from many goroutines).
func (s *testServer) post(token, query string, vars map[string]any) *httptest.ResponseRecorder {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	s.handler.ServeHTTP(rec, req)
	return rec
}

// mustDo is do for operations that must succeed.
func (s *testServer) mustDo(tb testing.TB, token, query string, vars map[string]any, out any) {
	tb.Helper()
	if errs := s.do(tb, token, query, vars, out); len(errs) > 0 {
		tb.Fatalf("unexpected errors: %+v", errs)
	}
}

// wantCode asserts exactly one error with the given code.
func wantCode(tb testing.TB, errs []gqlError, code string) gqlError {
	tb.Helper()
	if len(errs) != 1 || errs[0].code() != code {
		tb.Fatalf("want one %s error, got %+v", code, errs)
	}
	return errs[0]
}

const createSeckill = `mutation($in: CreateVoucherInput!) {
  createVoucher(input: $in) { id shopId title type status seckill { initialStock remaining perUserLimit beginAt endAt } }
}`

type voucherData struct {
	ID      string `json:"id"`
	ShopID  string `json:"shopId"`
	Title   string `json:"title"`
	Type    string `json:"type"`
	Status  string `json:"status"`
	Seckill *struct {
		InitialStock int       `json:"initialStock"`
		Remaining    int       `json:"remaining"`
		PerUserLimit int       `json:"perUserLimit"`
		BeginAt      time.Time `json:"beginAt"`
		EndAt        time.Time `json:"endAt"`
	} `json:"seckill"`
}

func seckillInput(shop, stock int) map[string]any {
	now := time.Now().UTC()
	return map[string]any{
		"shopId": shop, "title": "Flash voucher", "payValue": 100, "actualValue": 500,
		"type": "SECKILL", "stock": stock,
		"beginAt": now.Add(-time.Minute).Format(time.RFC3339), "endAt": now.Add(time.Hour).Format(time.RFC3339),
	}
}

func (s *testServer) createVoucher(tb testing.TB, in map[string]any) voucherData {
	tb.Helper()
	var out struct{ CreateVoucher voucherData }
	s.mustDo(tb, s.admin(tb), createSeckill, map[string]any{"in": in}, &out)
	return out.CreateVoucher
}
