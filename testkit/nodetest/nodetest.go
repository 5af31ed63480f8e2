// Package nodetest starts flash-sale nodes for tests through the one
// assembly (node), over stores of the test's own, and speaks to
// their GraphQL handler without a listener. A test node is production's,
// configured through the ordinary settings; node.Hooks only reach what no
// setting says.
package nodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"

	"flashsale/actors"
	"flashsale/config"
	"flashsale/config/owners"
	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/testenv"
)

// Secret is the JWT_SECRET of test nodes (config wants 32 bytes or more).
const Secret = "test-secret-0123456789abcdef-0123456789"

// Env are the settings of a test node besides its stores: production's,
// except where a test needs quiet or one address to send many requests
// from (no per-user or per-address rate, no anonymous or cost budget, no
// shedding), and the schema open to every caller.
func Env() map[string]string {
	return map[string]string{
		"JWT_SECRET":             Secret,
		"HTTP_ADDR":              "127.0.0.1:0",
		"CLUSTER_PROVIDER":       "test",
		"INTROSPECTION":          "public",
		"GRAPHQL_COMPILED_GRABS": "true",
		"RATE_USER_PER_SEC":      "0",
		"ANON_MAX_IN_FLIGHT":     "0",
		"ANON_PER_SEC":           "0",
		"SHED_IP_PER_SEC":        "0",
		"SHED_QUEUE_DEPTH":       "0",
		"SHED_GRAB_LATENCY":      "0s",
		"COST_BUDGET":            "0",
	}
}

// Options say what a test node runs on; the zero Options is a node over
// a new database and a new redis-server of the test's own.
type Options struct {
	// DatabaseURL is the database; other nodes of the test may share it.
	DatabaseURL string
	// Redis is the stock Redis; other nodes of the test may share it.
	Redis *testenv.RedisServer
	// Env are settings over Env's (POW_DIFFICULTY, GATE_REFRESH, ...).
	Env   map[string]string
	Hooks node.Hooks
}

// Patient gives a node's router room for its Redis calls (as
// node.Hooks.Actors): tests that assert that every grab is decided (OK,
// SOLD_OUT, ...) run on machines loaded by the race detector and parallel
// tests, where a call can take longer than the production deadlines (200
// ms a call, 400 ms a batch), which would answer UNAVAILABLE by design.
// Tests of the deadlines set their own.
func Patient(o *actors.Options) {
	o.CallTimeout, o.BatchTimeout = 2*time.Second, 5*time.Second
}

// Node is a started test node, stopped when the test ends.
type Node struct {
	node.Parts
	DatabaseURL string
	Redis       *testenv.RedisServer
	Tokens      *auth.Tokens
	client      *client.Client
}

// nodeSeq numbers the test nodes: nodes sharing a database need NODE_IDs
// of their own (each order writer leases its name).
var nodeSeq atomic.Int64

// Start starts a node and stops it when the test ends (before the stores
// Start created are dropped).
func Start(tb testing.TB, o Options) *Node {
	tb.Helper()
	if o.DatabaseURL == "" {
		o.DatabaseURL = testenv.MustPostgresURL(tb)
	}
	if o.Redis == nil {
		o.Redis = testenv.MustRedis(tb)
	}
	env := Env()
	env["DATABASE_URL"] = o.DatabaseURL
	env["REDIS_URL"] = o.Redis.URL()
	env["NODE_ID"] = fmt.Sprintf("test-node-%d", nodeSeq.Add(1))
	maps.Copy(env, o.Env)
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard, owners.Table())
	if err != nil {
		tb.Fatal(err)
	}
	n, err := node.NewWith(context.Background(), cfg, slog.New(slog.DiscardHandler), o.Hooks)
	if err != nil {
		tb.Fatalf("start node: %v", err)
	}
	tb.Cleanup(n.Stop)
	p := n.Parts()
	return &Node{Parts: p, DatabaseURL: o.DatabaseURL, Redis: o.Redis, Tokens: auth.NewTokens(Secret), client: client.New(p.GraphQL)}
}

