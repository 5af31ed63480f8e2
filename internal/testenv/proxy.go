package testenv

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target and can cut them all and
// refuse new ones, to play a database or Redis outage without stopping a
// server that other tests share. It can also stall: hold every reply while
// requests still reach the target, as a network path that fails after the
// server acted (the case of a lost reply).
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	down    bool
	conns   map[net.Conn]struct{}
	flowing chan struct{} // closed while replies flow; open while stalled
}

// MustProxy starts a proxy to target (host:port) on a free loopback port,
// closed when the test ends.
func MustProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := NewProxy(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// NewProxy starts a proxy to target (host:port) on a free loopback port;
// the caller closes it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, flowing: make(chan struct{})}
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

// Resume lets replies flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// replies copies the target's bytes to the client, holding each chunk
// while the proxy is stalled.
func (p *Proxy) replies(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			flowing := p.flowing
			p.mu.Unlock()
			<-flowing
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
	p.conns[client] = struct{}{}
	p.conns[server] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(copyAll func()) {
		copyAll()
		_ = client.Close()
		_ = server.Close()
		done <- struct{}{}
	}
	go pipe(func() { _, _ = io.Copy(server, client) })
	go pipe(func() { p.replies(client, server) })
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}
