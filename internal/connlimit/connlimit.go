// Package connlimit admits new TCP connections per client address: a
// listener that passes net/http a peer's connections at a bounded rate and
// makes the rest wait, unread, for their turn.
//
// Why in the listener: what net/http answers by itself (431 for headers or
// a request line over the limit) and websocket refusals (over the
// per-address cap, a first message too large) come before any handler, and
// each costs the flooding client only a fresh connection. A budget in a
// handler cannot make such a client wait; the listener can, because it
// decides when net/http gets to read a connection at all. A closed-loop
// flood (a client sends its next request when the last one is answered)
// then runs at the address's rate, whatever a refusal costs.
package connlimit

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"flashsale/domain"
	"flashsale/internal/metrics"
)

// Config is the admission of new connections per client address. A zero
// field takes its default (the ...Default constants below); a negative
// PerSecond turns admission off (New returns the listener as it is).
type Config struct {
	// PerSecond is the rate of new connections one address gets passed
	// on, and Burst how many it may open at once after a quiet spell.
	PerSecond int
	Burst     int
	// Wait is the longest a connection over its address's rate is held
	// before it is passed on; one that would wait longer is closed at
	// once. Negative closes every connection over the rate. It also bounds
	// those held per address: at most PerSecond × Wait.
	Wait time.Duration
	// MaxWaiting bounds the connections held at once, every address
	// together; one more over its rate is closed at once. Negative: none
	// is held.
	MaxWaiting int
	// Addresses bounds the addresses remembered (AddressesDefault when
	// 0).
	Addresses int
}

// The defaults (CONN_PER_IP_*) are far above what one address of real
// clients opens: a browser keeps its few connections open (net/http keeps
// an idle one two minutes) and so do the project's load tool and tests,
// so a NATed office of hundreds opening the page at once fits in the
// burst and the second after it. A flood of one fresh connection per
// request (a 431 closes its connection; each websocket is one) is slowed
// to the rate: about 10% of a core at 0.5 ms a refusal. The burst is not
// larger because a flood only a little faster than the rate drains it
// slowly: with 1,000, a client sending 400 a second ran past the rate for
// five seconds. A held connection keeps what its client
// sent in the kernel's receive buffer, unread (128 KiB at most with
// Linux's default tcp_rmem), so MaxWaitingDefault bounds that to 32 MiB;
// a closed-loop flood holds one connection per client.
const (
	PerSecondDefault  = 200
	BurstDefault      = 500
	WaitDefault       = time.Second
	MaxWaitingDefault = 256
	// AddressesDefault is how many client addresses a Listener
	// remembers: an entry is about 100 bytes, so 6-7 MB at most.
	AddressesDefault = 65536
)

func (cfg Config) withDefaults() Config {
	cfg.PerSecond = cmp.Or(cfg.PerSecond, PerSecondDefault)
	cfg.Burst = cmp.Or(cfg.Burst, BurstDefault)
	cfg.Wait = cmp.Or(cfg.Wait, WaitDefault)
	cfg.MaxWaiting = cmp.Or(cfg.MaxWaiting, MaxWaitingDefault)
	cfg.Addresses = cmp.Or(cfg.Addresses, AddressesDefault)
	return cfg
}

// Listener is a net.Listener whose Accept passes on each client address's
// connections at its rate (Config). A connection over the rate is accepted
// from the kernel (so the backlog never fills and other addresses are
// served at once) and held, unread, until its turn; it costs a file
// descriptor and a heap entry, no goroutine. Accept is meant to be called
// from one goroutine, as http.Server does.
type Listener struct {
	net.Listener
	deadline  func(time.Time) error
	interval  time.Duration // between two connections of one address
	tolerance time.Duration // Burst intervals: how far ahead an address may be
	wait      time.Duration
	maxHeld   int

	mu sync.Mutex
	// peers holds each recent address's theoretical arrival time (GCRA):
	// the time its bucket is full again. An address whose time has passed
	// is the same as one never seen, so the least recently used are the
	// ones to forget; a flood from more addresses than it holds makes it
	// forget some early and so admits more, never fewer.
	peers  *simplelru.LRU[netip.Addr, time.Time]
	held   heldQueue
	seq    uint64
	closed bool
}

// errNoDeadline is New's answer for a listener it cannot wrap.
var errNoDeadline = errors.New("connlimit: the listener cannot set a deadline on Accept")

