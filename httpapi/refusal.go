package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
	"flashsale/graph"
)

// refusalEdge makes a refusal cost almost nothing and paces the clients
// that collect them, in front of everything that reads a request:
//
//   - A request from a client whose in-process allowance (SHED_IP_PER_SEC,
//     its bucket empty now) is spent is answered 429 with Retry-After and
//     a small ready-made RATE_LIMITED body with retryAfterMs, before its
//     body is read, its token verified or anything parsed: a few
//     microseconds where a refusal by admission costs a whole answer.
//     (net/http drops a small unread body to keep the connection; over
//     refusalBodyKept the connection is closed instead.)
//     The bucket is only looked at; admission still takes the token of
//     every request that gets past, so a client gets exactly its
//     allowance either way.
//   - A keep-alive connection whose answers were refusals refusalsInARow
//     times in a row (any answer with Retry-After: this edge's, the
//     per-IP limits', the anonymous budget's) gets Connection: close on
//     the last: its client has to open a new connection, which the
//     listener admits at its address's rate (CONN_PER_IP_PER_SEC), so a
//     client that ignores Retry-After can no longer collect refusals as
//     fast as one connection carries them.
//
// The second needs the server's ConnContext (see ConnContext); without it
// only the first applies.
type refusalEdge struct {
	next  http.Handler
	flood *floodShedder // nil: nothing to refuse here
}

// refusalsInARow is how many refusals in a row on one connection close
// it: a client that waits as Retry-After says is refused once or twice,
// and one that does not is closed after a few.
const refusalsInARow = 8

// refusalBodyKept is the largest body of a request refused at the edge
// whose connection is kept (net/http then reads the body and drops it,
// unparsed): a grab or a page's query is a few hundred bytes.
const refusalBodyKept = 4 << 10

func (e refusalEdge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	conn, _ := r.Context().Value(connStateKey{}).(*connState)
	if e.flood != nil {
		if wait, over := e.flood.refusing(remoteKey(r.RemoteAddr)); over {
			shedFlood.Inc()
			closing := conn != nil && conn.refusals.Add(1) >= refusalsInARow
			// net/http reads an unread body to its end before it answers
			// on a connection it keeps: a small one is a copy, a large or
			// unknown one is not read at all, the connection closed.
			closing = closing || r.ContentLength < 0 || r.ContentLength > refusalBodyKept
			writeRefusal(w, r, wait, closing)
			return
		}
	}
	if conn == nil || r.Header.Get("Upgrade") != "" {
		e.next.ServeHTTP(w, r)
		return
	}
	if conn.refusals.Load() < refusalsInARow-1 {
		e.next.ServeHTTP(w, r)
	} else {
		// Only a connection one refusal short of the limit pays for the
		// wrapper.
		e.next.ServeHTTP(&closeOnRefusal{ResponseWriter: w}, r)
	}
	if isRefusal(w.Header()) {
		conn.refusals.Add(1)
	} else {
		conn.refusals.Store(0)
	}
}

// isRefusal reports an answer that tells its client to come back later:
// every RATE_LIMITED answer carries Retry-After (setRetryAfter), and so
// do the 429s and 503s written outside gqlgen.
func isRefusal(h http.Header) bool {
	_, ok := h["Retry-After"]
	return ok
}

// closeOnRefusal adds Connection: close to a refusal before its status is
// written.
type closeOnRefusal struct {
	http.ResponseWriter
	wrote bool
}

func (w *closeOnRefusal) WriteHeader(status int) {
	if !w.wrote {
		w.wrote = true
		if h := w.Header(); isRefusal(h) {
			h["Connection"] = connectionClose
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *closeOnRefusal) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *closeOnRefusal) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var connectionClose = []string{"close"}

// shedFlood counts the edge's refusals with admission's (found once: a
// refusal must not allocate).
var shedFlood = shedTotal.WithLabelValues("flood")

// connState is what /query remembers of one connection: the refusals in
// a row it answered on it.
type connState struct {
	refusals atomic.Int32
}

type connStateKey struct{}

// ConnContext is the http.Server's ConnContext for the server of /query:
// it gives each connection the state with which refusals on it are paced
// (refusalEdge).
func ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connStateKey{}, new(connState))
}

