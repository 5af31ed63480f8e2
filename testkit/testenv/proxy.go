package testenv

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to a target and can cut them all and
// refuse new ones, to play a database or Redis outage without stopping a
// server that other tests share. It can also stall: hold every reply while
// requests still reach the target, as a network path that fails after the
// server acted (the case of a lost reply). And it can black-hole: stop
// forwarding in both directions without closing anything, as a network
// path that silently drops a connection.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	down    bool
	hole    bool // new connections are black-holed
	conns   map[net.Conn]struct{}
	links   map[*link]struct{}
	flowing chan struct{} // closed while replies flow; open while stalled
}

// link is one forwarded connection; dead once black-holed, for good.
type link struct{ dead atomic.Bool }

// MustProxy starts a proxy to target (host:port) on a free loopback port,
// closed when the test ends.
func MustProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := StartProxy(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// StartProxy starts a proxy to target (host:port) on a free loopback port;
// the caller closes it.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, links: map[*link]struct{}{}, flowing: make(chan struct{})}
	close(p.flowing)
	go p.accept()
	return p, nil
}

// Close stops accepting and cuts every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Down()
	p.Resume() // lets held copies see their closed connections and end
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Down cuts every connection and refuses new ones until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Up accepts connections again.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Stall holds every reply from the target, on open and new connections,
// until Resume; requests still go through. A client whose read times out
// meanwhile closes its connection, so its held reply is lost for good.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // already stalled
	}
}

// Blackhole stops forwarding, in both directions, on every open
// connection and on those opened until Resume, without closing any: their
// bytes are dropped and they stay open, dead for good, until the test
// ends (as when a NAT or firewall forgets a flow: neither end hears of
// it, and a client without its own deadline waits forever). Connections
// opened after Resume work.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
	for l := range p.links {
		l.dead.Store(true)
	}
}

// Resume lets replies flow again and ends a Blackhole for new connections
// (black-holed ones stay dead).
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = false
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// requests copies the client's bytes to the target, dropping them once
// the link is black-holed.
func (p *Proxy) requests(l *link, client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 && !l.dead.Load() {
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replies copies the target's bytes to the client, holding each chunk
// while the proxy is stalled and dropping them once the link is
// black-holed.
func (p *Proxy) replies(l *link, client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			flowing := p.flowing
			p.mu.Unlock()
			<-flowing
			if l.dead.Load() {
				continue
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = client.Close()
		return
	}
	if p.hole { // accepted, and never answered
		p.conns[client] = struct{}{}
		p.mu.Unlock()
		for {
			if _, err := client.Read(make([]byte, 32<<10)); err != nil {
				break
			}
		}
		p.mu.Lock()
		delete(p.conns, client)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	l := &link{}
	l.dead.Store(p.hole)
	p.conns[client] = struct{}{}
	p.conns[server] = struct{}{}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(copyAll func()) {
		copyAll()
		_ = client.Close()
		_ = server.Close()
		done <- struct{}{}
	}
	go pipe(func() { p.requests(l, client, server) })
	go pipe(func() { p.replies(l, client, server) })
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	delete(p.links, l)
	p.mu.Unlock()
}
