package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

// countingListener counts the server's connections that are open: a
// hijacked websocket's connection is closed by the websocket code, never
// by net/http, so this is the one place that sees every socket end.
type countingListener struct {
	net.Listener
	open atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.open.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// waitOpen waits until the server holds want connections, and returns how
// many it holds.
func (l *countingListener) waitOpen(want int64, within time.Duration) int64 {
	deadline := time.Now().Add(within)
	for {
		n := l.open.Load()
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// capServer is a server over a counting listener, and the client
// sockets a test opened, closed when the test (not a subtest) ends.
type capServer struct {
	*httptest.Server
	l *countingListener

	mu      sync.Mutex
	sockets []*websocket.Conn
}

// newCapServer serves h over a counting listener.
func newCapServer(tb testing.TB, h http.Handler) *capServer {
	tb.Helper()
	srv := httptest.NewUnstartedServer(h)
	cs := &capServer{Server: srv, l: &countingListener{Listener: smallBuffers{srv.Listener}}}
	srv.Listener = cs.l
	srv.Start()
	tb.Cleanup(func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		for _, c := range cs.sockets {
			_ = c.CloseNow()
		}
		srv.Close()
	})
	return cs
}

// dialFrom opens a graphql-transport-ws socket from a local address
// (127.0.0.x: every loopback address reaches the test server), or
// returns the error that refused it.
func (h *capServer) dialFrom(local string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Small receive buffers, so that a client that stops reading blocks
	// the server's writes soon.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
	}}
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.URL, "http")+"/query", &websocket.DialOptions{
		Subprotocols: []string{"graphql-transport-ws"},
		HTTPClient:   &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}},
	})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.sockets = append(h.sockets, c)
	h.mu.Unlock()
	return c, nil
}

