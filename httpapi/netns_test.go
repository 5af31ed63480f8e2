package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"flashsale/httpapi"
	"flashsale/internal/connlimit"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

// serveOnLink serves the node's routes on l's server address as the node
// serves them (the listener's per-address admission at its defaults, the
// node's server: httpapi.NewServer) and returns its base URL.
func serveOnLink(tb testing.TB, l *testenv.IPv6Link, n *nodetest.Node) string {
	tb.Helper()
	ln, err := l.Listen()
	if err != nil {
		tb.Fatal(err)
	}
	limited, err := connlimit.New(ln, connlimit.Config{PerSecond: connlimit.PerSecondDefault, Burst: connlimit.BurstDefault,
		Wait: connlimit.WaitDefault, MaxWaiting: connlimit.MaxWaitingDefault})
	if err != nil {
		tb.Fatal(err)
	}
	srv := httpapi.NewServer(context.Background(), n.Handler, httpapi.ServerOptions{})
	go func() { _ = srv.Serve(limited) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestEightAddressesOfA64GetOneAddresssAllowance floods a node from 8
// addresses of one IPv6 /64 at once, over a network of the test's own
// (testenv.IPv6Link: loopback has one IPv6 address), and checks that they
// get together what one address would: SHED_IP_PER_SEC's requests, and
// WS_MAX_PER_IP's sockets.
func TestEightAddressesOfA64GetOneAddresssAllowance(t *testing.T) {
	t.Parallel()
	link := testenv.MustIPv6Link(t, 8)
	clients := func(from netip.Addr) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: link.Dial(from), MaxIdleConnsPerHost: 4}}
	}

	t.Run("requests", func(t *testing.T) {
		t.Parallel()
		const rate, flood, perAddress = 50, 2 * time.Second, 3
		base := serveOnLink(t, link, startNode(t, map[string]string{"SHED_IP_PER_SEC": strconv.Itoa(rate)}, node.Hooks{}))
		ctx, cancel := context.WithTimeout(context.Background(), flood)
		defer cancel()
		var admitted, refused, dropped atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for _, from := range link.Clients {
			c := clients(from)
			for range perAddress {
				wg.Go(func() {
					for ctx.Err() == nil {
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/query", strings.NewReader(typename))
						req.Header.Set("Content-Type", "application/json")
						resp, err := c.Do(req)
						if err != nil {
							if ctx.Err() == nil {
								// The listener resets a connection over
								// the /64's rate of new ones.
								dropped.Add(1)
							}
							continue
						}
						body, _ := io.ReadAll(resp.Body)
						_ = resp.Body.Close()
						// The edge looks at the bucket and admission takes
						// from it: of requests that passed the edge at
						// once, those admission finds no token for are
						// refused in a GraphQL answer, 200 for a client
						// that asked plain JSON.
						limited := bytes.Contains(body, []byte(`"RATE_LIMITED"`))
						switch {
						case resp.StatusCode == http.StatusOK && !limited:
							admitted.Add(1)
						case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusOK:
							refused.Add(1)
						default:
							t.Errorf("from %s: status %d", from, resp.StatusCode)
						}
					}
				})
			}
		}
		wg.Wait()
		elapsed := time.Since(start)
		// One address's allowance: its burst (two seconds' worth) and the
		// rate for as long as the flood ran, and a little for answers in
		// flight when it stopped; 8 addresses counted apart would get 8
		// times that.
		allowance := 2*rate + int64(rate*elapsed.Seconds())
		t.Logf("%d admitted, %d refused and %d connections dropped in %v from 8 addresses of %s; one address's allowance %d",
			admitted.Load(), refused.Load(), dropped.Load(), elapsed, link.Prefix, allowance)
		if got := admitted.Load(); got > allowance+rate/5 {
			t.Fatalf("8 addresses of one /64 got %d requests admitted, one address's allowance is %d", got, allowance)
		}
		if admitted.Load() < 2*rate || refused.Load() == 0 {
			t.Fatalf("%d admitted, %d refused: the flood did not reach the limit", admitted.Load(), refused.Load())
		}
	})

	t.Run("websockets", func(t *testing.T) {
		t.Parallel()
		const perIP = 4
		base := serveOnLink(t, link, startNode(t, map[string]string{"WS_MAX_PER_IP": strconv.Itoa(perIP)}, node.Hooks{}))
		var sockets []*websocket.Conn
		for _, from := range link.Clients {
			for range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/query", &websocket.DialOptions{
					Subprotocols: []string{"graphql-transport-ws"},
					HTTPClient:   clients(from),
				})
				cancel()
				if err != nil {
					t.Fatalf("dial from %s: %v", from, err)
				}
				t.Cleanup(func() { _ = c.CloseNow() })
				sockets = append(sockets, c)
			}
		}
		// Once all are open (a read that times out closes its socket): one
		// over the cap was closed with 4429 at once, one within it waits
		// for connection_init.
		held := 0
		for _, c := range sockets {
			switch _, err := nodetest.ReadWS(c, 300*time.Millisecond); {
			case errors.Is(err, context.DeadlineExceeded):
				held++
			case websocket.CloseStatus(err) != 4429:
				t.Fatalf("%v, want held or closed with 4429", err)
			}
		}
		if held != perIP {
			t.Fatalf("8 addresses of one /64 hold %d sockets, one address may hold %d", held, perIP)
		}
	})
}
