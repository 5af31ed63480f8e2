package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/internal/auth"
	"flashsale/internal/metrics"
)

// Websocket caps (HandlerOptions).
const (
	// WebsocketMaxPerUserDefault bounds the websockets one user holds at
	// once (WS_MAX_PER_USER): a page needs one, a user with a few tabs a
	// few. One token once held 500 sockets of 32 operations each: 17,500
	// goroutines and +235 MB.
	WebsocketMaxPerUserDefault = 16
	// WebsocketMaxPerIPDefault bounds the websockets open at once from one
	// client address (WS_MAX_PER_IP), tokens or not. It is higher than the
	// per-user cap because one address can be a carrier NAT or an office
	// with many shoppers behind it.
	WebsocketMaxPerIPDefault = 256
)

// closeTooManyRequests is graphql-ws's 4429, also used for a second
// connection_init: graphql-ws clients take it as final and do not
// reconnect in a loop, which is what a client over a socket cap should do
// (another attempt can only succeed once one of its sockets closes).
const closeTooManyRequests = 4429

// socketCaps counts the websockets open per client address (its client
// key, domain.ClientKey: an IPv4 address, an IPv6 /64) and per user and
// refuses one over either cap. The address is known at the upgrade,
// the user only at connection_init, so a socket takes its address's slot
// when it is accepted and its user's once authenticated; both are given
// back once, when the socket's connection closes (socketSlots).
//
// It also counts the sockets accepted that have not sent connection_init
// yet, every address together, up to maxUninit: each holds a connection,
// its buffers and goroutines until the init timeout, whoever opened it.
//
// The counts are per node, like the socket: a cluster of N nodes lets one
// user hold up to N times the cap, which bounds what one node holds.
type socketCaps struct {
	perIP, perUser, maxUninit int

	uninit atomic.Int64

	mu    sync.Mutex
	ips   map[netip.Addr]int
	users map[int64]int
}

func newSocketCaps(perIP, perUser, maxUninit int) *socketCaps {
	return &socketCaps{perIP: perIP, perUser: perUser, maxUninit: maxUninit, ips: map[netip.Addr]int{}, users: map[int64]int{}}
}

// takeUninit counts one more socket without connection_init, unless
// maxUninit are counted already.
func (c *socketCaps) takeUninit() bool {
	if c.uninit.Add(1) > int64(c.maxUninit) {
		c.uninit.Add(-1)
		return false
	}
	websocketsUninitialized.Inc()
	return true
}

func (c *socketCaps) giveUninit() {
	c.uninit.Add(-1)
	websocketsUninitialized.Dec()
}

// takeIP takes one of the slots of ip's client key and returns the key,
// or reports the cap is reached.
func (c *socketCaps) takeIP(ip string) (netip.Addr, bool) {
	key := domain.ParseClientKey(ip)
	c.mu.Lock()
	defer c.mu.Unlock()
	return key, take(c.ips, key, c.perIP)
}

// take counts one more holder of key, unless limit are counted already.
func take[K comparable](m map[K]int, key K, limit int) bool {
	if m[key] >= limit {
		return false
	}
	m[key]++
	return true
}

// give returns one slot of key; the map keeps only keys that hold some,
// so it is as large as the sockets open.
func give[K comparable](m map[K]int, key K) {
	if m[key] <= 1 {
		delete(m, key)
		return
	}
	m[key]--
}

// socketSlots is what one socket holds of the caps: its address's slot
// and an uninitialised socket's from the upgrade, and its user's from
// connection_init. release gives them back once, however many paths
// report the socket closed.
type socketSlots struct {
	caps *socketCaps
	ip   netip.Addr // the client key

	mu       sync.Mutex
	uninit   bool // holds an uninitialised socket's slot
	user     int64
	hasUser  bool
	released bool
}

// initialise gives back the uninitialised socket's slot, once
// connection_init has arrived (whether its token is good or not: a bad
// one closes the socket at once).
func (s *socketSlots) initialise() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uninit {
		s.uninit = false
		s.caps.giveUninit()
	}
}

// takeUser takes the socket's user slot at connection_init, or returns
// the error to close the socket with. A socket whose connection closed
// meanwhile takes nothing: it will never release.
func (s *socketSlots) takeUser(user int64) *domain.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released || s.hasUser {
		return nil
	}
	s.caps.mu.Lock()
	ok := take(s.caps.users, user, s.caps.perUser)
	s.caps.mu.Unlock()
	if !ok {
		websocketsRefused.WithLabelValues("user").Inc()
		return &domain.Error{
			Code:    domain.CodeRateLimited,
			Message: fmt.Sprintf("Too many requests: at most %d websockets per user; close one first", s.caps.perUser),
		}
	}
	s.user, s.hasUser = user, true
	return nil
}

