package httpapi

import (
	"io"
	"net/http"
	"strings"
	"time"
)

// withDeadlines gives each request a body deadline and an answer deadline
// of its own, so that a client sending its body a byte a second, or never
// reading its answer, holds a connection (and the memory of its answer)
// for a bounded time. http.Server's ReadTimeout cannot do the first well:
// it counts from the first byte of the headers, and it keeps running after
// the body is read, where net/http's background read would take its
// expiry for a closed connection and cancel the request's context in the
// middle of a grab.
//
// A websocket upgrade gets neither, and the server's deadlines are lifted
// from it at once (net/http lifts them again when the transport hijacks
// the connection): the connection outlives any request, and the websocket
// transport bounds it with pings and write deadlines of its own.
func withDeadlines(next http.Handler, body, write time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if isWebsocketUpgrade(r) {
			_ = rc.SetReadDeadline(time.Time{})
			_ = rc.SetWriteDeadline(time.Time{})
			next.ServeHTTP(w, r)
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(write))
		if r.Body != nil && r.Body != http.NoBody {
			_ = rc.SetReadDeadline(time.Now().Add(body))
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the body deadline once the body is read whole: from
// then on the connection's reads are net/http's watch for a client that
// goes away, which must not fire because the handler took its time.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// isWebsocketUpgrade reports an "Upgrade: websocket" request, the only
// upgrade /query accepts.
func isWebsocketUpgrade(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				return true
			}
		}
	}
	return false
}
