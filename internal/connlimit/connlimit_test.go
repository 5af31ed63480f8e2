package connlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"flashsale/testkit/testenv"
)

// server is a real listener wrapped by the limiter, with an accept loop
// that reads each accepted connection's first line (the client's name)
// and reports it in the order connections were passed on.
type server struct {
	l        net.Listener
	accepted chan string
	done     chan struct{}
}

func newServer(tb testing.TB, cfg Config) *server {
	tb.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	l, err := New(inner, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	s := &server{l: l, accepted: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			name := make([]byte, 16)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _ := io.ReadAtLeast(c, name, 1)
			s.accepted <- strings.TrimSpace(string(name[:n]))
			_, _ = c.Write([]byte("ok\n"))
			_ = c.Close()
		}
	}()
	tb.Cleanup(func() {
		_ = l.Close()
		<-s.done
	})
	return s
}

// dial connects from the loopback address from (127.0.0.x: every one is
// local on Linux) and sends name; the connection waits for the answer.
func (s *server) dial(tb testing.TB, from, name string) net.Conn {
	tb.Helper()
	c, err := s.tryDial(tb, from, name)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// tryDial is dial for a connection that may be reset before the client
// has sent its name.
func (s *server) tryDial(tb testing.TB, from, name string) (net.Conn, error) {
	tb.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", s.l.Addr().String())
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write([]byte(name + "\n")); err != nil {
		return nil, err
	}
	return c, nil
}

// next is the name of the next connection passed on.
func (s *server) next(tb testing.TB) string {
	tb.Helper()
	select {
	case name := <-s.accepted:
		return name
	case <-time.After(10 * time.Second):
		tb.Fatal("no connection passed on within 10s")
		return ""
	}
}

// answered reports whether the server answered c (false: closed unread).
func answered(tb testing.TB, c net.Conn) bool {
	tb.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		tb.Fatal("neither answered nor closed within 10s")
	}
	return string(b) == "ok\n"
}

func TestAnotherAddressIsServedWhileAFloodWaits(t *testing.T) {
	t.Parallel()
	// One connection every 500 ms per address: the held ones are due at
	// 0.5 s, 1 s, 1.5 s, ... and the other address's comes before all.
	s := newServer(t, Config{PerSecond: 2, Burst: 1, Wait: 10 * time.Second, MaxWaiting: 100})
	var flood []net.Conn
	for i := range 4 {
		flood = append(flood, s.dial(t, "127.0.0.1", "flood"+strconv.Itoa(i)))
	}
	if got := s.next(t); got != "flood0" {
		t.Fatalf("first passed on %q, want flood0 (within the burst)", got)
	}
	testenv.WaitFor(t, "three connections held", func() bool { return s.l.(*Listener).waiting() == 3 })
	s.dial(t, "127.0.0.2", "user")
	if got := s.next(t); got != "user" {
		t.Fatalf("passed on %q while the other address waited, want user at once", got)
	}
	for i := 1; i < 4; i++ {
		if got := s.next(t); got != "flood"+strconv.Itoa(i) {
			t.Fatalf("then %q, want flood%d", got, i)
		}
	}
	for i, c := range flood {
		if !answered(t, c) {
			t.Errorf("flood%d closed unanswered; held ones are served in their turn", i)
		}
	}
}

func TestHeldConnectionsArePassedOnInOrderAtTheRate(t *testing.T) {
	t.Parallel()
	const n, perSecond = 10, 20
	s := newServer(t, Config{PerSecond: perSecond, Burst: 1, Wait: 10 * time.Second, MaxWaiting: 100})
	start := time.Now()
	for i := range n {
		s.dial(t, "127.0.0.1", "c"+strconv.Itoa(i))
	}
	for i := range n {
		if got := s.next(t); got != "c"+strconv.Itoa(i) {
			t.Fatalf("passed on %q as number %d, want c%d", got, i, i)
		}
	}
	// The last one's turn is (n-1) intervals after the first: a lower
	// bound only, a loaded machine makes it later.
	if took, least := time.Since(start), (n-1)*time.Second/perSecond; took < least {
		t.Errorf("%d connections passed on in %v, want at least %v at %d a second", n, took, least, perSecond)
	}
}

func TestConnectionsBeyondTheWaitOrTheBoundAreClosedAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		// The second's turn is 1 s away, the third's 2 s: past the wait.
		{"turn later than the wait", Config{PerSecond: 1, Burst: 1, Wait: 1500 * time.Millisecond, MaxWaiting: 100}},
		// Both turns within the wait, but only one may be held.
		{"more held than the bound", Config{PerSecond: 1, Burst: 1, Wait: 10 * time.Second, MaxWaiting: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t, tc.cfg)
			first := s.dial(t, "127.0.0.1", "first")
			if got := s.next(t); got != "first" {
				t.Fatalf("passed on %q, want first", got)
			}
			second := s.dial(t, "127.0.0.1", "second")
			testenv.WaitFor(t, "the second connection held", func() bool { return s.l.(*Listener).waiting() == 1 })
			start := time.Now()
			third, err := s.tryDial(t, "127.0.0.1", "third")
			if err == nil && answered(t, third) {
				t.Fatal("the third connection was answered; want it closed unread")
			}
			if took := time.Since(start); took > 900*time.Millisecond {
				t.Errorf("the third connection was closed after %v; want at once, not after a turn", took)
			}
			if !answered(t, first) || !answered(t, second) {
				t.Error("the first two were not both answered")
			}
		})
	}
}

