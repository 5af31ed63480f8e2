package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/internal/seckill"
)

// wsMessage is one message of either websocket subprotocol.
type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// dialWS opens a websocket to h's /query with one subprotocol.
func dialWS(tb testing.TB, h *httptest.Server, subprotocol string) *websocket.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+"/query", &websocket.DialOptions{Subprotocols: []string{subprotocol}})
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func sendWS(tb testing.TB, c *websocket.Conn, raw string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(raw)); err != nil {
		tb.Fatalf("write %s: %v", raw, err)
	}
}

// readWS returns the next message, or the error (a close frame) that
// ended the read, waiting at most timeout.
func readWS(c *websocket.Conn, timeout time.Duration) (wsMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, raw, err := c.Read(ctx)
	if err != nil {
		return wsMessage{}, err
	}
	var m wsMessage
	err = json.Unmarshal(raw, &m)
	return m, err
}

// readUntil skips keepalives and pings until a message of one of types.
func readUntil(tb testing.TB, c *websocket.Conn, types ...string) wsMessage {
	tb.Helper()
	for {
		m, err := readWS(c, 5*time.Second)
		if err != nil {
			tb.Fatalf("waiting for %v: %v", types, err)
		}
		for _, t := range types {
			if m.Type == t {
				return m
			}
		}
	}
}

func TestMalformedConnectionInitIsClosed(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	h := httptest.NewServer(s.handler)
	t.Cleanup(h.Close)
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		for _, payload := range []string{`"Bearer junk"`, `[1]`, `42`} {
			t.Run(proto+" closes on payload "+payload, func(t *testing.T) {
				c := dialWS(t, h, proto)
				sendWS(t, c, `{"type":"connection_init","payload":`+payload+`}`)
				for {
					m, err := readWS(c, 3*time.Second)
					if err == nil {
						if m.Type == "connection_ack" {
							t.Fatal("acknowledged a connection without a token")
						}
						continue // connection_error before the close is fine
					}
					if errors.Is(err, context.DeadlineExceeded) {
						t.Fatal("connection left open after a malformed connection_init")
					}
					if code := websocket.CloseStatus(err); code != 4400 && code != 4401 {
						t.Fatalf("closed with %d (%v), want 4400 or 4401", code, err)
					}
					return
				}
			})
		}
	}
}

func TestWebsocketOperationsRecheckTokenExpiry(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	h := httptest.NewServer(s.handler)
	t.Cleanup(h.Close)
	// A token a second past its exp is still inside the verifier's
	// five-second leeway: accepted at connection_init, expired 3 to 4 s
	// later (exp is whole seconds), which leaves a slow machine time for
	// the first operation.
	issued := time.Now()
	tok, err := s.tokens.Issue(auth.Identity{UserID: 9, Role: auth.RoleUser}, -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := dialWS(t, h, "graphql-transport-ws")
	sendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+tok+`"}}`)
	readUntil(t, c, "connection_ack")

	const op = `{"query":"{ vouchers(first: 1) { pageInfo { hasNextPage } } }"}`
	sendWS(t, c, `{"id":"1","type":"subscribe","payload":`+op+`}`)
	if m := readUntil(t, c, "next", "error"); m.Type != "next" || strings.Contains(string(m.Payload), `"errors"`) {
		t.Fatalf("first operation: %s %s", m.Type, m.Payload)
	}

	time.Sleep(time.Until(issued.Add(-time.Second).Truncate(time.Second).Add(5*time.Second + 300*time.Millisecond)))
	sendWS(t, c, `{"id":"2","type":"subscribe","payload":`+op+`}`)
	m := readUntil(t, c, "next", "error")
	var resp struct {
		Data   json.RawMessage
		Errors []gqlError
	}
	if m.Type == "next" {
		_ = json.Unmarshal(m.Payload, &resp)
	} else {
		_ = json.Unmarshal(m.Payload, &resp.Errors)
	}
	e := wantCode(t, resp.Errors, "UNAUTHENTICATED")
	if string(resp.Data) != "" && string(resp.Data) != "null" {
		t.Fatalf("an expired token's operation ran: data %s (%s)", resp.Data, e.Message)
	}
}

