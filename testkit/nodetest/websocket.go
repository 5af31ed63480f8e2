package nodetest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// WSMessage is one message of either websocket subprotocol
// (graphql-transport-ws, the legacy graphql-ws).
type WSMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// DialWS opens a websocket to srv's /query with one subprotocol, closed
// when the test ends.
func DialWS(tb testing.TB, srv *httptest.Server, subprotocol string) *websocket.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/query", &websocket.DialOptions{Subprotocols: []string{subprotocol}})
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// InitWS opens a graphql-transport-ws connection with token and waits
// for its ack.
func InitWS(tb testing.TB, srv *httptest.Server, token string) *websocket.Conn {
	tb.Helper()
	c := DialWS(tb, srv, "graphql-transport-ws")
	SendWS(tb, c, `{"type":"connection_init","payload":{"Authorization":"Bearer `+token+`"}}`)
	ReadUntil(tb, c, "connection_ack")
	return c
}

// SendWS writes one text message.
func SendWS(tb testing.TB, c *websocket.Conn, raw string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(raw)); err != nil {
		tb.Fatalf("write %s: %v", raw, err)
	}
}

// ReadWS returns the next message, or the error (a close frame) that
// ended the read, waiting at most timeout. It does not fail the test, so
// any goroutine may call it.
func ReadWS(c *websocket.Conn, timeout time.Duration) (WSMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, raw, err := c.Read(ctx)
	if err != nil {
		return WSMessage{}, err
	}
	var m WSMessage
	err = json.Unmarshal(raw, &m)
	return m, err
}

// ReadUntil skips keepalives, pings and other messages until one of
// types, waiting at most 5 s for each.
func ReadUntil(tb testing.TB, c *websocket.Conn, types ...string) WSMessage {
	tb.Helper()
	for {
		m, err := ReadWS(c, 5*time.Second)
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