// New wraps l. With a negative cfg.PerSecond it returns l itself. l must
// support SetDeadline (a *net.TCPListener does): Accept waits for the next
// new connection only until the first held one is due.
func New(l net.Listener, cfg Config) (net.Listener, error) {
	cfg = cfg.withDefaults()
	if cfg.PerSecond < 0 {
		return l, nil
	}
	d, ok := l.(interface{ SetDeadline(time.Time) error })
	if !ok {
		return nil, errNoDeadline
	}
	if cfg.Burst < 1 {
		return nil, fmt.Errorf("connlimit: burst %d, want at least 1", cfg.Burst)
	}
	peers, err := simplelru.NewLRU[netip.Addr, time.Time](cfg.Addresses, nil)
	if err != nil {
		return nil, fmt.Errorf("connlimit: %w", err)
	}
	interval := time.Second / time.Duration(cfg.PerSecond)
	return &Listener{
		Listener:  l,
		deadline:  d.SetDeadline,
		interval:  interval,
		tolerance: time.Duration(cfg.Burst) * interval,
		wait:      max(cfg.Wait, 0),
		maxHeld:   max(cfg.MaxWaiting, 0),
		peers:     peers,
	}, nil
}

// Accept returns the next connection whose turn has come: a held one that
// is due (the earliest first), else a new one within its address's rate.
// A new one over the rate is held or closed, and Accept goes on waiting.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if c := l.due(); c != nil {
			return c, nil
		}
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && l.holding() {
				continue // a held connection is due
			}
			return nil, err
		}
		if l.admit(c) {
			return c, nil
		}
	}
}

// due pops the earliest held connection if its time has come, and points
// the inner Accept's deadline at the next one (none when nothing is held).
func (l *Listener) due() net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	var c net.Conn
	if len(l.held) > 0 && !l.held[0].due.After(now) {
		c = heap.Pop(&l.held).(heldConn).conn
	}
	next := time.Time{}
	if len(l.held) > 0 {
		next = l.held[0].due
	}
	_ = l.deadline(next) // fails only once the listener is closed; Accept then says so
	return c
}

func (l *Listener) holding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held) > 0
}

// admit decides on a new connection: true to pass it on now; otherwise
// it has been held or closed.
func (l *Listener) admit(c net.Conn) bool {
	addr, ok := peerKey(c.RemoteAddr())
	if !ok {
		return true // not an IP peer (a Unix socket): nobody to tell apart
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	tat, _ := l.peers.Get(addr)
	if tat.Before(now) {
		tat = now
	}
	// GCRA: the address may run Burst intervals ahead of now; this
	// connection's turn is when it would be back within that.
	turn := tat.Add(-l.tolerance + l.interval)
	if !turn.After(now) {
		l.peers.Add(addr, tat.Add(l.interval))
		return true
	}
	if l.closed || turn.Sub(now) > l.wait || len(l.held) >= l.maxHeld {
		refuse(c)
		limited.WithLabelValues("closed").Inc()
		return false
	}
	l.peers.Add(addr, tat.Add(l.interval))
	l.seq++
	heap.Push(&l.held, heldConn{conn: c, due: turn, seq: l.seq})
	limited.WithLabelValues("held").Inc()
	return false
}

// Close closes the listener and every connection still held.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, h := range l.held {
		refuse(h.conn)
	}
	l.held = nil
	return err
}

// waiting is the number of connections held now.
func (l *Listener) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// addresses is the number of client addresses remembered now.
func (l *Listener) addresses() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peers.Len()
}

// refuse closes c with a reset rather than the orderly close: nothing of
// it was read, and this side keeps no TIME_WAIT state for a flood.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// peerKey is the address a connection is counted under: the client key
// every per-address limit uses (domain.ClientKey: an IPv4 address, or an
// IPv6 address's /64).
func peerKey(a net.Addr) (netip.Addr, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	return domain.ClientKey(ta.AddrPort().Addr()), true
}

// heldConn is a connection waiting for its turn; seq keeps the order of
// arrival among equal turns.
type heldConn struct {
	conn net.Conn
	due  time.Time
	seq  uint64
}

// heldQueue is a min-heap of held connections by turn.
type heldQueue []heldConn

func (q heldQueue) Len() int { return len(q) }
func (q heldQueue) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}
func (q heldQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *heldQueue) Push(x any)   { *q = append(*q, x.(heldConn)) }
func (q *heldQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = heldConn{}
	*q = old[:len(old)-1]
	return h
}

// limited counts connections over their address's rate by what became
// of them: held for their turn, or closed at once (the wait too long or
// too many held).
var limited = metrics.CounterVec("connections_limited_total", "New connections over their client address's rate (CONN_PER_IP_PER_SEC), by outcome: held for their turn or closed.", "outcome")
