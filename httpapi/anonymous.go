package httpapi

import (
	"cmp"
	"context"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"flashsale/domain"
	"flashsale/internal/auth"
)

// AnonymousBudget bounds what requests without a valid token (no
// Authorization header, a bad or expired token) may take of a node, so
// that a flood of them cannot slow down signed-in users: at most InFlight
// run at once and at most PerSecond start each second. One over the
// budget waits its turn, for up to Wait, without using the CPU; past
// that, or when too many already wait, it is answered 429 with
// Retry-After and RATE_LIMITED (retryAfterMs) at once, before gqlgen
// reads it. Requests with a valid token never wait here, and neither do
// websocket handshakes (their operations need a token, at
// connection_init) nor OPTIONS.
//
// Why waiting and a rate rather than a refusal alone: a refusal still
// costs the node the request's HTTP work, and a client that floods sends
// the next one at once, so refusing alone keeps the node's core busy
// with refusals; a request that waits holds its client, costs a timer,
// and the flood's rate falls to the budget's. Anonymous operations are
// priced elsewhere (a few milliseconds at most), so PerSecond times that
// price bounds their share of the node's time.
//
// A zero field takes its default (per core for InFlight and PerSecond); a
// negative one turns that bound off, or for Wait, the wait.
type AnonymousBudget struct {
	InFlight  int
	PerSecond int
	Wait      time.Duration
}

// Defaults of the budget (ANON_MAX_IN_FLIGHT, ANON_PER_SEC, ANON_WAIT),
// per core (GOMAXPROCS). The costliest anonymous requests measured take
// 1-2 ms of CPU (the hostile shapes refused after their parse, a 60 KB
// document or persisted-query registration), so 100 a second keep them
// under a fifth of a core; nobody signed in needs more (health checks,
// the playground's schema query where introspection is open).
const (
	AnonymousInFlightPerCore  = 1
	AnonymousPerSecondPerCore = 100
	AnonymousWaitDefault      = time.Second
)

// WithDefaults is b with its zero fields at their defaults, as the
// handler applies them.
func (b AnonymousBudget) WithDefaults() AnonymousBudget {
	cores := runtime.GOMAXPROCS(0)
	b.InFlight = cmp.Or(b.InFlight, AnonymousInFlightPerCore*cores)
	b.PerSecond = cmp.Or(b.PerSecond, AnonymousPerSecondPerCore*cores)
	b.Wait = cmp.Or(b.Wait, AnonymousWaitDefault)
	return b
}

// anonymousWaitersPerSlot bounds the requests waiting for an in-flight
// slot: each holds a goroutine and its body (up to MAX_BODY_BYTES).
const anonymousWaitersPerSlot = 64

// anonymousGate is AnonymousBudget in front of gqlgen, after the token
// middleware (it reads the request's identity from the context).
type anonymousGate struct {
	next    http.Handler
	budget  *anonymousBudget
	present graphql.ErrorPresenterFunc
}

func (g anonymousGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.budget == nil || r.Method == http.MethodOptions || r.Header.Get("Upgrade") != "" {
		g.next.ServeHTTP(w, r)
		return
	}
	if _, err := auth.FromContext(r.Context()); err == nil {
		g.next.ServeHTTP(w, r)
		return
	}
	release, retry, ok := g.budget.admit(r.Context(), anonymousWeight(r.ContentLength))
	if !ok {
		if r.Context().Err() != nil {
			return // the client left while it waited
		}
		shedTotal.WithLabelValues("anonymous").Inc()
		g.refuse(w, r, retry)
		return
	}
	defer release()
	g.next.ServeHTTP(w, r)
}

// refuse answers 429 with Retry-After and the RATE_LIMITED error a POST
// would get.
func (g anonymousGate) refuse(w http.ResponseWriter, r *http.Request, retry time.Duration) {
	writeRateLimited(w, r, g.present, &domain.Error{Code: domain.CodeRateLimited, RetryAfter: retry,
		Message: "too many requests without a token on this node; retry later, or sign in"})
}

