package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	coderws "github.com/coder/websocket"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"

	"flashsale/graph"
	"flashsale/internal/auth"
)

// Websocket close codes of graphql-transport-ws. 4401 also tells
// graphql-ws clients not to reconnect in a loop after a bad token.
const (
	closeBadRequest         = 4400
	closeUnauthorized       = 4401
	closeDuplicateID        = 4409
	closeTooManyInitialised = closeTooManyRequests
)

// Websocket defaults (HandlerOptions).
const (
	// WebsocketMaxOperationsDefault bounds the operations running at once
	// on one connection: a page subscribes to a handful; 5000 per
	// connection once held 14,000 goroutines and 700 MB.
	WebsocketMaxOperationsDefault = 32
	// WebsocketWriteTimeoutDefault bounds each write to a websocket: a
	// client that stops reading is disconnected after it, instead of
	// holding its connection and everything it runs.
	WebsocketWriteTimeoutDefault = 10 * time.Second
	// WebsocketSubscribesPerSecDefault is the rate of operations one
	// websocket may start (WS_SUBSCRIBES_PER_SEC), after a burst of as
	// many as it may run at once (WS_MAX_OPERATIONS) or a second's worth,
	// the larger, so that a page can start them all when it opens or
	// reconnects. A page's subscriptions
	// live as long as it does; one that also sends its queries and grabs
	// over the socket sends a few a second. Without a rate a socket could
	// send a costly document (one of unknown field names cost 9.3 ms to
	// refuse) as fast as it liked.
	WebsocketSubscribesPerSecDefault = 10
	// WebsocketMaxUninitializedDefault bounds the websockets accepted but
	// not yet sent connection_init, on the node (WS_MAX_UNINITIALIZED).
	// A real client sends it a round trip after the upgrade, so even at a
	// 1 s round trip this admits 1,024 new sockets a second; a socket
	// that never sends it is held until the init timeout (10 s), about 40
	// KB each, so the cap bounds them to about 40 MB (2,048 such sockets
	// from 8 loopback addresses once took 82 MB).
	WebsocketMaxUninitializedDefault = 1024
)

// websocketTransport is gqlgen's websocket transport made to follow
// graphql-transport-ws and to bound what one connection holds; gqlgen
// does neither. It wraps the transport's connection rather than forking
// it:
//   - every message the client sends is checked before gqlgen reads it
//     (protocolConn): an invalid or unknown message closes with 4400, a
//     second connection_init with 4429, a subscribe before it with 4401, a
//     subscribe whose id is running with 4409, and one over maxOps
//     operations running at once, or over the socket's rate of operations
//     started (subscribeRate), gets an error for that operation alone; a
//     socket that goes on over the rate is closed with 4429;
//   - every write to the socket has a deadline (deadlineConn);
//   - a connection whose connection_init payload is not a JSON object,
//     which gqlgen leaves open without a word, is closed with 4400;
//   - the handshake draws on the per-IP request limits, and the sockets
//     open at once are capped per address (at the upgrade) and per user
//     (at connection_init), over either closed with 4429 (socketCaps);
//     the sockets not yet initialised are capped on the node, one more
//     answered 503 before the upgrade;
//   - a handshake whose Origin is neither its own host nor allowed by the
//     CORS policy is refused 403 before anything else (websocketOrigins);
//   - a message is read up to the body limit at most (gqlgen's
//     PayloadReadLimit, set by NewHandler): a larger one closes the socket
//     with 1009 before any of it is decoded.
type websocketTransport struct {
	transport.Websocket
	maxOps       int
	subscribes   int // operations started per second on one socket
	writeTimeout time.Duration
	handshake    handshakeAdmission
	origins      websocketOrigins
}

var _ graphql.Transport = websocketTransport{}

// websocketSubprotocols are those gqlgen speaks, for a socket accepted
// only to be closed.
var websocketSubprotocols = []string{"graphql-ws", "graphql-transport-ws"}

func (t websocketTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	if !t.origins.allowed(r) {
		t.origins.refuse(w, r)
		return
	}
	// The origin is decided above, by the CORS policy; the library's own
	// check (Origin's host = Host) would refuse an allowed origin.
	inner := t.Implementation
	if inner == nil {
		inner = transport.CoderWebsocketImplementation{AcceptOptions: coderws.AcceptOptions{InsecureSkipVerify: true}}
	}
	slots, answered := t.handshake.admit(w, r)
	switch {
	case answered:
		return
	case slots == nil:
		t.refuse(w, r, inner, closeTooManyRequests, ipCapReason(t.handshake.caps.perIP))
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), socketSlotsKey{}, slots))
	accept := &trackingAccept{inner: inner, maxOps: t.maxOps, subscribes: t.subscribes, writeTimeout: t.writeTimeout, slots: slots}
	ws := t.Websocket // a copy: the tracker belongs to this connection
	ws.Implementation = accept
	ws.Do(w, r, exec)
	c := accept.conn
	if c == nil {
		// Nothing was accepted: the slots go back now (a connection the
		// library hijacked and then dropped gave them back as it closed).
		slots.release()
		return
	}
	// gqlgen writes something (an ack, an error, a close) on every path but
	// that one, and on that path nothing else holds the connection any more.
	if !c.answered.Load() {
		_ = c.WriteClose(closeBadRequest, "connection_init payload must be a JSON object")
		_ = c.Close()
	}
}