func TestLegacyGraphQLWSGetsKeepalives(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	h := httptest.NewServer(httpapi.NewHandler(&graph.Resolver{Catalog: s.catalog, Seckill: seckill.New(nil, s.router)}, httpapi.HandlerOptions{
		Tokens: s.tokens, Log: slog.New(slog.DiscardHandler), PingInterval: 100 * time.Millisecond,
	}))
	t.Cleanup(h.Close)
	c := dialWS(t, h, "graphql-ws")
	sendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+s.token(t, 3, auth.RoleUser)+`"}}`)
	readUntil(t, c, "connection_ack")
	kas := 0
	for kas < 3 { // the first follows the ack at once; the others only on a timer
		m, err := readWS(c, 2*time.Second)
		if err != nil {
			t.Fatalf("after %d keepalives: %v", kas, err)
		}
		if m.Type == "ka" {
			kas++
		}
	}
}

// holdVoucherReads locks the voucher table until the test ends, so that
// every voucher query stays in flight: operations that keep a goroutine
// without needing a subscription.
func holdVoucherReads(tb testing.TB, s *testServer) {
	tb.Helper()
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.ExecContext(context.Background(), "LOCK TABLE tb_voucher IN ACCESS EXCLUSIVE MODE"); err != nil {
		tb.Fatal(err)
	}
}

// newHeldServer is a server over HTTP whose voucher reads stay in flight.
func newHeldServer(tb testing.TB) (*testServer, *httptest.Server) {
	tb.Helper()
	s := newServer(tb)
	h := httptest.NewServer(s.handler)
	tb.Cleanup(h.Close)
	holdVoucherReads(tb, s)
	return s, h
}

// initWS opens a graphql-transport-ws connection and waits for its ack.
func initWS(tb testing.TB, h *httptest.Server, token string) *websocket.Conn {
	tb.Helper()
	c := dialWS(tb, h, "graphql-transport-ws")
	sendWS(tb, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+token+`"}}`)
	readUntil(tb, c, "connection_ack")
	return c
}

const heldQuery = `{"query":"{ voucher(id: \"1\") { id } }"}`

