package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"flashsale/graph"
	"flashsale/internal/auth"
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
	h := httptest.NewServer(graph.NewHandler(&graph.Resolver{Catalog: s.catalog, Grabber: s.router}, graph.HandlerOptions{
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
