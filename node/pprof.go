package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"flashsale/config"
	"flashsale/httpapi"
)

// profiler serves Go's profiles (net/http/pprof) on PPROF_ADDR, a listener
// of its own, never on the public address: a profile shows the code and
// costs CPU, so it is for an operator on a private interface. Off unless
// PPROF_ADDR is set; docs/BENCHMARKS.md's CPU profiles are taken from it.
type profiler struct {
	addr  string
	hosts *httpapi.LocalHosts
	log   *slog.Logger

	srv  *http.Server // set by Start when addr is set
	done sync.WaitGroup
}

// newProfiler returns the profiler of addr ("": none, Start does nothing).
// With hosts (embedded mode) it answers the same Hosts as the node's own
// routes: a profile shows the command line.
func newProfiler(addr string, hosts *httpapi.LocalHosts, log *slog.Logger) *profiler {
	return &profiler{addr: addr, hosts: hosts, log: log}
}

// Start listens on the profiler's address and serves until Stop.
func (p *profiler) Start(context.Context) error {
	if p.addr == "" || p.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return &config.Error{Var: "PPROF_ADDR", Msg: err.Error()}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	var h http.Handler = mux
	if p.hosts != nil {
		h = p.hosts.Guard(mux)
	}
	p.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("profiler stopped", "err", err)
		}
	}()
	p.log.Info("profiles served", "addr", ln.Addr().String(), "path", "/debug/pprof/")
	return nil
}

// Stop stops the listener, ends open profiles after a second, and waits.
func (p *profiler) Stop() {
	if p.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if p.srv.Shutdown(ctx) != nil {
		_ = p.srv.Close()
	}
	p.done.Wait()
}