// closedWith reads c until the server closes it and returns the close
// error (nil if it stays open for a second: not closed).
func closedWith(c *websocket.Conn) error {
	for {
		_, err := nodetest.ReadWS(c, time.Second)
		if errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// wantClosed asserts the server closed c with code and a reason
// containing reason.
func wantClosed(tb testing.TB, c *websocket.Conn, code websocket.StatusCode, reason string) {
	tb.Helper()
	err := closedWith(c)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != code || !strings.Contains(ce.Reason, reason) {
		tb.Fatalf("closed with %v, want %d %q", err, code, reason)
	}
}

// openSocket opens a socket from local and sends connection_init with
// token: it returns the socket once acknowledged, or the error the server
// closed it with.
func openSocket(tb testing.TB, h *capServer, local, token string) (*websocket.Conn, error) {
	tb.Helper()
	c, err := h.dialFrom(local)
	if err != nil {
		tb.Fatalf("dial from %s: %v", local, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A socket refused at the upgrade is being closed: the write may fail,
	// the read says why.
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"connection_init","payload":{"Authorization":"Bearer `+token+`"}}`))
	for {
		m, err := nodetest.ReadWS(c, 5*time.Second)
		if err != nil {
			return nil, err
		}
		if m.Type == "connection_ack" {
			return c, nil
		}
	}
}

// fill opens sockets from local for token until the server closes one
// with 4429 and a reason that contains reason, and returns those it
// acknowledged.
func fill(tb testing.TB, h *capServer, local, token, reason string) []*websocket.Conn {
	tb.Helper()
	var open []*websocket.Conn
	for range 20 {
		c, err := openSocket(tb, h, local, token)
		if c != nil {
			open = append(open, c)
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != 4429 || !strings.Contains(ce.Reason, reason) {
			tb.Fatalf("after %d sockets: %v, want 4429 %q", len(open), err, reason)
		}
		return open
	}
	tb.Fatalf("%d sockets acknowledged, none refused", len(open))
	return nil
}

const (
	perUser    = "per user"
	perAddress = "from one address"
)

// endings are the ways a socket ends, each on a socket the test holds:
// the client's or the server's doing, with or without a close frame.
var endings = []struct {
	name string
	end  func(tb testing.TB, c *websocket.Conn)
}{
	{"the client closes with 1000", func(_ testing.TB, c *websocket.Conn) { _ = c.Close(websocket.StatusNormalClosure, "") }},
	{"the client drops the connection", func(_ testing.TB, c *websocket.Conn) { _ = c.CloseNow() }},
	{"the server closes an invalid message with 4400", func(tb testing.TB, c *websocket.Conn) {
		nodetest.SendWS(tb, c, `nope`)
		wantClosed(tb, c, 4400, "")
	}},
	{"the server closes a second connection_init with 4429", func(tb testing.TB, c *websocket.Conn) {
		nodetest.SendWS(tb, c, `{"type":"connection_init","payload":{}}`)
		wantClosed(tb, c, 4429, "initialisation")
	}},
	{"the server drops a client that stops reading", func(tb testing.TB, c *websocket.Conn) {
		// Answers of 80 KB each (see capNode) that the client never
		// reads: a write times out, the server closes the connection, and
		// the websocket library closes it again.
		for i := range 16 {
			nodetest.SendWS(tb, c, fmt.Sprintf(`{"id":"%d","type":"subscribe","payload":{"query":"{ vouchers(first: 10) { edges { node { subTitle rules } } } }"}}`, i))
		}
	}},
	{"the server closes a message over the limit with 1009", func(tb testing.TB, c *websocket.Conn) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		big := `{"id":"1","type":"subscribe","payload":{"query":"{ __typename }"}` + strings.Repeat(" ", 70<<10) + `}`
		if err := c.Write(ctx, websocket.MessageText, []byte(big)); err != nil {
			tb.Fatalf("write 70 KiB: %v", err)
		}
		wantClosed(tb, c, websocket.StatusMessageTooBig, "")
	}},
}

// capNode is a node with the caps given (WS_MAX_PER_IP,
// WS_MAX_PER_USER), over a catalogue of long texts and a short write
// timeout, so that a client that stops reading is dropped soon (see
// endings), served over a counting listener.
func capNode(tb testing.TB, perIP, perUser int) (*nodetest.Node, *capServer) {
	tb.Helper()
	n := startNode(tb, map[string]string{"WS_MAX_PER_IP": strconv.Itoa(perIP), "WS_MAX_PER_USER": strconv.Itoa(perUser)},
		node.Hooks{HTTP: func(o *httpapi.HandlerOptions) { o.WebsocketWriteTimeout = 300 * time.Millisecond }})
	n.WithLongTexts(tb, 100)
	return n, newCapServer(tb, n.GraphQL)
}

// TestWebsocketsAreCappedPerUserAndGivenBackOnce: a user's third socket
// is closed with 4429 at connection_init (cap 2), another user is not
// affected, and however a socket ends its slot comes back exactly once:
// with one of two sockets ended, one more is acknowledged and the next
// refused (a slot given back twice would admit two; one never given back,
// none).
func TestWebsocketsAreCappedPerUserAndGivenBackOnce(t *testing.T) {
	t.Parallel()
	n, h := capNode(t, 100, 2)
	user, other := n.Token(t, 2, auth.RoleUser), n.Token(t, 3, auth.RoleUser)

	held := fill(t, h, "127.0.0.1", user, perUser)
	if len(held) != 2 {
		t.Fatalf("%d sockets acknowledged, want 2", len(held))
	}
	if others := fill(t, h, "127.0.0.1", other, perUser); len(others) != 2 {
		t.Fatalf("another user got %d sockets, want 2", len(others))
	}
	const othersOpen = 2
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			e.end(t, held[0])
			if n := h.l.waitOpen(othersOpen+1, 5*time.Second); n != othersOpen+1 {
				t.Fatalf("the server holds %d connections, want %d", n, othersOpen+1)
			}
			again := fill(t, h, "127.0.0.1", user, perUser)
			if len(again) != 1 {
				t.Fatalf("%d sockets acknowledged after one of two ended, want 1", len(again))
			}
			held = []*websocket.Conn{held[1], again[0]}
		})
	}
}

// TestWebsocketsAreCappedPerAddress: the sockets open at once from one
// address are capped at the upgrade, before any connection_init (cap 3):
// the fourth is closed with 4429; another address is not affected; the
// slot comes back when a socket ends, exactly once.
func TestWebsocketsAreCappedPerAddress(t *testing.T) {
	t.Parallel()
	n, h := capNode(t, 3, 100)
	user := n.Token(t, 2, auth.RoleUser)
	held := fill(t, h, "127.0.0.1", user, perAddress)
	if len(held) != 3 {
		t.Fatalf("%d sockets from one address, want 3", len(held))
	}
	if others := fill(t, h, "127.0.0.2", user, perAddress); len(others) != 3 {
		t.Fatalf("%d sockets from another address, want 3", len(others))
	}
	const othersOpen = 3
	for _, e := range endings {
		t.Run(e.name, func(t *testing.T) {
			e.end(t, held[0])
			if n := h.l.waitOpen(othersOpen+2, 5*time.Second); n != othersOpen+2 {
				t.Fatalf("the server holds %d connections, want %d", n, othersOpen+2)
			}
			again := fill(t, h, "127.0.0.1", user, perAddress)
			if len(again) != 1 {
				t.Fatalf("%d sockets opened after one of three ended, want 1", len(again))
			}
			held = append(held[1:], again[0])
		})
	}
}

// TestOneUserCannotHoldManySockets: one token opening many sockets, so
// that one user cannot hold a node's goroutines (without the cap, 40
// sockets got 40, and 500 held 17,500 goroutines). With the default cap 16
// are acknowledged, the rest closed with 4429, and what the node holds is
// bounded by the cap, in connections and goroutines.
// Not parallel: it counts the process's goroutines.
func TestOneUserCannotHoldManySockets(t *testing.T) {
	n := startNode(t, nil, node.Hooks{})
	h := newCapServer(t, n.GraphQL)
	user := n.Token(t, 5, auth.RoleUser)
	baseline := runtime.NumGoroutine()

	const tries, capUser = 40, httpapi.WebsocketMaxPerUserDefault
	acked, refused := 0, 0
	for range tries {
		c, err := openSocket(t, h, "127.0.0.1", user)
		var ce websocket.CloseError
		switch {
		case c != nil:
			acked++
		case errors.As(err, &ce) && ce.Code == 4429 && strings.Contains(ce.Reason, perUser):
			refused++
		default:
			t.Fatalf("socket %d: %v", acked+refused, err)
		}
	}
	if acked != capUser || refused != tries-capUser {
		t.Fatalf("%d acknowledged and %d refused, want %d and %d", acked, refused, capUser, tries-capUser)
	}
	if n := h.l.waitOpen(capUser, 10*time.Second); n != capUser {
		t.Fatalf("the server holds %d connections, want %d", n, capUser)
	}
	held := runtime.NumGoroutine() - baseline
	t.Logf("%d sockets of one user: %d goroutines more (client and server)", capUser, held)
	if limit := capUser*4 + 10; held > limit { // about 3 a socket: client and server
		t.Fatalf("%d goroutines more, want at most %d", held, limit)
	}
}

// TestAWebsocketMessageOverTheBodyLimitIsNeverRun: a message is bounded
// like a POST body (64 KiB): a 70 KiB subscribe carrying a mutation
// closes the socket with 1009 and the mutation never runs, while the same
// mutation in a message just under the limit runs.
func TestAWebsocketMessageOverTheBodyLimitIsNeverRun(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil, node.Hooks{})
	h := serve(t, n.GraphQL)
	admin := n.Token(t, 1, auth.RoleAdmin)
	message := func(shop, size int) string {
		m := fmt.Sprintf(`{"id":"1","type":"subscribe","payload":{"query":"mutation { createVoucher(input: {shopId: \"%d\", title: \"t\", payValue: 1, actualValue: 2, type: NORMAL}) { id } }"}`, shop)
		return m + strings.Repeat(" ", size-len(m)-1) + "}"
	}
	vouchers := func(shop int) int64 {
		count, err := n.DB.NewSelect().Table("tb_voucher").Where("shop_id = ?", shop).Count(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return int64(count)
	}

	send := func(c *websocket.Conn, m string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatalf("write %d bytes: %v", len(m), err)
		}
	}
	c := nodetest.InitWS(t, h, admin)
	send(c, message(9101, 70<<10))
	closed := closedWith(c)
	if n := vouchers(9101); n != 0 {
		t.Fatalf("the mutation in a message over the limit ran: %d vouchers", n)
	}
	if ce := websocket.CloseStatus(closed); ce != websocket.StatusMessageTooBig {
		t.Fatalf("closed with %v, want 1009", closed)
	}

	c = nodetest.InitWS(t, h, admin)
	send(c, message(9102, 64<<10))
	if m := nodetest.ReadUntil(t, c, "next", "error"); m.Type != "next" || strings.Contains(string(m.Payload), `"errors"`) {
		t.Fatalf("a message of exactly 64 KiB: %s %s", m.Type, m.Payload)
	}
	if n := vouchers(9102); n != 1 {
		t.Fatalf("the mutation within the limit made %d vouchers", n)
	}
}

// TestAWebsocketHandshakeDrawsOnThePerIPLimits: a handshake is a request
// like any other for SHED_IP_PER_SEC and RATE_IP_PER_SEC; over either the
// upgrade is answered 429 with Retry-After and nothing is accepted.
func TestAWebsocketHandshakeDrawsOnThePerIPLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		env   map[string]string
		burst int
	}{
		{"SHED_IP_PER_SEC 1", map[string]string{"SHED_IP_PER_SEC": "1"}, 2},
		{"RATE_IP_PER_SEC 1", map[string]string{"RATE_IP_PER_SEC": "1"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCapServer(t, startNode(t, tc.env, node.Hooks{}).GraphQL)
			start := time.Now()
			accepted := 0
			for range 8 {
				resp, _ := handshake(t, h)
				if resp.StatusCode == http.StatusSwitchingProtocols {
					accepted++
					continue
				}
				if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
					t.Fatalf("status %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
				if allowed := tc.burst + 1 + int(time.Since(start)/time.Second); accepted > allowed {
					t.Fatalf("%d handshakes accepted, want at most %d", accepted, allowed)
				}
				if n := h.l.waitOpen(0, 10*time.Second); n != 0 {
					t.Fatalf("the server holds %d connections after the refusal", n)
				}
				return
			}
			t.Fatalf("8 handshakes accepted in %v", time.Since(start))
		})
	}
}

// handshake sends one websocket handshake to h's /query and returns the
// answer and its body; an accepted socket is closed at once.
func handshake(tb testing.TB, h *capServer) (*http.Response, string) {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.URL+"/query", nil)
	for k, v := range map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="} {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	var body []byte
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ = io.ReadAll(resp.Body)
	}
	_ = resp.Body.Close()
	return resp, string(body)
}

// TestSocketsWithoutConnectionInitAreCappedOnTheNode: the sockets that
// have not sent connection_init are capped on the node, every address
// together (cap 2, from two addresses): one more handshake is answered
// 503 with Retry-After before the upgrade; a socket's slot comes back
// when it sends connection_init or ends.
func TestSocketsWithoutConnectionInitAreCappedOnTheNode(t *testing.T) {
	t.Parallel()
	n := startNode(t, map[string]string{"WS_MAX_UNINITIALIZED": "2"}, node.Hooks{})
	h := newCapServer(t, n.GraphQL)
	dial := func(local string) *websocket.Conn {
		c, err := h.dialFrom(local)
		if err != nil {
			t.Fatalf("dial from %s: %v", local, err)
		}
		return c
	}
	refused := func() bool {
		resp, body := handshake(t, h)
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return false
		case resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, `"UNAVAILABLE"`):
			t.Fatalf("status %d, Retry-After %q, body %s; want 503, 1, UNAVAILABLE", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		return true
	}
	a, b := dial("127.0.0.1"), dial("127.0.0.2")
	if !refused() {
		t.Fatal("a third socket without connection_init was accepted")
	}
	nodetest.SendWS(t, a, `{"type":"connection_init","payload":{"Authorization":"Bearer `+n.Token(t, 2, auth.RoleUser)+`"}}`)
	nodetest.ReadUntil(t, a, "connection_ack")
	dial("127.0.0.3")
	if !refused() {
		t.Fatal("a socket was accepted past the cap after one was initialised")
	}
	_ = b.CloseNow()
	testenv.WaitFor(t, "the slot of a socket that ended to come back", func() bool { return !refused() })
}
