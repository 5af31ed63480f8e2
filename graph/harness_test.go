package graph_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors"
	"flashsale/actors/writer"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
	"flashsale/usecase/catalog"
	"flashsale/usecase/gate"
)

const testSecret = nodetest.Secret

// testServer is a node, built by node as production builds it,
// over a private Redis and a Postgres database of the test's own; the
// tests send their operations to its GraphQL handler, without a listener.
type testServer struct {
	node    *nodetest.Node
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

// patient gives the router room for a loaded machine (nodetest.Patient).
func patient(o *actors.Options) { nodetest.Patient(o) }

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

// startNode starts a node, as production builds it (node, see
// nodetest), over a database and a Redis that other nodes of the test may
// share. gateOpts's difficulty and refresh become POW_DIFFICULTY and
// GATE_REFRESH; its key must be the one JWT_SECRET gives.
func startNode(tb testing.TB, dbURL string, rs *testenv.RedisServer, options func(*actors.Options), grabClient func(*testServer) redis.UniversalClient, gateOpts gate.Options) *testServer {
	tb.Helper()
	return launch(tb, setup{dbURL: dbURL, redis: rs, actors: options, grabClient: grabClient, gate: gateOpts})
}

// sibling starts another node over s's database and Redis, as newServer
// starts one (patient, the test gate), with env over the test settings
// and hooks for what no setting says (node.Hooks.HTTP, Grabber).
func (s *testServer) sibling(tb testing.TB, env map[string]string, hooks node.Hooks) *testServer {
	tb.Helper()
	return launch(tb, setup{dbURL: s.dbURL, redis: s.redis, actors: patient, gate: testGateOptions, env: env, hooks: hooks})
}

// setup is what a test node runs on and what the test changes in it.
type setup struct {
	dbURL string
	redis *testenv.RedisServer
	// actors and grabClient become node.Hooks.Actors and GrabClient.
	actors     func(*actors.Options)
	grabClient func(*testServer) redis.UniversalClient
	// gate's difficulty and refresh become POW_DIFFICULTY and
	// GATE_REFRESH; its key must be the one JWT_SECRET gives.
	gate gate.Options
	// env are settings over nodetest.Env's and the gate's.
	env map[string]string
	// hooks are the node's hooks besides those the fields above give.
	hooks node.Hooks
}

// launch starts the node set up.
func launch(tb testing.TB, set setup) *testServer {
	tb.Helper()
	if set.gate.Key != nil && !bytes.Equal(set.gate.Key, gate.KeyFrom(testSecret)) {
		tb.Fatal("a test node's gate key is the one JWT_SECRET gives")
	}
	s := &testServer{dbURL: set.dbURL, redis: set.redis, rdb: set.redis.Client(), gateCalls: new(testenv.Counter)}
	env := map[string]string{}
	if set.gate.Difficulty != 0 {
		env["POW_DIFFICULTY"] = strconv.Itoa(set.gate.Difficulty)
	}
	if set.gate.Refresh != 0 {
		env["GATE_REFRESH"] = set.gate.Refresh.String()
	}
	maps.Copy(env, set.env)
	hooks := set.hooks
	hooks.Actors, hooks.GateRedis = set.actors, s.gateCalls
	if set.grabClient != nil {
		hooks.GrabClient = func(redis.UniversalClient) redis.UniversalClient { return set.grabClient(s) }
	}
	s.node = nodetest.Start(tb, nodetest.Options{DatabaseURL: set.dbURL, Redis: set.redis, Env: env, Hooks: hooks})
	p := s.node.Parts
	s.db, s.handler, s.catalog, s.router, s.gate = p.DB, p.GraphQL, p.Catalog, p.Router, p.Gate
	s.writer, s.rpWriter, s.tokens = p.Orders, p.RedPackets, s.node.Tokens
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

func (s *testServer) token(tb testing.TB, user int64, role auth.Role) string {
	tb.Helper()
	return s.node.Token(tb, user, role)
}

func (s *testServer) admin(tb testing.TB) string { return s.token(tb, 1, auth.RoleAdmin) }

type gqlError nodetest.Error

func (e gqlError) code() string { return nodetest.Error(e).Code() }

// do runs one operation with an optional bearer token and returns the data
// (decoded into out when not nil) and the errors.
func (s *testServer) do(tb testing.TB, token, query string, vars map[string]any, out any) []gqlError {
	tb.Helper()
	return gqlErrors(s.node.Do(tb, token, query, vars, out))
}

func gqlErrors(errs []nodetest.Error) []gqlError {
	if errs == nil {
		return nil
	}
	gql := make([]gqlError, len(errs))
	for i, e := range errs {
		gql[i] = gqlError(e)
	}
	return gql
}

// rawResponse is a response read off the wire, whatever wrote it.
type rawResponse struct {
	status int
	body   string
	Data   json.RawMessage `json:"data"`
	Errors []gqlError      `json:"errors"`
}

func rawOf(r nodetest.Response) rawResponse {
	return rawResponse{status: r.Status, body: r.Body, Data: r.Data, Errors: gqlErrors(r.Errors)}
}

// serve runs req through the handler and decodes the GraphQL response.
func (s *testServer) serve(tb testing.TB, req *http.Request) rawResponse {
	tb.Helper()
	return rawOf(s.node.Serve(tb, req))
}

// send runs one raw HTTP request through the handler (nodetest's Send).
func (s *testServer) send(tb testing.TB, method, target, contentType, body, token string) rawResponse {
	tb.Helper()
	return rawOf(s.node.Send(tb, method, target, contentType, body, token))
}

func (r rawResponse) wantCode(tb testing.TB, status int, code string) gqlError {
	tb.Helper()
	if r.status != status {
		tb.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return wantCode(tb, r.Errors, code)
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
	s.node.MustDo(tb, token, query, vars, out)
}

// wantCode asserts exactly one error with the given code.
func wantCode(tb testing.TB, errs []gqlError, code string) gqlError {
	tb.Helper()
	plain := make([]nodetest.Error, len(errs))
	for i, e := range errs {
		plain[i] = nodetest.Error(e)
	}
	return gqlError(nodetest.WantCode(tb, plain, code))
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