// refuse accepts the socket only to close it with code: a browser's
// websocket sees no HTTP status, and graphql-ws clients stop on 4429
// where a failed handshake makes them retry. The socket holds no slot;
// its close handshake is bounded by the library (5 s for the peer's
// close frame).
func (t websocketTransport) refuse(w http.ResponseWriter, r *http.Request, inner transport.WebsocketImplementation, code int, reason string) {
	c, err := inner.Accept(deadlineWriter{ResponseWriter: w, timeout: t.writeTimeout}, r, transport.WebsocketAcceptOptions{
		ResponseHeader: http.Header{},
		Subprotocols:   websocketSubprotocols,
	})
	if err != nil {
		return // the library answered the failed handshake
	}
	_ = c.WriteClose(code, reason)
	_ = c.Close()
}

// trackingAccept accepts the connection through a deadline on its writes
// and remembers it; the connection gives back the socket's slots when it
// closes.
type trackingAccept struct {
	inner        transport.WebsocketImplementation
	maxOps       int
	subscribes   int
	writeTimeout time.Duration
	slots        *socketSlots
	conn         *protocolConn
}

func (a *trackingAccept) Accept(w http.ResponseWriter, r *http.Request, opts transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	c, err := a.inner.Accept(deadlineWriter{ResponseWriter: w, timeout: a.writeTimeout, onClose: a.slots.release}, r, opts)
	if err != nil {
		return nil, err
	}
	a.conn = &protocolConn{
		WebsocketConn: c,
		transportWS:   c.Subprotocol() == "graphql-transport-ws",
		maxOps:        a.maxOps,
		rate:          newSubscribeRate(a.subscribes, max(a.maxOps, a.subscribes)),
		slots:         a.slots,
		active:        map[string]struct{}{},
	}
	return a.conn, nil
}

// protocolConn enforces the protocol on what the client sends and counts
// the operations running, from the subscribe to the server's complete or
// error for that id. It records whether the transport ever answered the
// client, and forwards the optional read limit and read deadline, which
// gqlgen finds by type assertion (the payload limit and the ping/pong
// timeout).
type protocolConn struct {
	transport.WebsocketConn
	answered atomic.Bool
	// transportWS is graphql-transport-ws; otherwise the legacy graphql-ws,
	// whose protocol has no close codes: only the operation bound and the
	// duplicate-id refusal apply to it.
	transportWS bool
	maxOps      int
	// rate and initialised are used by the one reading goroutine only.
	rate  subscribeRate
	slots *socketSlots // told when connection_init arrives

	initialised bool
	mu          sync.Mutex
	active      map[string]struct{}
}

var (
	_ transport.WebsocketReadLimiter   = (*protocolConn)(nil)
	_ transport.WebsocketReadDeadliner = (*protocolConn)(nil)
)

