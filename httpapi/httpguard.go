package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"flashsale/domain"
	"flashsale/graph"
)

// requestGuard answers, in front of gqlgen, the requests that gqlgen would
// answer itself without the error presenter (so without extensions.code)
// or not at all: unsupported methods and content types ("transport not
// supported"), POST bodies over the limit (413) or with data after the
// JSON value (gqlgen reads the first value and ignores the rest), and GET
// requests with a mutation (also one named by a persisted-query hash) or
// undecodable variables. It also bounds the URL query string by the body
// limit, since a GET query is parsed and cached like a POST body. Only a
// websocket handshake reaches the websocket transport: gqlgen's
// transports route any Upgrade header there (curl --http2 sends
// "Upgrade: h2c" with a plain POST).
//
// POST application/json, the hot path, costs a header comparison and a
// copy of its (small) body here; a grab the compiled path covers is
// answered from that copy (compiledGrabs), anything else gets a validity
// scan and goes on to gqlgen. Only GET requests are parsed twice, and GET
// is not the hot path.
type requestGuard struct {
	next        http.Handler
	present     graphql.ErrorPresenterFunc
	maxURLQuery int
	maxBody     int64
	maxTokens   int
	// persisted is the automatic-persisted-query cache, to find the
	// operation a GET names by its hash alone.
	persisted graphql.Cache[string]
	// fast, if set, answers the grab documents it covers (compiledGrabs)
	// before anything else reads the body.
	fast *compiledGrabs
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
	if (r.Method == http.MethodPost || r.Method == http.MethodGet) && r.Header.Get("Upgrade") == "" && !acceptable(r.Header.Get("Accept")) {
		g.reject(w, r, http.StatusNotAcceptable, "/query answers in application/graphql-response+json or application/json; the Accept header names neither")
		return
	}
	switch {
	case r.Header.Get("Upgrade") != "": // a websocket handshake
	case r.Method == http.MethodPost:
		if !isJSON(r.Header.Get("Content-Type")) {
			g.reject(w, r, http.StatusUnsupportedMediaType, "a POST request must have Content-Type application/json")
			return
		}
		buf := bodyBuffers.Get().(*bytes.Buffer)
		defer putBodyBuffer(buf) // after gqlgen, below, has read it
		body, status, msg := g.readBody(w, r, buf)
		if status != 0 {
			g.reject(w, r, status, "%s", msg)
			return
		}
		if g.fast != nil && g.fast.serve(w, r, body) {
			return // a grab the compiled path answered: its body was valid JSON
		}
		if !json.Valid(body) {
			g.reject(w, r, http.StatusBadRequest, "%s", graph.BadBodyMessage)
			return
		}
		if isBatch(body) {
			g.reject(w, r, http.StatusBadRequest, "batching is not supported: send each operation in a request of its own, as one JSON object")
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if bytes.Contains(body, grabFieldName) || bytes.Contains(body, redPacketGrabFieldName) {
			r = r.WithContext(withMayGrab(r.Context()))
		}
	case r.Method == http.MethodGet:
		if status, msg := checkGET(r.Context(), r.URL.RawQuery, g.maxTokens, g.persisted); status != 0 {
			if status == http.StatusMethodNotAllowed {
				w.Header().Set("Allow", "POST")
			}
			g.reject(w, r, status, "%s", msg)
			return
		}
	case r.Method == http.MethodOptions: // transport.Options
	default:
		// HEAD too: gqlgen answers it 405 without the Allow header every
		// 405 must carry (RFC 9110 15.5.6).
		w.Header().Set("Allow", allowedMethods)
		g.reject(w, r, http.StatusMethodNotAllowed, "method %s is not supported; use POST (or GET for queries)", r.Method)
		return
	}
	g.next.ServeHTTP(w, r)
}

// grabFieldName is the grab's field, as a body that may hold a grab names
// it.
var grabFieldName, redPacketGrabFieldName = []byte(graph.GrabField), []byte(graph.RedPacketGrabField)

// MaxHeaderBytesDefault is the server's MaxHeaderBytes
// (HTTP_MAX_HEADER_BYTES): net/http reads a request line and headers up
// to it plus 4 KiB of slack, so at most 64 KiB, the body limit, and
// answers 431 past it without calling any handler. Its default, 1 MB,
// let any client make a node read and parse 1 MB of headers, or a 1 MB
// URL, with no token; a GET's query string is bounded by the body limit
// anyway (requestGuard).
const MaxHeaderBytesDefault = 60 << 10

// allowedMethods is the Allow header of /query, as transport.Options
// answers OPTIONS.
const allowedMethods = "OPTIONS, GET, POST"

// readBody reads a POST body whole, at most maxBody bytes. ServeHTTP then
// checks it is exactly one JSON value (unless the compiled path answered
// it, having scanned it whole): gqlgen decodes the first value and would
// run it whatever follows. A malformed body gets gqlgen's (tidied)
// answer, so the client hears the same either way.
func (g requestGuard) readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) ([]byte, int, string) {
	tooLarge := func() string { return fmt.Sprintf("the request body is over %d bytes", g.maxBody) }
	if r.ContentLength > g.maxBody {
		return nil, http.StatusRequestEntityTooLarge, tooLarge()
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, g.maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, tooLarge()
	case err != nil:
		return nil, http.StatusBadRequest, "the request body could not be read"
	}
	return buf.Bytes(), 0, ""
}