// anonymousBudget admits anonymous requests: a pacing of PerSecond (a
// start time reserved per request, a burst of InFlight after a quiet
// spell) and InFlight slots.
type anonymousBudget struct {
	slots    chan struct{} // nil: no bound on those in flight
	interval time.Duration // between two starts; 0: no rate
	burst    int
	wait     time.Duration
	// maxWaiting bounds the requests waiting for a slot at once (those
	// waiting for their start are bounded by the rate and the wait).
	maxWaiting int64
	waiting    atomic.Int64
	now        func() time.Time

	mu sync.Mutex
	// next is when the next request may start, by the rate.
	next time.Time
}

// newAnonymousBudget returns nil (no budget) when both bounds are off.
func newAnonymousBudget(b AnonymousBudget) *anonymousBudget {
	if b.InFlight <= 0 && b.PerSecond <= 0 {
		return nil
	}
	out := &anonymousBudget{wait: max(b.Wait, 0), burst: max(b.InFlight, 1), now: time.Now}
	if b.InFlight > 0 {
		out.slots = make(chan struct{}, b.InFlight)
		out.maxWaiting = int64(anonymousWaitersPerSlot * b.InFlight)
	}
	if b.PerSecond > 0 {
		out.interval = time.Second / time.Duration(b.PerSecond)
	}
	return out
}

// anonymousBytesPerStart is how many bytes of a request body take one
// start of the anonymous rate: the work on a document grows with its
// size (parsing it, validating it, up to 1.8 ms for 60 KB), so a large
// one takes several of the rate's starts and the rate bounds the CPU, not
// only the count.
const anonymousBytesPerStart = 8 << 10

// anonymousWeight is how many starts of the rate a body of n bytes takes
// (n < 0: unknown, taken as one).
func anonymousWeight(n int64) int {
	return 1 + int(max(n, 0)/anonymousBytesPerStart)
}

// admit takes the budget for one request of weight starts of the rate,
// waiting for it if need be: release gives its slot back once it is
// answered. ok is false when the request is refused (or its client gone),
// and retry is then when the budget may admit it.
func (b *anonymousBudget) admit(ctx context.Context, weight int) (release func(), retry time.Duration, ok bool) {
	now := b.now()
	if b.interval > 0 {
		// Those waiting for their start are at most wait/interval: no
		// other bound is needed for them.
		d := b.reserve(now, b.wait, weight)
		if d < 0 {
			return nil, b.retryAfter(now), false
		}
		if !sleepFor(ctx, d) {
			return nil, 0, false
		}
	}
	if b.takeSlot() {
		return b.release, 0, true
	}
	left := b.wait - b.now().Sub(now)
	if left <= 0 || !b.enter() {
		return nil, b.retryAfter(now), false
	}
	defer b.waiting.Add(-1)
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case b.slots <- struct{}{}:
		return b.release, 0, true
	case <-t.C:
		return nil, b.retryAfter(now), false
	case <-ctx.Done():
		return nil, 0, false
	}
}

// reserve takes the rate's next start if it is at most within after
// now, and returns how long after now it is; -1 when it is later
// (nothing is taken).
func (b *anonymousBudget) reserve(now time.Time, within time.Duration, weight int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	// After a quiet spell, up to burst requests may start at once.
	if earliest := now.Add(-time.Duration(b.burst-1) * b.interval); b.next.Before(earliest) {
		b.next = earliest
	}
	d := max(b.next.Sub(now), 0)
	if d > within {
		return -1
	}
	b.next = b.next.Add(time.Duration(max(weight, 1)) * b.interval)
	return d
}

func (b *anonymousBudget) takeSlot() bool {
	if b.slots == nil {
		return true
	}
	select {
	case b.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (b *anonymousBudget) release() {
	if b.slots != nil {
		<-b.slots
	}
}

// enter counts one more request waiting for a slot, unless too many
// are.
func (b *anonymousBudget) enter() bool {
	if b.waiting.Add(1) > b.maxWaiting {
		b.waiting.Add(-1)
		return false
	}
	return true
}

// retryAfter is when a refused request may try again: the rate's next
// start, and at least a second (Retry-After counts whole seconds).
func (b *anonymousBudget) retryAfter(now time.Time) time.Duration {
	b.mu.Lock()
	next := b.next
	b.mu.Unlock()
	return max(next.Sub(now), time.Second)
}

// sleepFor waits d, or until ctx ends (false).
func sleepFor(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
