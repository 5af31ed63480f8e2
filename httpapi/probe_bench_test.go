package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
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
)

// The transport probes: requests that cost a node before any GraphQL is
// parsed (sockets, frames, headers, methods), each refused as it must be.
// The benchmarks below send them to a node in a process of its own (this
// test binary re-run as TestProbeServer), which reports its own CPU time
// (getrusage), allocation and peak RSS: the node's cost per probe, without
// the client's. Numbers and how to run them: docs/BENCHMARKS.md.

// probeServerEnv makes TestProbeServer serve instead of skipping.
const probeServerEnv = "FLASHSALE_PROBE_SERVER"

// rigAddressCap is the probe node's per-address cap: above the per-user
// cap, so that one address can hold a user at the cap.
const rigAddressCap = 32

// probeHello is what the probe node tells its parent when it serves.
type probeHello struct {
	Addr   string   // host:port
	Capped string   // a user at the per-user cap (127.0.0.1 holds its sockets)
	Users  []string // users holding at most one socket each
}

// probeStats is the probe node's own cost so far.
type probeStats struct {
	CPU      time.Duration // user + system, every thread
	Alloc    uint64        // bytes allocated
	MaxRSSKB int64         // peak resident set
}

// TestProbeServer is the probe node: its routes served over TCP as the
// node serves them (serveAsNode: deadlines, MaxHeaderBytes), with one user at the
// per-user cap and one address (127.0.0.2) at the per-address cap. It
// prints a probeHello line, answers each line "stats" on stdin with a
// probeStats line, and returns when stdin closes. Run by the benchmarks
// only.
func TestProbeServer(t *testing.T) {
	if os.Getenv(probeServerEnv) == "" {
		t.Skip("the probe node of BenchmarkTransportProbes; not a test")
	}
	n := startNode(t, map[string]string{"WS_MAX_PER_IP": strconv.Itoa(rigAddressCap)}, node.Hooks{})
	srv := serveAsNode(t, context.Background(), n)
	hello := probeHello{Addr: srv.Listener.Addr().String(), Capped: n.Token(t, 1000, auth.RoleUser)}
	for i := range 64 {
		hello.Users = append(hello.Users, n.Token(t, int64(2000+i), auth.RoleUser))
	}
	// The sockets at the caps, opened from here: they are the node's
	// state, not the probes'.
	r := &probeRig{hello: hello}
	fill := func(local string, tokens func(i int) string, n int) {
		for i := range n {
			c, err := r.open(local, tokens(i))
			if err != nil {
				t.Fatalf("a socket under the caps from %s: %v", local, err)
			}
			t.Cleanup(func() { _ = c.CloseNow() })
		}
	}
	fill("127.0.0.1", func(int) string { return hello.Capped }, httpapi.WebsocketMaxPerUserDefault)
	fill("127.0.0.2", func(i int) string { return hello.Users[i%len(hello.Users)] }, rigAddressCap)

	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(hello); err != nil {
		t.Fatal(err)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		_ = out.Encode(probeStats{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), Alloc: ms.TotalAlloc, MaxRSSKB: ru.Maxrss})
	}
}

// probeRig is the client side: the probe node's address and users, and
// its stats.
type probeRig struct {
	hello  probeHello
	client http.Client

	mu    sync.Mutex
	stdin io.Writer
	stats *bufio.Scanner
}

// startProbeNode runs TestProbeServer in a process of its own.
func startProbeNode(tb testing.TB) *probeRig {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProbeServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), probeServerEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	r := &probeRig{stdin: stdin, stats: bufio.NewScanner(stdout)}
	if !r.stats.Scan() || json.Unmarshal(r.stats.Bytes(), &r.hello) != nil {
		tb.Fatalf("the probe node did not start: %q %v", r.stats.Text(), r.stats.Err())
	}
	return r
}

// cost asks the probe node for its cost so far.
func (r *probeRig) cost(tb testing.TB) probeStats {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var st probeStats
	if _, err := io.WriteString(r.stdin, "stats\n"); err != nil {
		tb.Fatal(err)
	}
	if !r.stats.Scan() || json.Unmarshal(r.stats.Bytes(), &st) != nil {
		tb.Fatalf("no stats from the probe node: %q %v", r.stats.Text(), r.stats.Err())
	}
	return st
}

func (r *probeRig) url() string { return "http://" + r.hello.Addr }