// clientMessage is the envelope of a client's message in either
// subprotocol.
type clientMessage struct {
	ID      *string         `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// refusal is what to do instead of handing a message to gqlgen: close the
// connection with code, or (code 0) answer the operation id with err.
type refusal struct {
	code   int
	reason string
	id     string
	err    *domain.Error
}

func (c *protocolConn) NextReader() (int, io.Reader, error) {
	for {
		typ, r, err := c.WebsocketConn.NextReader()
		if err != nil {
			return typ, r, err
		}
		data, err := io.ReadAll(r) // bounded by the payload read limit
		if err != nil {
			return typ, nil, err
		}
		ref := c.admit(data)
		switch {
		case ref == nil:
			return typ, bytes.NewReader(data), nil
		case ref.code != 0:
			_ = c.WriteClose(ref.code, ref.reason)
			return typ, nil, fmt.Errorf("%s: %w", ref.reason, transport.ErrWebsocketClosed)
		case ref.err != nil:
			if err := c.WebsocketConn.WriteJSON(operationErrorMessage(ref.id, ref.err)); err != nil {
				return typ, nil, err
			}
		}
		// A refused operation, or a ping or pong before connection_init
		// (answered here: gqlgen's init takes nothing but connection_init).
	}
}

// admit checks one message from the client; nil lets gqlgen have it.
func (c *protocolConn) admit(data []byte) *refusal {
	var m clientMessage
	if err := json.Unmarshal(data, &m); err != nil {
		if !c.transportWS {
			return nil // gqlgen answers graphql-ws clients itself
		}
		return &refusal{code: closeBadRequest, reason: "invalid message: want a JSON object with a type"}
	}
	if !c.transportWS {
		switch {
		case m.Type == "connection_init":
			c.slots.initialise()
		case m.Type == "start" && m.ID != nil:
			return c.start(*m.ID)
		}
		return nil
	}
	switch m.Type {
	case "connection_init":
		if c.initialised {
			return &refusal{code: closeTooManyInitialised, reason: "Too many initialisation requests"}
		}
		c.initialised = true
		c.slots.initialise()
		return nil
	case "ping", "pong":
		if c.initialised {
			return nil
		}
		if m.Type == "ping" {
			_ = c.WebsocketConn.WriteJSON(clientMessage{Type: "pong"})
		}
		return &refusal{}
	case "subscribe", "complete":
		if !c.initialised {
			return &refusal{code: closeUnauthorized, reason: "Unauthorized"}
		}
		if m.ID == nil || *m.ID == "" {
			return &refusal{code: closeBadRequest, reason: m.Type + " needs an id"}
		}
		if m.Type == "complete" {
			return nil
		}
		if p := bytes.TrimLeft(m.Payload, " \t\r\n"); len(p) == 0 || p[0] != '{' {
			return &refusal{code: closeBadRequest, reason: "subscribe payload must be an object"}
		}
		return c.start(*m.ID)
	}
	return &refusal{code: closeBadRequest, reason: "invalid message type"}
}

// start admits a new operation id, unless the socket starts operations
// over its rate, the id is running already or the connection runs maxOps
// operations.
func (c *protocolConn) start(id string) *refusal {
	switch wait, closing := c.rate.take(time.Now()); {
	case closing:
		subscribesRefused.WithLabelValues("closed").Inc()
		return &refusal{code: closeTooManyRequests, reason: fmt.Sprintf("Too many requests: over %g operations a second on one websocket", c.rate.perSec)}
	case wait > 0:
		subscribesRefused.WithLabelValues("limited").Inc()
		return &refusal{id: id, err: &domain.Error{
			Code:       domain.CodeRateLimited,
			Message:    fmt.Sprintf("at most %g operations a second on one websocket", c.rate.perSec),
			RetryAfter: wait,
		}}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.active[id]; dup {
		if c.transportWS {
			return &refusal{code: closeDuplicateID, reason: "Subscriber for " + graph.TruncateName(id) + " already exists"}
		}
		// gqlgen would lose the first operation's cancel and let it run
		// uncounted.
		return &refusal{id: id, err: domain.InvalidField("id", "operation id %q is in use", graph.TruncateName(id))}
	}
	if len(c.active) >= c.maxOps {
		return &refusal{id: id, err: &domain.Error{
			Code:       domain.CodeRateLimited,
			Message:    fmt.Sprintf("at most %d operations at once on one connection", c.maxOps),
			RetryAfter: time.Second,
		}}
	}
	c.active[id] = struct{}{}
	return nil
}

// subscribeRate is a socket's rate of operations started (subscribe, or
// the legacy start): a token bucket of perSec a second up to burst, which
// a refused operation overdraws. An operation that finds no token is
// refused with how long until one is there; one that finds the bucket
// overdrawn by burst more (a client that goes on without waiting) closes
// the socket. The debt is paid back at the same rate, so a client that
// waits as told recovers. The zero value admits everything.
type subscribeRate struct {
	perSec, burst float64
	tokens        float64
	at            time.Time
}

// newSubscribeRate is a full bucket of burst tokens; perSec <= 0 is no
// rate.
func newSubscribeRate(perSec, burst int) subscribeRate {
	if perSec <= 0 {
		return subscribeRate{}
	}
	burst = max(burst, 1)
	return subscribeRate{perSec: float64(perSec), burst: float64(burst), tokens: float64(burst)}
}

// take draws one token at now: wait 0 admits, wait > 0 refuses (retry
// after it), closing ends the socket.
func (r *subscribeRate) take(now time.Time) (wait time.Duration, closing bool) {
	if r.perSec <= 0 {
		return 0, false
	}
	if !r.at.IsZero() {
		r.tokens = min(r.burst, r.tokens+now.Sub(r.at).Seconds()*r.perSec)
	}
	r.at = now
	r.tokens--
	switch {
	case r.tokens >= 0:
		return 0, false
	case r.tokens < -r.burst:
		return 0, true
	}
	// The next operation finds a token once the debt and one more are
	// refilled.
	return time.Duration((1 - r.tokens) / r.perSec * float64(time.Second)), false
}

// operationErrorMessage is an error message for one operation, the same
// in both subprotocols.
func operationErrorMessage(id string, de *domain.Error) any {
	payload, _ := json.Marshal([]*gqlerror.Error{graph.OperationError(de)})
	return clientMessage{ID: &id, Type: "error", Payload: payload}
}

func (c *protocolConn) WriteJSON(v any) error {
	c.answered.Store(true)
	// The operation ends before the client can learn it and reuse its id.
	if id, typ := messageHead(v); typ == "complete" || typ == "error" {
		c.mu.Lock()
		delete(c.active, id)
		c.mu.Unlock()
	}
	return c.WebsocketConn.WriteJSON(v)
}

// messageHead is the id and type of a message gqlgen sends: its unexported
// message structs have exported ID and Type fields (read by reflection,
// to spare a second encoding of every answer), else through JSON.
func messageHead(v any) (id, typ string) {
	rv := reflect.Indirect(reflect.ValueOf(v))
	if rv.Kind() == reflect.Struct {
		i, t := rv.FieldByName("ID"), rv.FieldByName("Type")
		if i.Kind() == reflect.String && t.Kind() == reflect.String {
			return i.String(), t.String()
		}
	}
	var head struct{ ID, Type string }
	if b, err := json.Marshal(v); err == nil {
		_ = json.Unmarshal(b, &head)
	}
	return head.ID, head.Type
}

func (c *protocolConn) WriteClose(code int, msg string) error {
	c.answered.Store(true)
	return c.WebsocketConn.WriteClose(code, msg)
}

func (c *protocolConn) SetReadLimit(n int64) {
	if l, ok := c.WebsocketConn.(transport.WebsocketReadLimiter); ok {
		l.SetReadLimit(n)
	}
}

func (c *protocolConn) SetReadDeadline(t time.Time) error {
	if d, ok := c.WebsocketConn.(transport.WebsocketReadDeadliner); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}

// deadlineWriter hands the websocket library a connection whose writes
// have a deadline: gqlgen writes synchronously with no deadline, so a
// client that stops reading would hold its connection and every operation
// on it until the ping timeout, or for ever.
//
// The connection it hands out also reports its close (onClose, if set):
// the one moment a socket ends, whichever side or timer ends it.
type deadlineWriter struct {
	http.ResponseWriter
	timeout time.Duration
	onClose func()
}

func (w deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w deadlineWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	dc := &deadlineConn{Conn: c, timeout: w.timeout, onClose: w.onClose}
	// The buffered writer net/http returns writes to the raw connection.
	if err := brw.Writer.Flush(); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	brw.Writer.Reset(dc)
	return dc, brw, nil
}

// deadlineConn gives each write timeout to complete; one that does not
// closes the connection, which ends its reader and so every operation.
type deadlineConn struct {
	net.Conn
	timeout time.Duration
	onClose func() // may be called more than once
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	n, err := c.Conn.Write(p)
	if err != nil {
		_ = c.Close()
	}
	return n, err
}

func (c *deadlineConn) Close() error {
	if c.onClose != nil {
		c.onClose()
	}
	return c.Conn.Close()
}

// wsAuthenticate checks the connection_init payload's Authorization (the
// same "Bearer <JWT>" as the HTTP header) and closes with 4401 if it is
// missing or invalid, then takes the user's socket slot and closes with
// 4429 if the user holds the cap already. The identity, expiry included,
// then serves every operation of the connection; graph.OperationPolicy
// re-checks it each time.
func wsAuthenticate(tokens *auth.Tokens) transport.WebsocketInitFunc {
	return func(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
		id, err := tokens.VerifyHeader(p.Authorization())
		if err != nil {
			ctx = transport.AppendCloseReason(transport.WithWebsocketCloseCode(ctx, closeUnauthorized), unauthorizedReason(err))
			return ctx, nil, err
		}
		if s := slotsFrom(ctx); s != nil {
			if de := s.takeUser(id.UserID); de != nil {
				ctx = transport.AppendCloseReason(transport.WithWebsocketCloseCode(ctx, closeTooManyRequests), de.Message)
				return ctx, nil, de
			}
		}
		return auth.WithIdentity(ctx, id, nil), nil, nil
	}
}

// unauthorizedReason is the reason of a 4401 close frame: whether the
// token was missing (no "Bearer <JWT>" in the connection_init payload),
// expired, or invalid, and no more; which check failed would help a
// forger, not a client.
func unauthorizedReason(err error) string {
	switch {
	case errors.Is(err, domain.ErrUnauthenticated):
		return `missing token: send connection_init with payload {"Authorization": "Bearer <JWT>"}`
	case errors.Is(err, auth.ErrExpired):
		return "token expired"
	default:
		return "invalid token"
	}
}
