package graph

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"flashsale/internal/auth"
)

// Websocket close codes. 4401 tells graphql-ws clients not to reconnect in
// a loop after a bad token; 4400 is graphql-transport-ws's "bad request".
const (
	closeUnauthorized = 4401
	closeBadRequest   = 4400
)

// websocketTransport is gqlgen's websocket transport, closing the
// connections it gives up on without closing: when the connection_init
// payload is not a JSON object (`"payload":"Bearer junk"`, `[1]`) gqlgen's
// init returns without an ack, an error or a close, and the socket stays
// open for ever. Any client could pile those up without a token.
type websocketTransport struct{ transport.Websocket }

var _ graphql.Transport = websocketTransport{}

func (t websocketTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	accept := &trackingAccept{inner: t.Implementation}
	if accept.inner == nil {
		accept.inner = transport.CoderWebsocketImplementation{}
	}
	ws := t.Websocket // a copy: the tracker belongs to this connection
	ws.Implementation = accept
	ws.Do(w, r, exec)
	// gqlgen writes something (an ack, an error, a close) on every path but
	// that one, and on that path nothing else holds the connection any more.
	if c := accept.conn; c != nil && !c.answered.Load() {
		_ = c.WriteClose(closeBadRequest, "connection_init payload must be a JSON object")
		_ = c.Close()
	}
}

// trackingAccept remembers the connection it accepted.
type trackingAccept struct {
	inner transport.WebsocketImplementation
	conn  *trackedConn
}

func (a *trackingAccept) Accept(w http.ResponseWriter, r *http.Request, opts transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	c, err := a.inner.Accept(w, r, opts)
	if err != nil {
		return nil, err
	}
	a.conn = &trackedConn{WebsocketConn: c}
	return a.conn, nil
}

// trackedConn records whether the transport ever answered the client. It
// forwards the optional read limit and read deadline, which gqlgen finds
// by type assertion (the payload limit and the ping/pong timeout).
type trackedConn struct {
	transport.WebsocketConn
	answered atomic.Bool
}

var (
	_ transport.WebsocketReadLimiter   = (*trackedConn)(nil)
	_ transport.WebsocketReadDeadliner = (*trackedConn)(nil)
)

func (c *trackedConn) WriteJSON(v any) error {
	c.answered.Store(true)
	return c.WebsocketConn.WriteJSON(v)
}

func (c *trackedConn) WriteClose(code int, msg string) error {
	c.answered.Store(true)
	return c.WebsocketConn.WriteClose(code, msg)
}

func (c *trackedConn) SetReadLimit(n int64) {
	if l, ok := c.WebsocketConn.(transport.WebsocketReadLimiter); ok {
		l.SetReadLimit(n)
	}
}

func (c *trackedConn) SetReadDeadline(t time.Time) error {
	if d, ok := c.WebsocketConn.(transport.WebsocketReadDeadliner); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}

// wsAuthenticate checks the connection_init payload's Authorization (the
// same "Bearer <JWT>" as the HTTP header) and closes with 4401 if it is
// missing or invalid. The identity, expiry included, then serves every
// operation of the connection; operationPolicy re-checks it each time.
func wsAuthenticate(tokens *auth.Tokens) transport.WebsocketInitFunc {
	return func(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		id, err := tokens.VerifyHeader(p.Authorization())
		if err != nil {
			return transport.WithWebsocketCloseCode(ctx, closeUnauthorized), nil, err
		}
		return auth.WithIdentity(ctx, id, nil), nil, nil
	}
}