// dial opens a graphql-transport-ws socket from local; the caller closes it.
func (r *probeRig) dial(local string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, _, err := websocket.Dial(ctx, "ws://"+r.hello.Addr+"/query", &websocket.DialOptions{
		Subprotocols: []string{"graphql-transport-ws"},
		HTTPClient:   &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}},
	})
	if err != nil {
		return nil, fmt.Errorf("dial from %s: %w", local, err)
	}
	return c, nil
}

// errCapped is open's answer for a socket closed with 4429.
var errCapped = errors.New("closed with 4429")

// open dials from local and sends connection_init with token: the socket
// once acknowledged, or errCapped once closed with 4429.
func (r *probeRig) open(local, token string) (*websocket.Conn, error) {
	c, err := r.dial(local)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"connection_init","payload":{"Authorization":"Bearer `+token+`"}}`))
	for {
		m, err := nodetest.ReadWS(c, 5*time.Second)
		switch {
		case err == nil && m.Type == "connection_ack":
			return c, nil
		case err == nil:
		case websocket.CloseStatus(err) == 4429:
			_ = c.CloseNow()
			return nil, errCapped
		default:
			_ = c.CloseNow()
			return nil, fmt.Errorf("connection_init: %w", err)
		}
	}
}

// wantClose reads c until it is closed, with code or an error.
func wantClose(c *websocket.Conn, code websocket.StatusCode) error {
	defer c.CloseNow()
	for {
		_, err := nodetest.ReadWS(c, 5*time.Second)
		if err == nil {
			continue
		}
		if got := websocket.CloseStatus(err); got != code {
			return fmt.Errorf("closed with %v, want %d", err, code)
		}
		return nil
	}
}

// raw sends req on a connection of its own and returns the answer's
// status; the request is written while the answer is read, as a client
// whose request the node stops reading would.
func (r *probeRig) raw(req []byte) (int, error) {
	conn, err := net.Dial("tcp", r.hello.Addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = conn.Write(req) }() // ends with the connection
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, fmt.Errorf("no answer: %w", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// wantStatus is raw's answer checked.
func wantStatus(status int, err error) func(want int) error {
	return func(want int) error {
		if err == nil && status != want {
			err = fmt.Errorf("status %d, want %d", status, want)
		}
		return err
	}
}

// transportProbe is one probe: fn sends request i and checks the answer.
type transportProbe struct {
	name string
	fn   func(r *probeRig, i int) error
}

// local is the i-th of 64 loopback addresses after those the rig fills.
func local(i int) string { return "127.0.0." + strconv.Itoa(3+i%64) }

var transportProbes = []transportProbe{
	{"websocket over the user cap", func(r *probeRig, _ int) error {
		c, err := r.open("127.0.0.1", r.hello.Capped)
		if c != nil {
			_ = c.CloseNow()
			return errors.New("a socket over the per-user cap was acknowledged")
		}
		if errors.Is(err, errCapped) {
			return nil
		}
		return err
	}},
	{"websocket over the address cap", func(r *probeRig, _ int) error {
		c, err := r.dial("127.0.0.2")
		if err != nil {
			return err
		}
		return wantClose(c, 4429)
	}},
	{"websocket message of 65 KiB", func(r *probeRig, i int) error {
		c, err := r.open(local(i), r.hello.Users[i%len(r.hello.Users)])
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Write(ctx, websocket.MessageText, oversizedMessage)
		return wantClose(c, websocket.StatusMessageTooBig)
	}},
	{"header of 100 KiB", func(r *probeRig, _ int) error {
		return wantStatus(r.raw(bigHeader))(http.StatusRequestHeaderFieldsTooLarge)
	}},
	{"URL of 1 MiB", func(r *probeRig, _ int) error {
		return wantStatus(r.raw(bigURL))(http.StatusRequestHeaderFieldsTooLarge)
	}},
	{"HEAD /query", func(r *probeRig, _ int) error {
		resp, err := r.client.Head(r.url() + "/query")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") == "" {
			return fmt.Errorf("status %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
		}
		return nil
	}},
	// For comparison, two legitimate requests.
	{"legitimate: socket acknowledged and closed", func(r *probeRig, i int) error {
		c, err := r.open(local(i), r.hello.Users[i%len(r.hello.Users)])
		if err != nil {
			return err
		}
		return c.Close(websocket.StatusNormalClosure, "")
	}},
	{"legitimate: POST { __typename } with a token", func(r *probeRig, _ int) error {
		_, err := r.legit()
		return err
	}},
}

var (
	oversizedMessage = []byte(`{"id":"1","type":"subscribe","payload":{"query":"{ __typename }"}` + strings.Repeat(" ", 65<<10) + `}`)
	bigHeader        = []byte("GET /query HTTP/1.1\r\nHost: flashsale\r\nX-Pad: " + strings.Repeat("a", 100<<10) + "\r\n\r\n")
	bigURL           = []byte("GET /query?query=" + strings.Repeat("a", 1<<20) + " HTTP/1.1\r\nHost: flashsale\r\n\r\n")
	legitBody        = []byte(`{"query":"{ __typename }"}`)
)

// legit sends one legitimate request on the rig's keep-alive client and
// returns how long its answer took.
func (r *probeRig) legit() (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodPost, r.url()+"/query", bytes.NewReader(legitBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.hello.Users[0])
	began := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	took := time.Since(began)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"Query"`)) {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return took, nil
}

