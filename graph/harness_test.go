package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/internal/auth"
	"flashsale/internal/catalog"
	"flashsale/internal/config"
	"flashsale/internal/gate"
	"flashsale/internal/node"
	"flashsale/internal/testenv"
)

const testSecret = "test-secret-0123456789abcdef-0123456789"

// testServer is a node, built by internal/node as production builds it,
// over a private Redis and a Postgres database of the test's own; the
// tests send their operations to its GraphQL handler, without a listener.
type testServer struct {
	client  *client.Client
	handler http.Handler
	db      *bun.DB
	dbURL   string // where other nodes of the test find the database
	redis   *testenv.RedisServer
	rdb     *redis.Client
	tokens  *auth.Tokens
	catalog *catalog.Service
	router  *actors.Router
	writer  *writer.Writer
	// gate guards every grab; gateCalls counts the Redis commands of its
	// request-path client (node.Hooks.GateRedis).
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
	return startServer(tb, patient, nil)
}

// patientOptions give the router's Redis calls room: these tests assert
// that every grab is decided (OK, SOLD_OUT, ...), and a call on a machine
// loaded by the race detector and parallel tests can take longer than the
// production deadlines (200 ms a call, 400 ms a batch), which would answer
// UNAVAILABLE by design. Tests of the deadlines set their own.
var patientOptions = actors.Options{CallTimeout: 2 * time.Second, BatchTimeout: 5 * time.Second}

// patient gives the router patientOptions' room.
func patient(o *actors.Options) { overlayActors(o, patientOptions) }

// newServerWith lets a test change the router's options (rate limits,
// ...) after the node set them (node.Hooks.Actors).
func newServerWith(tb testing.TB, options func(*actors.Options)) *testServer {
	tb.Helper()
	return startServer(tb, options, nil)
}

// newStallingServer runs the grab scripts through a client the test can
// stall (see testenv.StallingClient); everything else reaches Redis
// directly.
func newStallingServer(tb testing.TB, opts actors.Options) (*testServer, *testenv.StallingClient) {
	tb.Helper()
	var grabs *testenv.StallingClient
	s := startServer(tb, func(o *actors.Options) { overlayActors(o, opts) }, func(s *testServer) redis.UniversalClient {
		grabs = testenv.MustStallingClient(tb, s.redis.Addr())
		return grabs
	})
	return s, grabs
}

// startServer starts a node over stores of its own; grabClient, if not
// nil, picks the client the grab scripts run on.
func startServer(tb testing.TB, options func(*actors.Options), grabClient func(*testServer) redis.UniversalClient) *testServer {
	tb.Helper()
	return startNode(tb, testenv.MustPostgresURL(tb), testenv.MustRedis(tb), options, grabClient, testGateOptions)
}

// nodeSeq numbers the test nodes: nodes sharing a database need NODE_IDs
// of their own (each order writer leases its name).
var nodeSeq atomic.Int64

// startNode starts a node, as production builds it (internal/node), over
// a database and a Redis that other nodes of the test may share. Its
// settings are production's except where a test needs room or quiet:
// no per-user rate, no anonymous budget and no shedding (the rush tests
// send thousands of operations from one address), introspection public.
// gateOpts's difficulty and refresh become POW_DIFFICULTY and
// GATE_REFRESH; its key must be the one JWT_SECRET gives.
func startNode(tb testing.TB, dbURL string, rs *testenv.RedisServer, options func(*actors.Options), grabClient func(*testServer) redis.UniversalClient, gateOpts gate.Options) *testServer {
	tb.Helper()
	if gateOpts.Key != nil && !bytes.Equal(gateOpts.Key, gate.KeyFrom(testSecret)) {
		tb.Fatal("a test node's gate key is the one JWT_SECRET gives")
	}
	s := &testServer{dbURL: dbURL, redis: rs, tokens: auth.NewTokens(testSecret)}
	s.rdb = s.redis.Client()
	env := map[string]string{
		"DATABASE_URL":           dbURL,
		"REDIS_URL":              rs.URL(),
		"JWT_SECRET":             testSecret,
		"HTTP_ADDR":              "127.0.0.1:0",
		"NODE_ID":                fmt.Sprintf("graph-test-%d", nodeSeq.Add(1)),
		"CLUSTER_PROVIDER":       "test",
		"INTROSPECTION":          "public",
		"GRAPHQL_COMPILED_GRABS": "true",
		"RATE_USER_PER_SEC":      "0",
		"ANON_MAX_IN_FLIGHT":     "0",
		"ANON_PER_SEC":           "0",
		"SHED_QUEUE_DEPTH":       "0",
		"SHED_GRAB_LATENCY":      "0s",
	}
	if gateOpts.Difficulty != 0 {
		env["POW_DIFFICULTY"] = strconv.Itoa(gateOpts.Difficulty)
	}
	if gateOpts.Refresh != 0 {
		env["GATE_REFRESH"] = gateOpts.Refresh.String()
	}
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		tb.Fatal(err)
	}
	s.gateCalls = new(testenv.Counter)
	hooks := node.Hooks{
		Actors:    options,
		GateRedis: s.gateCalls,
	}
	if grabClient != nil {
		hooks.GrabClient = func(redis.UniversalClient) redis.UniversalClient { return grabClient(s) }
	}
	n, err := node.NewWith(context.Background(), cfg, slog.New(slog.DiscardHandler), hooks)
	if err != nil {
		tb.Fatalf("start node: %v", err)
	}
	tb.Cleanup(n.Stop)
	p := n.Parts()
	s.db, s.handler, s.catalog, s.router, s.gate = p.DB, p.GraphQL, p.Catalog, p.Router, p.Gate
	s.writer, s.rpWriter = p.Orders, p.RedPackets
	s.client = client.New(s.handler)
	return s
}

// overlayActors sets in o the router options a test set in t: deadlines
// and retries a loaded machine needs more room for, a per-user rate.
func overlayActors(o *actors.Options, t actors.Options) {
	if t.CallTimeout != 0 {
		o.CallTimeout = t.CallTimeout
	}
	if t.BatchTimeout != 0 {
		o.BatchTimeout = t.BatchTimeout
	}
	if t.Attempts != 0 {
		o.Attempts = t.Attempts
	}
	if t.GrabTimeout != 0 {
		o.GrabTimeout = t.GrabTimeout
	}
	if t.UserRate != 0 {
		o.UserRate = t.UserRate
	}
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
		// Requests rejected before execution (validation) answer 422; the
		// client reports them as "http 422: <body>".
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