// waitGoroutines waits until at most want goroutines run, and returns how
// many run.
func waitGoroutines(want int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Not parallel: it counts the process's goroutines.
func TestWebsocketOperationsAreBoundedAndFreed(t *testing.T) {
	s, h := newHeldServer(t)
	user := s.token(t, 2, auth.RoleUser)
	baseline := runtime.NumGoroutine()

	// Far more subscribes than the bound on each of 3 connections.
	const conns, sent, bound = 3, 200, httpapi.WebsocketMaxOperationsDefault
	var cs []*websocket.Conn
	for range conns {
		c := initWS(t, h, user)
		for i := range sent {
			sendWS(t, c, fmt.Sprintf(`{"id":"%d","type":"subscribe","payload":%s}`, i, heldQuery))
		}
		refused := 0
		for refused < sent-bound {
			m := readUntil(t, c, "next", "error")
			if m.Type == "next" {
				t.Fatalf("operation %s answered while the table is locked: %s", m.ID, m.Payload)
			}
			var errs []gqlError
			_ = json.Unmarshal(m.Payload, &errs)
			e := wantCode(t, errs, "RATE_LIMITED")
			if e.Extensions["retryAfterMs"] == nil {
				t.Fatalf("no retryAfterMs: %+v", e)
			}
			refused++
		}
		cs = append(cs, c)
	}
	held := runtime.NumGoroutine() - baseline
	t.Logf("%d connections holding %d operations each: %d goroutines more", conns, bound, held)
	if limit := conns * (2*bound + 10); held > limit {
		t.Fatalf("%d goroutines more, want at most %d", held, limit)
	}

	for _, c := range cs {
		_ = c.CloseNow()
	}
	if n := waitGoroutines(baseline+5, 10*time.Second); n > baseline+5 {
		t.Fatalf("after closing the connections %d goroutines, baseline %d", n, baseline)
	}
}

func TestWebsocketFollowsGraphQLTransportWS(t *testing.T) {
	t.Parallel()
	s, h := newHeldServer(t)
	user := s.token(t, 2, auth.RoleUser)

	for _, tc := range []struct {
		name      string
		initFirst bool
		send      []string
		code      websocket.StatusCode
	}{
		{"text that is no JSON closes 4400", true, []string{`nope`}, 4400},
		{"a JSON array closes 4400", true, []string{`[1]`}, 4400},
		{"an unknown type closes 4400", true, []string{`{"type":"nope"}`}, 4400},
		{"a server message from the client closes 4400", true, []string{`{"id":"1","type":"next","payload":{}}`}, 4400},
		{"a subscribe without id closes 4400", true, []string{`{"type":"subscribe","payload":` + heldQuery + `}`}, 4400},
		{"a subscribe with a payload that is no object closes 4400", true, []string{`{"id":"1","type":"subscribe","payload":"{ __typename }"}`}, 4400},
		{"a complete without id closes 4400", true, []string{`{"type":"complete"}`}, 4400},
		{"a second connection_init closes 4429", true, []string{`{"type":"connection_init","payload":{}}`}, 4429},
		{"a subscribe before connection_init closes 4401", false, []string{`{"id":"1","type":"subscribe","payload":` + heldQuery + `}`}, 4401},
		{"a subscribe with a running id closes 4409", true, []string{
			`{"id":"a","type":"subscribe","payload":` + heldQuery + `}`,
			`{"id":"a","type":"subscribe","payload":` + heldQuery + `}`,
		}, 4409},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *websocket.Conn
			if tc.initFirst {
				c = initWS(t, h, user)
			} else {
				c = dialWS(t, h, "graphql-transport-ws")
			}
			for _, m := range tc.send {
				sendWS(t, c, m)
			}
			for {
				_, err := readWS(c, 3*time.Second)
				if err == nil {
					continue
				}
				if code := websocket.CloseStatus(err); code != tc.code {
					t.Fatalf("closed with %d (%v), want %d", code, err, tc.code)
				}
				return
			}
		})
	}

	t.Run("a ping before connection_init gets a pong", func(t *testing.T) {
		c := dialWS(t, h, "graphql-transport-ws")
		sendWS(t, c, `{"type":"ping"}`)
		readUntil(t, c, "pong")
		sendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+user+`"}}`)
		readUntil(t, c, "connection_ack")
	})

	t.Run("an id is free again once its operation completes", func(t *testing.T) {
		c := initWS(t, h, user)
		sendWS(t, c, `{"type":"ping"}`)
		readUntil(t, c, "pong")
		for range 3 {
			sendWS(t, c, `{"id":"b","type":"subscribe","payload":{"query":"{ __typename }"}}`)
			if m := readUntil(t, c, "next", "error"); m.Type != "next" || m.ID != "b" {
				t.Fatalf("%s %s %s", m.ID, m.Type, m.Payload)
			}
			readUntil(t, c, "complete")
		}
	})
}

// smallBuffers makes a listener's connections buffer little, so that a
// client that stops reading blocks the server's writes soon.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