// bodyBuffers hold POST bodies while their request is served: a grab's
// body is a few hundred bytes, read on every request of a sale.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putBodyBuffer returns a buffer to the pool unless a large body grew it
// (up to MAX_BODY_BYTES): the pool keeps small ones only.
func putBodyBuffer(b *bytes.Buffer) {
	if b.Cap() <= 16<<10 {
		b.Reset()
		bodyBuffers.Put(b)
	}
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

// isBatch reports a body that is a JSON array: a batch of operations,
// which some clients send (Apollo's BatchHttpLink, urql's batching) and
// which /query does not run: one operation per request keeps every
// request's cost, admission and status its own.
func isBatch(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '['
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
// objects, and an operation other than a query, given as text or by the
// hash of a persisted query. Anything the parser rejects is left to
// gqlgen, which reports it through the presenter.
func checkGET(ctx context.Context, rawQuery string, maxTokens int, persisted graphql.Cache[string]) (int, string) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return http.StatusBadRequest, "the URL query string is malformed"
	}
	var ext struct {
		PersistedQuery struct {
			Hash string `json:"sha256Hash"`
		} `json:"persistedQuery"`
	}
	for _, name := range []string{"variables", "extensions"} {
		if v := q.Get(name); v != "" {
			var m map[string]any
			if json.Unmarshal([]byte(v), &m) != nil {
				return http.StatusBadRequest, name + " must be a JSON object"
			}
			if name == "extensions" {
				_ = json.Unmarshal([]byte(v), &ext) // a wrong shape is gqlgen's to report
			}
		}
	}
	query := q.Get("query")
	if query == "" && ext.PersistedQuery.Hash != "" && persisted != nil {
		query, _ = persisted.Get(ctx, ext.PersistedQuery.Hash)
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: query}, maxTokens)
	if err != nil {
		return 0, ""
	}
	if op := doc.Operations.ForName(q.Get("operationName")); op != nil && op.Operation != ast.Query {
		return http.StatusMethodNotAllowed, "GET requests may only run queries; send a " + string(op.Operation) + " as a POST"
	}
	return 0, ""
}

// reject answers a request error through the error presenter, in the
// media type the request asked for (application/json when it names none
// that /query answers in).
func (g requestGuard) reject(w http.ResponseWriter, r *http.Request, status int, format string, args ...any) {
	requestErrorAnswer(r.Context(), w, r, g.present, status, domain.Errorf(domain.CodeBadInput, format, args...))
}