func TestAddressesRememberedStayBounded(t *testing.T) {
	t.Parallel()
	const bound = 8
	s := newServer(t, Config{PerSecond: 1, Burst: 1, Wait: 10 * time.Second, MaxWaiting: 100, Addresses: bound})
	l := s.l.(*Listener)
	for i := range 40 {
		from := fmt.Sprintf("127.0.1.%d", i+1)
		s.dial(t, from, "a"+strconv.Itoa(i))
		if got := s.next(t); got != "a"+strconv.Itoa(i) {
			t.Fatalf("passed on %q, want a%d (a new address's first connection)", got, i)
		}
		if n := l.addresses(); n > bound {
			t.Fatalf("%d addresses remembered after %d, want at most %d", n, i+1, bound)
		}
	}
	if n := l.addresses(); n != bound {
		t.Errorf("%d addresses remembered, want the %d most recent", n, bound)
	}
}

// A negative rate turns admission off; a zero one, like every zero
// field, takes its default.
func TestNegativeRateLeavesTheListenerAsItIs(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	l, err := New(inner, Config{PerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	if l != inner {
		t.Fatalf("New with no rate returned %T, want the listener itself", l)
	}
	l, err = New(inner, Config{})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := l.(*Listener)
	if !ok || got.interval != time.Second/PerSecondDefault || got.tolerance != BurstDefault*got.interval ||
		got.wait != WaitDefault || got.maxHeld != MaxWaitingDefault {
		t.Fatalf("New with the zero Config: %+v, want the defaults", l)
	}
}

func TestHeldConnectionsCostNoGoroutineAndCloseWithTheListener(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	const held = 50
	before := runtime.NumGoroutine()
	s := newServer(t, Config{PerSecond: 1, Burst: 1, Wait: time.Minute, MaxWaiting: held})
	var conns []net.Conn
	for i := range held + 1 {
		conns = append(conns, s.dial(t, "127.0.0.1", "c"+strconv.Itoa(i)))
	}
	s.next(t)
	l := s.l.(*Listener)
	testenv.WaitFor(t, "every connection past the first held", func() bool { return l.waiting() == held })
	// The server's accept loop and whatever the runtime runs beside it;
	// one goroutine per held connection would be 50 more.
	if n := runtime.NumGoroutine(); n > before+5 {
		t.Errorf("%d goroutines with %d connections held, %d before", n, held, before)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	for i, c := range conns[1:] {
		if answered(t, c) {
			t.Fatalf("held connection %d answered after Close", i+1)
		}
	}
	if n := l.waiting(); n != 0 {
		t.Errorf("%d connections still held after Close", n)
	}
	testenv.WaitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// A TCP peer is counted under its client key (domain.ClientKey, tested
// there), a Unix socket under none.
func TestPeerKey(t *testing.T) {
	t.Parallel()
	ap := netip.MustParseAddrPort("[2001:db8:1:2::1]:1")
	if got, ok := peerKey(net.TCPAddrFromAddrPort(ap)); !ok || got.String() != "2001:db8:1:2::" {
		t.Errorf("peerKey(%s) = %s, %v; want 2001:db8:1:2::", ap, got, ok)
	}
	if _, ok := peerKey(&net.UnixAddr{Name: "/x", Net: "unix"}); ok {
		t.Error("a Unix socket's address was given a key")
	}
}

// fakeConn is a connection from addr that nothing reads or writes.
type fakeConn struct {
	net.Conn
	addr   net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

// The addresses of one IPv6 /64 share one rate: a connection from
// another address of a /64 that spent its burst is refused, one from the
// next /64 is passed on.
func TestA64SharesOneRate(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inner.Close() })
	l, err := New(inner, Config{PerSecond: 1, Burst: 2, Wait: -1}) // none waits
	if err != nil {
		t.Fatal(err)
	}
	from := func(addr string) *fakeConn {
		return &fakeConn{addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))}
	}
	for i, addr := range []string{"[2001:db8:1:2::a]:1", "[2001:db8:1:2:ffff::b]:2", "[2001:db8:1:2::c]:3"} {
		c := from(addr)
		if got, want := l.(*Listener).admit(c), i < 2; got != want || c.closed == want {
			t.Fatalf("connection %d from %s: passed on %v (closed %v), want %v", i, addr, got, c.closed, want)
		}
	}
	if !l.(*Listener).admit(from("[2001:db8:1:3::a]:1")) {
		t.Fatal("the next /64 was refused")
	}
}