// release gives back what the socket holds; only its first call counts.
func (s *socketSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	if s.uninit {
		s.uninit = false
		s.caps.giveUninit()
	}
	s.caps.mu.Lock()
	give(s.caps.ips, s.ip)
	if s.hasUser {
		give(s.caps.users, s.user)
	}
	s.caps.mu.Unlock()
	websocketsOpen.Dec()
}

type socketSlotsKey struct{}

// slotsFrom is the socket's slots, for the InitFunc (nil outside a
// websocket, or when the caps are off).
func slotsFrom(ctx context.Context) *socketSlots {
	s, _ := ctx.Value(socketSlotsKey{}).(*socketSlots)
	return s
}

// handshakeAdmission decides a websocket upgrade before anything is
// accepted. The handshake draws on the per-IP request limits like any
// request (SHED_IP_PER_SEC in process, then RATE_IP_PER_SEC): over them
// it is answered 429 and nothing is hijacked, the cheapest refusal, and
// graphql-ws clients retry it with their backoff, which is right for a
// rate. With the node's uninitialised sockets at their cap it is answered
// 503 the same way: the cap frees up within the init timeout, so a retry
// is right for it too. Then it takes one of its address's socket slots;
// ok false with a nil error means the address is at its cap.
type handshakeAdmission struct {
	caps    *socketCaps
	flood   *floodShedder // nil: off
	ipLimit IPLimiter     // nil: off
	log     *slog.Logger
}

// admit returns the socket's slots; or answered, the request refused
// over a rate; or neither, the address at its cap, nothing written (the
// caller accepts the socket to close it with 4429).
func (h handshakeAdmission) admit(w http.ResponseWriter, r *http.Request) (slots *socketSlots, answered bool) {
	ctx := r.Context()
	ip := auth.ClientIP(ctx)
	if h.flood != nil {
		if ok, wait := h.flood.allow(ip); !ok {
			shedTotal.WithLabelValues("flood").Inc()
			refuseHandshake(w, r, domain.RateLimited(wait))
			return nil, true
		}
	}
	if h.ipLimit != nil && h.ipLimit.IPEnabled() {
		wait, err := h.ipLimit.AllowIP(ctx, ip)
		switch {
		case err != nil:
			h.log.WarnContext(ctx, "per-IP limit unavailable; websocket handshake admitted", "err", err)
		case wait > 0:
			refuseHandshake(w, r, domain.RateLimited(wait))
			return nil, true
		}
	}
	if !h.caps.takeUninit() {
		websocketsRefused.WithLabelValues("uninitialized").Inc()
		hdr := w.Header()
		hdr["Content-Type"] = plainJSON
		hdr["Retry-After"] = retryAfterOneSecond
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(uninitializedBody)
		return nil, true
	}
	key, ok := h.caps.takeIP(ip)
	if !ok {
		h.caps.giveUninit()
		websocketsRefused.WithLabelValues("ip").Inc()
		return nil, false
	}
	websocketsOpen.Inc()
	return &socketSlots{caps: h.caps, ip: key, uninit: true}, false
}

// uninitializedBody is the answer to a handshake over the node's cap of
// uninitialised sockets, made once.
var uninitializedBody, _ = json.Marshal(graphql.Response{Errors: gqlerror.List{graph.OperationError(domain.Errorf(domain.CodeUnavailable,
	"too many websockets are opening on this node; retry in a second"))}})

var retryAfterOneSecond = []string{"1"}

// refuseHandshake answers a handshake over a rate as any refusal outside
// gqlgen (writeRateLimited).
func refuseHandshake(w http.ResponseWriter, r *http.Request, de *domain.Error) {
	websocketsRefused.WithLabelValues("rate").Inc()
	writeRateLimited(w, r, nil, de)
}

// ipCapReason is the close reason of a socket over its address's cap
// (at most 123 bytes: the close frame's limit).
func ipCapReason(perIP int) string {
	return fmt.Sprintf("Too many requests: at most %d websockets from one address", perIP)
}

var (
	websocketsOpen = metrics.Gauge("websockets_open",
		"Websockets open on this node, from the upgrade until their connection closes.")
	websocketsRefused = metrics.CounterVec("websockets_refused_total",
		"Websocket handshakes refused: over the per-IP request rate (rate), the node's cap of sockets without connection_init (uninitialized), the per-IP socket cap (ip) or the per-user socket cap (user).",
		"reason")
	websocketsUninitialized = metrics.Gauge("websockets_uninitialized",
		"Websockets on this node accepted and not yet sent connection_init (WS_MAX_UNINITIALIZED).")
	subscribesRefused = metrics.CounterVec("websocket_operations_limited_total",
		"Websocket operations over their socket's rate (WS_SUBSCRIBES_PER_SEC), by outcome: refused with RATE_LIMITED (limited), or the socket closed with 4429 (closed).",
		"outcome")
)
