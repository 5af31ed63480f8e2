package httpapi

import (
	"cmp"
	"context"
	"net"
	"net/http"
	"time"

	"flashsale/httpapi/console"
	"flashsale/httpapi/playground"
)

// Endpoints are the handlers of the paths a node serves; Routes mounts
// them. A nil handler leaves its path unserved (404), for tests that need
// only some.
type Endpoints struct {
	// GraphQL serves /query (NewHandler's).
	GraphQL http.Handler
	// Playground serves GET / (playground.Handler), and Assets the files
	// its page links to, under playground.AssetsPath (playground.Assets).
	Playground, Assets http.Handler
	// Console serves GET /console (console.Handler), and ConsoleAssets
	// its files under console.AssetsPath (console.Assets).
	Console, ConsoleAssets http.Handler
	// Ready serves GET /readyz (a *Readiness).
	Ready http.Handler
	// Metrics serves GET /metrics (promhttp.Handler).
	Metrics http.Handler
	// Hosts, in embedded mode, guards every route against DNS rebinding
	// (see LocalHosts); nil otherwise.
	Hosts *LocalHosts
}

// Routes is everything a node serves: /query, the playground, the
// console, /healthz
// (answered here: the process is alive), /readyz and /metrics, behind
// e.Hosts when set, before anything reads the request. It has no
// deadlines of its own: NewServer adds them.
func Routes(e Endpoints) http.Handler {
	mux := http.NewServeMux()
	mount := func(pattern string, h http.Handler) {
		if h != nil {
			mux.Handle(pattern, h)
		}
	}
	mount("/query", e.GraphQL)
	mount("GET /{$}", e.Playground)
	mount("GET "+playground.AssetsPath, e.Assets)
	mount("GET /console", e.Console)
	mount("GET "+console.AssetsPath, e.ConsoleAssets)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mount("GET /readyz", e.Ready)
	mount("GET /metrics", e.Metrics)
	if e.Hosts != nil {
		return e.Hosts.Guard(mux)
	}
	return mux
}

// The defaults of ServerOptions (HTTP_HEADER_TIMEOUT, HTTP_BODY_TIMEOUT,
// HTTP_WRITE_TIMEOUT). The write timeout must leave a grab's answer
// (GRAB_TIMEOUT) time to be written.
const (
	HeaderTimeoutDefault = 5 * time.Second
	BodyTimeoutDefault   = 10 * time.Second
	WriteTimeoutDefault  = 15 * time.Second
)

// ServerOptions bound what a client can hold of a connection by being
// slow. Zero values take the defaults.
type ServerOptions struct {
	// HeaderTimeout bounds the arrival of a request's headers.
	HeaderTimeout time.Duration
	// BodyTimeout bounds the arrival of its body, from the end of its
	// headers; WriteTimeout the client's taking of the answer, from the
	// same point. Websockets are exempt from both (see withDeadlines).
	BodyTimeout, WriteTimeout time.Duration
	// MaxHeaderBytes caps a request line and headers
	// (MaxHeaderBytesDefault).
	MaxHeaderBytes int
}

func (o ServerOptions) withDefaults() ServerOptions {
	o.HeaderTimeout = cmp.Or(o.HeaderTimeout, HeaderTimeoutDefault)
	o.BodyTimeout = cmp.Or(o.BodyTimeout, BodyTimeoutDefault)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, WriteTimeoutDefault)
	o.MaxHeaderBytes = cmp.Or(o.MaxHeaderBytes, MaxHeaderBytesDefault)
	return o
}

// NewServer returns the server of a node's routes (Routes'): each request
// under a body and an answer deadline of its own (withDeadlines), every
// request's context derived from base, so that cancelling base ends them
// all (websockets among them), and each connection with the state of
// /query's refusals (ConnContext). The node serves it, and so do tests
// that serve a node as it does.
func NewServer(base context.Context, routes http.Handler, o ServerOptions) *http.Server {
	o = o.withDefaults()
	return &http.Server{
		Handler:           withDeadlines(routes, o.BodyTimeout, o.WriteTimeout),
		ReadHeaderTimeout: o.HeaderTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		// Also set per request by withDeadlines (and lifted for
		// websockets); here it covers what net/http answers itself.
		WriteTimeout: o.WriteTimeout,
		IdleTimeout:  2 * time.Minute,
		BaseContext:  func(net.Listener) context.Context { return base },
		// Per-connection state of /query: it closes a connection that
		// collects refusals (refusalEdge).
		ConnContext: ConnContext,
	}
}