// Token is a token of user in role, valid for an hour.
func (n *Node) Token(tb testing.TB, user int64, role auth.Role) string {
	tb.Helper()
	tok, err := n.Tokens.Issue(auth.Identity{UserID: user, Role: role}, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// Error is one GraphQL error of an answer.
type Error struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

// Code is the error's extensions.code.
func (e Error) Code() string { c, _ := e.Extensions["code"].(string); return c }

// Do runs one operation with an optional bearer token and returns the
// data (decoded into out when not nil) and the errors.
func (n *Node) Do(tb testing.TB, token, query string, vars map[string]any, out any) []Error {
	tb.Helper()
	var opts []client.Option
	if token != "" {
		opts = append(opts, client.AddHeader("Authorization", "Bearer "+token))
	}
	for k, v := range vars {
		opts = append(opts, client.Var(k, v))
	}
	resp, err := n.client.RawPost(query, opts...)
	if err != nil {
		// Requests rejected before execution answer a 4xx status, not
		// 200; the client reports them as "http 4xx: <body>".
		_, body, ok := strings.Cut(err.Error(), ": ")
		if !ok || !strings.HasPrefix(err.Error(), "http 4") {
			tb.Fatalf("post: %v", err)
		}
		resp = &client.Response{}
		if err := json.Unmarshal([]byte(body), resp); err != nil {
			tb.Fatalf("post: %v", err)
		}
	}
	var errs []Error
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

// MustDo is Do for operations that must succeed.
func (n *Node) MustDo(tb testing.TB, token, query string, vars map[string]any, out any) {
	tb.Helper()
	if errs := n.Do(tb, token, query, vars, out); len(errs) > 0 {
		tb.Fatalf("unexpected errors: %+v", errs)
	}
}

// WantCode asserts exactly one error with the given code and returns it.
func WantCode(tb testing.TB, errs []Error, code string) Error {
	tb.Helper()
	if len(errs) != 1 || errs[0].Code() != code {
		tb.Fatalf("want one %s error, got %+v", code, errs)
	}
	return errs[0]
}

// Response is an HTTP answer of the GraphQL handler, decoded.
type Response struct {
	Status int
	Body   string
	Data   json.RawMessage `json:"data"`
	Errors []Error         `json:"errors"`
}

// Serve runs req through the GraphQL handler and decodes its answer,
// which must be JSON.
func (n *Node) Serve(tb testing.TB, req *http.Request) Response {
	tb.Helper()
	rec := httptest.NewRecorder()
	n.GraphQL.ServeHTTP(rec, req)
	out := Response{Status: rec.Code, Body: rec.Body.String()}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		tb.Fatalf("%s %s: status %d, body is not JSON: %q", req.Method, req.URL, rec.Code, out.Body)
	}
	return out
}

// Send runs one raw HTTP request through the GraphQL handler: method,
// target, an optional Content-Type and bearer token.
func (n *Node) Send(tb testing.TB, method, target, contentType, body, token string) Response {
	tb.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return n.Serve(tb, req)
}

// WantCode asserts the answer's status and exactly one error with the
// given code, and returns it.
func (r Response) WantCode(tb testing.TB, status int, code string) Error {
	tb.Helper()
	if r.Status != status {
		tb.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	return WantCode(tb, r.Errors, code)
}

// WithLongTexts fills the node's catalog with count vouchers whose
// subTitle and rules are as long as allowed: the worst case for the size
// of an answer.
func (n *Node) WithLongTexts(tb testing.TB, count int) {
	tb.Helper()
	text := strings.Repeat("x", domain.MaxTextLen)
	for i := range count {
		_, err := n.Catalog.Create(context.Background(), domain.NewVoucher{
			ShopID: 7, Title: fmt.Sprintf("voucher %d", i), SubTitle: &text, Rules: &text,
			PayValue: 100, ActualValue: 500, Type: domain.VoucherNormal,
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}