// remoteKey is the client key (domain.ClientKey) of a request's
// RemoteAddr, without allocating; the zero Addr when it has none, as
// auth.WithRemoteAddr records it.
func remoteKey(remoteAddr string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return domain.ClientKey(ap.Addr())
	}
	host, _, _ := net.SplitHostPort(remoteAddr)
	return domain.ParseClientKey(host)
}

// writeRefusal answers 429 with Retry-After (whole seconds, rounded up)
// and the RATE_LIMITED error admission would give, from ready-made
// pieces; closing adds Connection: close.
func writeRefusal(w http.ResponseWriter, r *http.Request, wait time.Duration, closing bool) {
	h := w.Header()
	h["Content-Type"] = refusalContentType(r.Header.Get("Accept"))
	h["Retry-After"] = retryAfterSeconds(wait)
	if closing {
		h["Connection"] = connectionClose
	}
	w.WriteHeader(http.StatusTooManyRequests)
	buf := refusalBuffers.Get().(*[]byte)
	b := append((*buf)[:0], refusalBodyHead...)
	b = strconv.AppendInt(b, max(wait.Milliseconds(), 1), 10)
	b = append(b, refusalBodyTail...)
	_, _ = w.Write(b)
	*buf = b
	refusalBuffers.Put(buf)
}

// writeRateLimited is writeRefusal for a refusal with words of its own
// (the cost budget's, the anonymous gate's), made after the token was
// read: the same status, Retry-After and media type, the error de as
// the presenter shows it. Every 429 written outside gqlgen is one of the
// two, so a client sees one shape of refusal, and refusalEdge counts both
// (isRefusal). A nil present shows the error as it is (a websocket
// handshake, before any presenter). Like the edge's, a refusal of a body
// over refusalBodyKept closes the connection.
func writeRateLimited(w http.ResponseWriter, r *http.Request, present graphql.ErrorPresenterFunc, de *domain.Error) {
	e := graph.OperationError(de)
	if present != nil {
		e = present(r.Context(), e)
	}
	b, _ := json.Marshal(graphql.Response{Errors: gqlerror.List{e}})
	h := w.Header()
	h["Content-Type"] = refusalContentType(r.Header.Get("Accept"))
	h["Retry-After"] = retryAfterSeconds(de.RetryAfter)
	if r.ContentLength < 0 || r.ContentLength > refusalBodyKept {
		// Its body is unread: rather than read and drop it, close, as the
		// edge does, so the client reconnects at its address's rate.
		h["Connection"] = connectionClose
	}
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(b)
}

// refusalContentType is the answer's media type: the plain JSON most
// clients send no Accept for or ask for, without parsing, else what
// negotiation picks.
func refusalContentType(accept string) []string {
	if accept == "" || accept == plainJSON[0] {
		return plainJSON
	}
	ct, _ := negotiate(accept)
	return ct
}

// retryAfterSeconds is Retry-After for wait: whole seconds, rounded up,
// at least 1; the common small values made once.
func retryAfterSeconds(wait time.Duration) []string {
	s := max(int((wait+time.Second-1)/time.Second), 1)
	if s < len(retryAfterValues) {
		return retryAfterValues[s]
	}
	return []string{strconv.Itoa(s)}
}

var retryAfterValues = func() [][]string {
	v := make([][]string, 61)
	for s := range v {
		v[s] = []string{strconv.Itoa(s)}
	}
	return v
}()

// refusalBodyHead and refusalBodyTail are the body of a refusal around
// its retryAfterMs: graph.OperationError's presentation of
// domain.RateLimited, cut once at a marker value.
var refusalBodyHead, refusalBodyTail = func() ([]byte, []byte) {
	const marker = 987654321
	b, _ := json.Marshal(requestErrors{Errors: gqlerror.List{graph.OperationError(domain.RateLimited(marker * time.Millisecond))}})
	head, tail, _ := bytes.Cut(b, []byte(strconv.Itoa(marker)))
	return head, tail
}()

var refusalBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 160); return &b }}
