package graph

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"flashsale/domain"
)

// requestGuard answers, in front of gqlgen, the requests that gqlgen would
// answer itself without the error presenter (so without extensions.code):
// unsupported methods and content types ("transport not supported"), and
// GET requests with a mutation or undecodable variables. It also bounds
// the URL query string by the body limit, since a GET query is parsed and
// cached like a POST body. Only a websocket handshake reaches the
// websocket transport: gqlgen's transports route any Upgrade header there
// (curl --http2 sends "Upgrade: h2c" with a plain POST).
//
// POST application/json, the hot path, costs a header comparison here;
// only GET requests are parsed twice, and GET is not the hot path.
type requestGuard struct {
	next        http.Handler
	present     graphql.ErrorPresenterFunc
	maxURLQuery int
	maxTokens   int
}

func (g requestGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.RawQuery) > g.maxURLQuery {
		g.reject(w, r, http.StatusRequestURITooLong, "the URL query string is over %d bytes; send large queries in a POST body", g.maxURLQuery)
		return
	}
	if r.Header.Get("Upgrade") != "" && !isWebsocketHandshake(r) {
		// Served as the plain request it is: without the header, gqlgen's
		// POST and GET transports take it.
		r = r.Clone(r.Context())
		r.Header.Del("Upgrade")
	}
	switch {
	case r.Header.Get("Upgrade") != "": // a websocket handshake
	case r.Method == http.MethodPost:
		if !isJSON(r.Header.Get("Content-Type")) {
			g.reject(w, r, http.StatusUnsupportedMediaType, "a POST request must have Content-Type application/json")
			return
		}
	case r.Method == http.MethodGet:
		if status, msg := checkGET(r.URL.RawQuery, g.maxTokens); status != 0 {
			if status == http.StatusMethodNotAllowed {
				w.Header().Set("Allow", "POST")
			}
			g.reject(w, r, status, "%s", msg)
			return
		}
	case r.Method == http.MethodOptions, r.Method == http.MethodHead: // transport.Options
	default:
		w.Header().Set("Allow", "GET, POST, OPTIONS")
		g.reject(w, r, http.StatusMethodNotAllowed, "method %s is not supported; use POST (or GET for queries)", r.Method)
		return
	}
	g.next.ServeHTTP(w, r)
}

// isWebsocketHandshake reports a websocket opening handshake (RFC 6455
// 4.1): a GET with "Upgrade: websocket" and "Connection: upgrade", both
// without case and among other tokens.
func isWebsocketHandshake(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Upgrade", "websocket") &&
		headerHasToken(r.Header, "Connection", "upgrade")
}

// headerHasToken reports whether a comma-separated header lists token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func isJSON(contentType string) bool {
	if contentType == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// checkGET finds what gqlgen's GET transport would refuse without a code:
// a malformed query string, variables or extensions that are not JSON
// objects, and an operation other than a query. Anything the parser
// rejects is left to gqlgen, which reports it through the presenter.
func checkGET(rawQuery string, maxTokens int) (int, string) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return http.StatusBadRequest, "the URL query string is malformed"
	}
	for _, name := range []string{"variables", "extensions"} {
		if v := q.Get(name); v != "" {
			var m map[string]any
			if json.Unmarshal([]byte(v), &m) != nil {
				return http.StatusBadRequest, name + " must be a JSON object"
			}
		}
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: q.Get("query")}, maxTokens)
	if err != nil {
		return 0, ""
	}
	if op := doc.Operations.ForName(q.Get("operationName")); op != nil && op.Operation != ast.Query {
		return http.StatusMethodNotAllowed, "GET requests may only run queries; send a " + string(op.Operation) + " as a POST"
	}
	return 0, ""
}

// reject writes a GraphQL error response through the error presenter.
func (g requestGuard) reject(w http.ResponseWriter, r *http.Request, status int, format string, args ...any) {
	resp := graphql.Response{Errors: gqlerror.List{g.present(r.Context(), domain.Errorf(domain.CodeBadInput, format, args...))}}
	b, _ := json.Marshal(resp)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