func TestWebsocketClientThatStopsReadingIsDropped(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	withLongTexts(t, s, 100)
	var open atomic.Int32
	gql := httpapi.NewHandler(&graph.Resolver{Catalog: s.catalog, Seckill: seckill.New(nil, s.router)}, httpapi.HandlerOptions{
		Tokens: s.tokens, Log: slog.New(slog.DiscardHandler), WebsocketWriteTimeout: 300 * time.Millisecond,
	})
	h := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open.Add(1)
		defer open.Add(-1)
		gql.ServeHTTP(w, r)
	}))
	h.Listener = smallBuffers{h.Listener}
	h.Start()
	t.Cleanup(h.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dialer := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
	}}
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+"/query", &websocket.DialOptions{
		Subprotocols: []string{"graphql-transport-ws"},
		HTTPClient:   &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	sendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+s.token(t, 2, auth.RoleUser)+`"}}`)
	readUntil(t, c, "connection_ack")
	// 16 answers of 0.8 MB each, and the client reads none of them.
	for i := range 16 {
		sendWS(t, c, fmt.Sprintf(`{"id":"%d","type":"subscribe","payload":{"query":"{ vouchers(first: 100) { edges { node { subTitle rules } } } }"}}`, i))
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connection of a client that stopped reading is still served after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLegacyGraphQLWSOperationsAreBounded(t *testing.T) {
	t.Parallel()
	s, h := newHeldServer(t)
	c := dialWS(t, h, "graphql-ws")
	sendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+s.token(t, 2, auth.RoleUser)+`"}}`)
	readUntil(t, c, "connection_ack")
	const bound = httpapi.WebsocketMaxOperationsDefault
	for i := range bound + 8 {
		sendWS(t, c, fmt.Sprintf(`{"id":"%d","type":"start","payload":%s}`, i, heldQuery))
	}
	for range 8 {
		m := readUntil(t, c, "data", "error")
		var errs []gqlError
		_ = json.Unmarshal(m.Payload, &errs)
		if m.Type != "error" {
			t.Fatalf("operation %s answered while the table is locked: %s", m.ID, m.Payload)
		}
		wantCode(t, errs, "RATE_LIMITED")
	}
	// A running id is refused for itself; the connection stays.
	sendWS(t, c, `{"id":"0","type":"start","payload":`+heldQuery+`}`)
	m := readUntil(t, c, "data", "error")
	var errs []gqlError
	_ = json.Unmarshal(m.Payload, &errs)
	if m.ID != "0" || m.Type != "error" {
		t.Fatalf("%s %s %s", m.ID, m.Type, m.Payload)
	}
	wantCode(t, errs, "BAD_USER_INPUT")
}

// A socket refused for its token closes with 4401 and a reason that says
// what was wrong, missing, expired or invalid, and no more.
func TestRefusedTokenClosesWith4401AndWhy(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	h := httptest.NewServer(s.handler)
	t.Cleanup(h.Close)
	sign := func(secret string, exp time.Time) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": "2", "role": "user", "exp": exp.Unix(), "iat": exp.Add(-time.Hour).Unix(),
		}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, tc := range []struct{ name, payload, reason string }{
		{"no Authorization", `{}`, "missing token"},
		{"not a bearer token", `{"Authorization":"Basic dTpw"}`, "missing token"},
		{"expired", `{"Authorization":"Bearer ` + sign(testSecret, time.Now().Add(-time.Minute)) + `"}`, "token expired"},
		{"another secret's", `{"Authorization":"Bearer ` + sign("another-secret-0123456789abcdef0123", time.Now().Add(time.Minute)) + `"}`, "invalid token"},
		{"not a JWT", `{"Authorization":"Bearer nope"}`, "invalid token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialWS(t, h, "graphql-transport-ws")
			sendWS(t, c, `{"type":"connection_init","payload":`+tc.payload+`}`)
			for {
				_, err := readWS(c, 3*time.Second)
				if err == nil {
					continue
				}
				var ce websocket.CloseError
				if !errors.As(err, &ce) || ce.Code != 4401 || !strings.HasPrefix(ce.Reason, tc.reason) {
					t.Fatalf("closed with %v, want 4401 %q", err, tc.reason)
				}
				return
			}
		})
	}
}
