package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

func TestMalformedConnectionInitIsClosed(t *testing.T) {
	t.Parallel()
	h := serve(t, startNode(t, nil, node.Hooks{}).GraphQL)
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		for _, payload := range []string{`"Bearer junk"`, `[1]`, `42`} {
			t.Run(proto+" closes on payload "+payload, func(t *testing.T) {
				c := nodetest.DialWS(t, h, proto)
				nodetest.SendWS(t, c, `{"type":"connection_init","payload":`+payload+`}`)
				for {
					m, err := nodetest.ReadWS(c, 3*time.Second)
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
	n := startNode(t, nil, node.Hooks{})
	h := serve(t, n.GraphQL)
	// A token a second past its exp is still inside the verifier's
	// five-second leeway: accepted at connection_init, expired 3 to 4 s
	// later (exp is whole seconds), which leaves a slow machine time for
	// the first operation.
	issued := time.Now()
	tok, err := n.Tokens.Issue(auth.Identity{UserID: 9, Role: auth.RoleUser}, -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := nodetest.DialWS(t, h, "graphql-transport-ws")
	nodetest.SendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+tok+`"}}`)
	nodetest.ReadUntil(t, c, "connection_ack")

	const op = `{"query":"{ vouchers(first: 1) { pageInfo { hasNextPage } } }"}`
	nodetest.SendWS(t, c, `{"id":"1","type":"subscribe","payload":`+op+`}`)
	if m := nodetest.ReadUntil(t, c, "next", "error"); m.Type != "next" || strings.Contains(string(m.Payload), `"errors"`) {
		t.Fatalf("first operation: %s %s", m.Type, m.Payload)
	}

	time.Sleep(time.Until(issued.Add(-time.Second).Truncate(time.Second).Add(5*time.Second + 300*time.Millisecond)))
	nodetest.SendWS(t, c, `{"id":"2","type":"subscribe","payload":`+op+`}`)
	m := nodetest.ReadUntil(t, c, "next", "error")
	var resp struct {
		Data   json.RawMessage
		Errors []nodetest.Error
	}
	if m.Type == "next" {
		_ = json.Unmarshal(m.Payload, &resp)
	} else {
		_ = json.Unmarshal(m.Payload, &resp.Errors)
	}
	e := nodetest.WantCode(t, resp.Errors, "UNAUTHENTICATED")
	if string(resp.Data) != "" && string(resp.Data) != "null" {
		t.Fatalf("an expired token's operation ran: data %s (%s)", resp.Data, e.Message)
	}
}

func TestLegacyGraphQLWSGetsKeepalives(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil, node.Hooks{HTTP: func(o *httpapi.HandlerOptions) { o.PingInterval = 100 * time.Millisecond }})
	h := serve(t, n.GraphQL)
	c := nodetest.DialWS(t, h, "graphql-ws")
	nodetest.SendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+n.Token(t, 3, auth.RoleUser)+`"}}`)
	nodetest.ReadUntil(t, c, "connection_ack")
	kas := 0
	for kas < 3 { // the first follows the ack at once; the others only on a timer
		m, err := nodetest.ReadWS(c, 2*time.Second)
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
func holdVoucherReads(tb testing.TB, n *nodetest.Node) {
	tb.Helper()
	tx, err := n.DB.BeginTx(context.Background(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.ExecContext(context.Background(), "LOCK TABLE tb_voucher IN ACCESS EXCLUSIVE MODE"); err != nil {
		tb.Fatal(err)
	}
}

// newHeldServer is a server over HTTP whose voucher reads stay in flight.
// Its sockets may start 1,000 operations a second: the tests of the
// operation bound send more at once than the default rate admits.
func newHeldServer(tb testing.TB) (*nodetest.Node, *httptest.Server) {
	tb.Helper()
	n := startNode(tb, map[string]string{"WS_SUBSCRIBES_PER_SEC": "1000"}, node.Hooks{})
	h := serve(tb, n.GraphQL)
	holdVoucherReads(tb, n)
	return n, h
}

const heldQuery = `{"query":"{ voucher(id: \"1\") { id } }"}`

// Not parallel: it counts the process's goroutines.
func TestWebsocketOperationsAreBoundedAndFreed(t *testing.T) {
	n, h := newHeldServer(t)
	user := n.Token(t, 2, auth.RoleUser)
	baseline := runtime.NumGoroutine()

	// Far more subscribes than the bound on each of 3 connections.
	const conns, sent, bound = 3, 200, httpapi.WebsocketMaxOperationsDefault
	var cs []*websocket.Conn
	for range conns {
		c := nodetest.InitWS(t, h, user)
		for i := range sent {
			nodetest.SendWS(t, c, fmt.Sprintf(`{"id":"%d","type":"subscribe","payload":%s}`, i, heldQuery))
		}
		refused := 0
		for refused < sent-bound {
			m := nodetest.ReadUntil(t, c, "next", "error")
			if m.Type == "next" {
				t.Fatalf("operation %s answered while the table is locked: %s", m.ID, m.Payload)
			}
			var errs []nodetest.Error
			_ = json.Unmarshal(m.Payload, &errs)
			e := nodetest.WantCode(t, errs, "RATE_LIMITED")
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
	testenv.WaitFor(t, fmt.Sprintf("at most 5 goroutines more than the baseline %d after closing the connections", baseline),
		func() bool { return runtime.NumGoroutine() <= baseline+5 })
}

func TestWebsocketFollowsGraphQLTransportWS(t *testing.T) {
	t.Parallel()
	n, h := newHeldServer(t)
	user := n.Token(t, 2, auth.RoleUser)

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
				c = nodetest.InitWS(t, h, user)
			} else {
				c = nodetest.DialWS(t, h, "graphql-transport-ws")
			}
			for _, m := range tc.send {
				nodetest.SendWS(t, c, m)
			}
			for {
				_, err := nodetest.ReadWS(c, 3*time.Second)
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
		c := nodetest.DialWS(t, h, "graphql-transport-ws")
		nodetest.SendWS(t, c, `{"type":"ping"}`)
		nodetest.ReadUntil(t, c, "pong")
		nodetest.SendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+user+`"}}`)
		nodetest.ReadUntil(t, c, "connection_ack")
	})

	t.Run("an id is free again once its operation completes", func(t *testing.T) {
		c := nodetest.InitWS(t, h, user)
		nodetest.SendWS(t, c, `{"type":"ping"}`)
		nodetest.ReadUntil(t, c, "pong")
		for range 3 {
			nodetest.SendWS(t, c, `{"id":"b","type":"subscribe","payload":{"query":"{ __typename }"}}`)
			if m := nodetest.ReadUntil(t, c, "next", "error"); m.Type != "next" || m.ID != "b" {
				t.Fatalf("%s %s %s", m.ID, m.Type, m.Payload)
			}
			nodetest.ReadUntil(t, c, "complete")
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
	n := startNode(t, nil, node.Hooks{HTTP: func(o *httpapi.HandlerOptions) { o.WebsocketWriteTimeout = 300 * time.Millisecond }})
	n.WithLongTexts(t, 100)
	var open atomic.Int32
	gql := n.GraphQL
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
	nodetest.SendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+n.Token(t, 2, auth.RoleUser)+`"}}`)
	nodetest.ReadUntil(t, c, "connection_ack")
	// 16 answers of 80 KB each, and the client reads none of them.
	for i := range 16 {
		nodetest.SendWS(t, c, fmt.Sprintf(`{"id":"%d","type":"subscribe","payload":{"query":"{ vouchers(first: 10) { edges { node { subTitle rules } } } }"}}`, i))
	}
	deadline := time.Now().Add(5 * time.Second)
	testenv.WaitFor(t, "the connection of a client that stopped reading is dropped", func() bool { return open.Load() == 0 })
	if time.Now().After(deadline) {
		t.Fatal("the connection of a client that stopped reading was still served after 5 s")
	}
}

func TestLegacyGraphQLWSOperationsAreBounded(t *testing.T) {
	t.Parallel()
	n, h := newHeldServer(t)
	c := nodetest.DialWS(t, h, "graphql-ws")
	nodetest.SendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+n.Token(t, 2, auth.RoleUser)+`"}}`)
	nodetest.ReadUntil(t, c, "connection_ack")
	const bound = httpapi.WebsocketMaxOperationsDefault
	for i := range bound + 8 {
		nodetest.SendWS(t, c, fmt.Sprintf(`{"id":"%d","type":"start","payload":%s}`, i, heldQuery))
	}
	for range 8 {
		m := nodetest.ReadUntil(t, c, "data", "error")
		var errs []nodetest.Error
		_ = json.Unmarshal(m.Payload, &errs)
		if m.Type != "error" {
			t.Fatalf("operation %s answered while the table is locked: %s", m.ID, m.Payload)
		}
		nodetest.WantCode(t, errs, "RATE_LIMITED")
	}
	// A running id is refused for itself; the connection stays.
	nodetest.SendWS(t, c, `{"id":"0","type":"start","payload":`+heldQuery+`}`)
	m := nodetest.ReadUntil(t, c, "data", "error")
	var errs []nodetest.Error
	_ = json.Unmarshal(m.Payload, &errs)
	if m.ID != "0" || m.Type != "error" {
		t.Fatalf("%s %s %s", m.ID, m.Type, m.Payload)
	}
	nodetest.WantCode(t, errs, "BAD_USER_INPUT")
}

// A socket refused for its token closes with 4401 and a reason that says
// what was wrong, missing, expired or invalid, and no more.
func TestRefusedTokenClosesWith4401AndWhy(t *testing.T) {
	t.Parallel()
	h := serve(t, startNode(t, nil, node.Hooks{}).GraphQL)
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
		{"expired", `{"Authorization":"Bearer ` + sign(nodetest.Secret, time.Now().Add(-time.Minute)) + `"}`, "token expired"},
		{"another secret's", `{"Authorization":"Bearer ` + sign("another-secret-0123456789abcdef0123", time.Now().Add(time.Minute)) + `"}`, "invalid token"},
		{"not a JWT", `{"Authorization":"Bearer nope"}`, "invalid token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := nodetest.DialWS(t, h, "graphql-transport-ws")
			nodetest.SendWS(t, c, `{"type":"connection_init","payload":`+tc.payload+`}`)
			for {
				_, err := nodetest.ReadWS(c, 3*time.Second)
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

// On shutdown the server cancels its requests' base context: every
// websocket gets a close frame, not a dropped connection.
func TestShutdownClosesWebsocketsWithACloseFrame(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil, node.Hooks{})
	v := mustVoucher(t, n, testenv.VoucherSpec{Stock: 10})
	base, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	srv := serveAsNode(t, base, n)
	c := nodetest.InitWS(t, srv, n.Token(t, 2, auth.RoleUser))
	nodetest.SendWS(t, c, `{"id":"s","type":"subscribe","payload":{"query":"subscription($v: ID!) { stockChanged(voucherId: $v) { remaining soldOut } }","variables":{"v":"`+strconv.FormatInt(v.ID, 10)+`"}}}`)
	// The subscription's first event comes at once.
	for deadline := time.Now().Add(time.Second); ; {
		m, err := nodetest.ReadWS(c, time.Until(deadline))
		if err != nil {
			t.Fatalf("waiting for the first stock event: %v", err)
		}
		if m.ID != "s" {
			continue
		}
		if m.Type != "next" || strings.Contains(string(m.Payload), `"errors"`) {
			t.Fatalf("the first stock event: %s %s", m.Type, m.Payload)
		}
		break
	}
	shutdown()
	for {
		_, err := nodetest.ReadWS(c, 3*time.Second)
		if err == nil {
			continue
		}
		if status := websocket.CloseStatus(err); status != websocket.StatusNormalClosure {
			t.Fatalf("connection ended by %v (close status %d), want a normal close frame", err, status)
		}
		return
	}
}

// A socket's operations start at WS_SUBSCRIBES_PER_SEC after a burst (1 a
// second, burst 2 here): the next gets RATE_LIMITED with retryAfterMs for
// itself alone, and a client that goes on without waiting is closed with
// 4429 once it owes another burst, in both subprotocols.
func TestWebsocketOperationsOverTheSocketsRateAreRefusedThenClosed(t *testing.T) {
	t.Parallel()
	n := startNode(t, map[string]string{"WS_SUBSCRIBES_PER_SEC": "1", "WS_MAX_OPERATIONS": "2"}, node.Hooks{})
	h := serve(t, n.GraphQL)
	user := n.Token(t, 2, auth.RoleUser)
	for _, tc := range []struct{ subprotocol, start, data string }{
		{"graphql-transport-ws", "subscribe", "next"},
		{"graphql-ws", "start", "data"},
	} {
		t.Run(tc.subprotocol, func(t *testing.T) {
			c := nodetest.DialWS(t, h, tc.subprotocol)
			nodetest.SendWS(t, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+user+`"}}`)
			nodetest.ReadUntil(t, c, "connection_ack")
			// 2 admitted, 2 refused (the debt: 1, then 2), the 5th closes.
			for i := range 5 {
				nodetest.SendWS(t, c, fmt.Sprintf(`{"id":"%d","type":"%s","payload":{"query":"{ __typename }"}}`, i, tc.start))
			}
			got := map[string]string{}
			for {
				m, err := nodetest.ReadWS(c, 5*time.Second)
				if err != nil {
					if code := websocket.CloseStatus(err); code != 4429 {
						t.Fatalf("closed with %v, want 4429", err)
					}
					break
				}
				switch m.Type {
				case tc.data:
					got[m.ID] += "answered"
				case "error":
					var errs []nodetest.Error
					_ = json.Unmarshal(m.Payload, &errs)
					if e := nodetest.WantCode(t, errs, "RATE_LIMITED"); e.Extensions["retryAfterMs"].(float64) < 1000 {
						t.Fatalf("retryAfterMs %v, want 1 s or more", e.Extensions["retryAfterMs"])
					}
					got[m.ID] += "refused"
				}
			}
			if got["2"] != "refused" || got["3"] != "refused" || got["0"] == "refused" || got["1"] == "refused" {
				t.Fatalf("by id: %v; want 0 and 1 answered (unless the close came first), 2 and 3 refused", got)
			}
		})
	}
}