// BenchmarkTransportProbes prices each probe on the probe node:
// node-cpu-µs/probe is its CPU time (user and system, every thread) per
// probe, node-KB/probe what it allocated, node-peak-RSS-MB its peak
// resident set after the run (the node with its sockets at the caps).
// ns/op is the client's wall time per probe, one at a time.
func BenchmarkTransportProbes(b *testing.B) {
	r := startProbeNode(b)
	for _, p := range transportProbes {
		b.Run(p.name, func(b *testing.B) {
			for i := range 8 { // warm: pools, the first parse
				if err := p.fn(r, i); err != nil {
					b.Fatal(err)
				}
			}
			before := r.cost(b)
			b.ResetTimer()
			for i := range b.N {
				if err := p.fn(r, i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// What the node does after answering (a close handshake, the
			// 431's lingering close) is its cost too.
			time.Sleep(600 * time.Millisecond)
			after := r.cost(b)
			b.ReportMetric(float64((after.CPU-before.CPU).Microseconds())/float64(b.N), "node-cpu-µs/probe")
			b.ReportMetric(float64(after.Alloc-before.Alloc)/1024/float64(b.N), "node-KB/probe")
			b.ReportMetric(float64(after.MaxRSSKB)/1024, "node-peak-RSS-MB")
		})
	}
}

// BenchmarkTransportFlood measures a legitimate user's latency (POST
// { __typename } with a token, one at a time) quiet, then while four
// clients send one probe as fast as they can, and reports both p99s,
// their ratio, the probes answered per second and the node's CPU then
// (node-cores: 1 is one core busy all the time). The clients run on the
// node's machine, and take CPU from it.
func BenchmarkTransportFlood(b *testing.B) {
	const window = 2 * time.Second
	r := startProbeNode(b)
	sample := func() []time.Duration {
		var out []time.Duration
		for end := time.Now().Add(window); time.Now().Before(end); {
			d, err := r.legit()
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, d)
		}
		slices.Sort(out)
		return out
	}
	p99 := func(d []time.Duration) time.Duration { return d[len(d)*99/100] }
	for _, p := range transportProbes[:6] {
		b.Run(p.name, func(b *testing.B) {
			for range b.N {
				quiet := sample()
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				var sent atomic.Int64
				for w := range 4 {
					wg.Go(func() {
						for i := w; ctx.Err() == nil; i += 4 {
							if err := p.fn(r, i); err != nil {
								b.Error(err)
								return
							}
							sent.Add(1)
						}
					})
				}
				time.Sleep(200 * time.Millisecond) // the flood under way
				began, before := time.Now(), r.cost(b)
				flood := sample()
				after, took := r.cost(b), time.Since(began)
				cancel()
				wg.Wait()
				b.ReportMetric(float64(p99(quiet).Microseconds()), "quiet-p99-µs")
				b.ReportMetric(float64(p99(flood).Microseconds()), "flood-p99-µs")
				b.ReportMetric(float64(p99(flood))/float64(p99(quiet)), "p99-ratio")
				b.ReportMetric(float64(sent.Load())/(window.Seconds()+0.2), "probes/s")
				b.ReportMetric(float64(after.CPU-before.CPU)/float64(took), "node-cores")
			}
		})
	}
}
