package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/rs/cors"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/internal/auth"
)

// CORSMaxAge is how long a browser may keep a preflight's answer
// (Access-Control-Max-Age, seconds): Chromium's cap, two hours, so that a
// page sends one preflight per operation shape rarely. Removing an origin
// still takes effect at once: every answer is checked again.
const CORSMaxAge = 7200

// corsAllowedHeaders are the request headers a cross-origin page may
// send: the token and the JSON body's type, Accept (with the GraphQL
// media types it is not CORS-safelisted), and the headers Apollo Client
// sends when asked to (its CSRF-prevention header, the operation name,
// client awareness). Automatic persisted queries travel in the body or
// the URL and graphql-ws in the socket, so they add none.
var corsAllowedHeaders = []string{
	"Authorization", "Content-Type", "Accept",
	"Apollo-Require-Preflight", "X-Apollo-Operation-Name",
	"Apollographql-Client-Name", "Apollographql-Client-Version",
}

// corsExposedHeaders are the answer headers a page's script may read
// beside the CORS-safelisted ones.
var corsExposedHeaders = []string{"Retry-After", "WWW-Authenticate"}

// CheckOrigin says what is wrong with an allowed-origin pattern
// (CORS_ALLOWED_ORIGINS), or returns nil: "*" (any origin), or
// scheme://host[:port] with http or https, no path, and at most one "*"
// standing for any run of characters (http://localhost:*,
// https://*.example.com).
func CheckOrigin(pattern string) error {
	if pattern == "*" {
		return nil
	}
	scheme, rest, ok := strings.Cut(pattern, "://")
	switch {
	case !ok || (scheme != "http" && scheme != "https"):
		return fmt.Errorf("%q: want scheme://host[:port], the scheme http or https", pattern)
	case rest == "":
		return fmt.Errorf("%q: no host", pattern)
	case strings.HasSuffix(rest, "/"):
		return fmt.Errorf("%q: an origin has no path; drop the trailing /", pattern)
	case strings.ContainsAny(rest, "/?#@ "):
		return fmt.Errorf("%q: an origin is scheme://host[:port] only, without path, query or user", pattern)
	case strings.Count(rest, "*") > 1:
		return fmt.Errorf("%q: at most one * per origin", pattern)
	}
	return nil
}

// newCORS returns the CORS policy of /query, nil when no origin is
// allowed (then no answer carries a CORS header, and a websocket is
// accepted from its own origin only). Credentials (cookies) are never
// allowed: the API's identity is the bearer token a page sends itself,
// which is also why "*" is safe to allow.
func newCORS(origins []string) *cors.Cors {
	if len(origins) == 0 {
		return nil
	}
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: []string{http.MethodGet, http.MethodPost},
		AllowedHeaders: corsAllowedHeaders,
		ExposedHeaders: corsExposedHeaders,
		MaxAge:         CORSMaxAge,
	})
}

// corsEdge answers preflights and adds the CORS headers to every other
// answer, in front of everything else, so that a refusal (406, 413, 429,
// ...) reaches the page's script too. A preflight is answered here at
// once, whether its origin is allowed (204 with the CORS headers) or not
// (204 without): it carries no token and no body, so it is never parsed
// and never waits in the anonymous budget; it only pays the in-process
// per-IP flood limit, like every request, so a flood of preflights from
// one address is refused at the cost of a map lookup.
type corsEdge struct {
	policy *cors.Cors
	next   http.Handler
	flood  *floodShedder // nil: off
}

func (e corsEdge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		if e.flood != nil {
			if ok, wait := e.flood.allow(auth.ClientIP(auth.WithRemoteAddr(r.Context(), r.RemoteAddr))); !ok {
				shedTotal.WithLabelValues("flood").Inc()
				w.Header()["Retry-After"] = retryAfterSeconds(wait)
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
		}
		e.policy.HandlerFunc(w, r)
		return
	}
	e.policy.HandlerFunc(w, r)
	e.next.ServeHTTP(w, r)
}

// websocketOrigins decides a websocket handshake's Origin: a browser
// sends one, and a page of another site must not open a socket with the
// user's token any more than it may read an answer. Allowed: no Origin
// (not a browser), the request's own host (the playground), or an origin
// the CORS policy allows — also when it differs from Host, as behind a
// development server's proxy that rewrites Host (Vite's changeOrigin).
type websocketOrigins struct {
	policy *cors.Cors // nil: same origin only
}

func (o websocketOrigins) allowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return true
	}
	return o.policy != nil && o.policy.OriginAllowed(r)
}

// refuse answers a handshake from an origin that is not allowed: 403
// with a FORBIDDEN error, written here once, before the websocket
// library is called (it would answer 403 and gqlgen then write a second
// status over it).
func (o websocketOrigins) refuse(w http.ResponseWriter, r *http.Request) {
	de := domain.Errorf(domain.CodeForbidden, "websocket from origin %s refused: it is not in CORS_ALLOWED_ORIGINS", graph.TruncateName(r.Header.Get("Origin")))
	writeGraphQLErrors(w, r, plainJSON, http.StatusForbidden, false, &graphql.Response{Errors: gqlerror.List{graph.OperationError(de)}})
}
