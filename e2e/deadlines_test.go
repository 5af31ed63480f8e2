package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// TestASlowBodyIsCutAtTheBodyTimeout: complete headers announcing 100000
// bytes, then a byte every 200 ms. The node must drop the connection once
// HTTP_BODY_TIMEOUT (1 s here) has passed, not hold it for as long as the
// client keeps dripping (without the timeout: held past 30 s).
func TestASlowBodyIsCutAtTheBodyTimeout(t *testing.T) {
	t.Parallel()
	base, _ := startService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": t.TempDir() + "/flashsale.db", "HTTP_BODY_TIMEOUT": "1s",
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	began := time.Now()
	if _, err := io.WriteString(conn, "POST /query HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { // the drip, until the node hangs up or the test ends
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			if _, err := io.WriteString(conn, " "); err != nil {
				return
			}
		}
	}()
	// Whatever the node answers, the connection must end, and soon.
	const bound = 4 * time.Second
	_ = conn.SetReadDeadline(time.Now().Add(bound + 2*time.Second))
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open %v after the headers, with HTTP_BODY_TIMEOUT=1s", time.Since(began).Round(time.Millisecond))
	}
	if took := time.Since(began); took > bound {
		t.Fatalf("connection cut after %v, want at most %v", took.Round(time.Millisecond), bound)
	}
}

// TestAWebsocketOutlivesTheWriteTimeout: the write timeout is for answers
// to requests; a websocket on /query is one long-lived request and must
// keep working well past it (it has pings and a write deadline of its own).
func TestAWebsocketOutlivesTheWriteTimeout(t *testing.T) {
	t.Parallel()
	base, admin := startService(t, map[string]string{
		"HTTP_ADDR": "127.0.0.1:0", "SQLITE_PATH": t.TempDir() + "/flashsale.db",
		"GRAB_TIMEOUT": "300ms", "HTTP_WRITE_TIMEOUT": "500ms", "HTTP_BODY_TIMEOUT": "500ms",
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/query", &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	type message struct {
		Type    string         `json:"type"`
		ID      string         `json:"id,omitempty"`
		Payload map[string]any `json:"payload,omitempty"`
	}
	if err := wsjson.Write(ctx, c, message{Type: "connection_init", Payload: map[string]any{"Authorization": "Bearer " + admin}}); err != nil {
		t.Fatal(err)
	}
	var ack message
	if err := wsjson.Read(ctx, c, &ack); err != nil || ack.Type != "connection_ack" {
		t.Fatalf("init: %+v %v", ack, err)
	}
	time.Sleep(1500 * time.Millisecond) // three write timeouts
	if err := wsjson.Write(ctx, c, message{Type: "ping"}); err != nil {
		t.Fatal(err)
	}
	var pong message
	if err := wsjson.Read(ctx, c, &pong); err != nil || pong.Type != "pong" {
		t.Fatalf("after the write timeout: %+v %v", pong, err)
	}
}
