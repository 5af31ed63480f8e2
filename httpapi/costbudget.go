package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/internal/auth"
)

// CostBudget is each caller's budget of request cost, shared by every
// node (persistence.CostBudgets): a bucket of Capacity points, refilled at
// RestorePerSec, per user, and per address (an IPv6 address's /64) for
// requests without a valid token. An operation is charged its price (see
// graph.Complexity) after validation and before it runs, and given back
// what it did not use once answered; grabs are never charged: they have
// their own limits (RATE_USER_PER_SEC, the gate), and a caller's reads
// must never starve its grabs.
type CostBudget interface {
	Capacity() int
	RestorePerSec() int
	// Charge takes n points; retry > 0 when the bucket holds fewer
	// (nothing is taken then).
	Charge(ctx context.Context, caller string, n int) (remaining int, retry time.Duration, err error)
	// Refund gives n points back.
	Refund(ctx context.Context, caller string, n int) (remaining int, err error)
}

// Defaults of the budget (COST_BUDGET, COST_RESTORE_PER_SEC). A point is
// about a field's work (2 µs of CPU, 400 bytes allocated), so a caller
// who spends the restore rate steadily costs the node about 1 % of a
// core: 200 of the smallest requests a second (graph.RequestPoints). The capacity holds ten of the largest requests one may send
// (MaxComplexity), so a shop's frontend loading its heaviest page, a
// list of 75 vouchers with every field, passes with room to spare; the
// restore rate refills a default page (20 vouchers, about 500 points)
// every 100 ms.
const (
	CostBudgetDefault        = 10 * MaxComplexityDefault
	CostRestorePerSecDefault = 5000
)

// costRefundMin is the least unused cost given back: a refund is one more
// Redis round trip, worth it for a page that came back short, not for a
// few points.
const costRefundMin = 10

// costExtension is the name of the operation's charge in its stats, and
// of the answer's extensions entry.
const costExtension = "cost"

// costCharge charges each operation to its caller's budget
// (MutateOperationContext, after gqlgen's complexity limit has priced
// it), and reports the charge in the answer's extensions.cost
// (InterceptResponse), after giving back what the answer did not use.
type costCharge struct {
	budget  CostBudget
	refused *refusedCallers
	log     *slog.Logger
	// away is until when (Unix ns) the budget's Redis is taken to be away
	// after a call failed: requests are admitted without asking it, so
	// that a Redis outage costs reads one short wait a second, not one
	// per request.
	away *atomic.Int64
}

// Bounds of the budget's Redis calls: a charge waits at most
// costCallTimeout, and after a failed call the budget is not asked for
// costAwayFor.
const (
	costCallTimeout = 50 * time.Millisecond
	costAwayFor     = time.Second
)

var _ interface {
	graphql.HandlerExtension
	graphql.OperationInterceptor
	graphql.ResponseInterceptor
} = costCharge{}

// costPricing charges each operation to its caller's budget: costCharge's
// price, as a mutator of its own, registered after the introspection
// answers have priced an introspection operation by the fields of its
// answer (graph.IntrospectionFieldsStat). costCharge itself stays where it
// wraps those answers, to report their charge.
type costPricing struct{ charge costCharge } // not embedded: only the mutator is this extension's

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = costPricing{}

func (costPricing) ExtensionName() string                   { return "CostPricing" }
func (costPricing) Validate(graphql.ExecutableSchema) error { return nil }

func (p costPricing) MutateOperationContext(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	return p.charge.price(ctx, rc)
}

func (costCharge) ExtensionName() string                   { return "CostBudget" }
func (costCharge) Validate(graphql.ExecutableSchema) error { return nil }

// charge is one operation's: its caller, its price (its complexity and
// graph.RequestPoints) and what was left.
type charge struct {
	caller    string
	requested int
	remaining int
	charged   bool // false: the budget could not be reached, nothing was taken
}

// CostReport is an answer's extensions.cost: what the operation was
// priced before it ran (requested), what its answer cost (actual), and
// the caller's budget after it (remaining of capacity, restoreRate points
// back a second). Shopify's and GitHub's GraphQL APIs report the same.
type CostReport struct {
	Requested   int `json:"requested"`
	Actual      int `json:"actual"`
	Remaining   int `json:"remaining"`
	Capacity    int `json:"capacity"`
	RestoreRate int `json:"restoreRate"`
}

// price charges the operation (see costPricing).
func (c costCharge) price(ctx context.Context, rc *graphql.OperationContext) *gqlerror.Error {
	rc.Stats.SetExtension(costPriced, true)
	if rc.Operation == nil || grabsOnly(rc.Operation) {
		return nil
	}
	stats, _ := rc.Stats.GetExtension("ComplexityLimit").(*extension.ComplexityStats)
	if stats == nil {
		return nil
	}
	caller := costCaller(ctx)
	now := time.Now()
	if wait := c.refused.until(caller, now); wait > 0 {
		return graph.OperationError(overBudget(wait))
	}
	points := stats.Complexity
	if n, ok := rc.Stats.GetExtension(graph.IntrospectionFieldsStat).(int); ok {
		points = max(points, n/graph.IntrospectionFieldsPerPoint)
	}
	ch := &charge{caller: caller, requested: graph.RequestPoints + points}
	remaining, retry, charged := c.take(ctx, caller, ch.requested, now)
	if retry > 0 {
		return graph.OperationError(overBudget(retry))
	}
	ch.remaining, ch.charged = remaining, charged
	rc.Stats.SetExtension(costExtension, ch)
	return nil
}

// take charges points to caller's budget, at most costCallTimeout long:
// charged when it was taken; retry > 0 when the budget cannot pay, the
// caller then remembered as refused until now+retry; neither while the
// budget's Redis is away (costAwayFor after a failed call): the budget
// protects the node, and refusing everyone while Redis is away protects
// nothing (the per-request cap still holds).
func (c costCharge) take(ctx context.Context, caller string, points int, now time.Time) (remaining int, retry time.Duration, charged bool) {
	if now.UnixNano() < c.away.Load() {
		return 0, 0, false
	}
	callCtx, cancel := context.WithTimeout(ctx, costCallTimeout)
	remaining, retry, err := c.budget.Charge(callCtx, caller, points)
	cancel()
	switch {
	case err != nil:
		c.away.Store(now.Add(costAwayFor).UnixNano())
		c.log.WarnContext(ctx, "cost budget unavailable; requests admitted without it for a second", "err", err)
		return 0, 0, false
	case retry > 0:
		c.refused.add(caller, now.Add(retry))
		return 0, retry, false
	}
	return remaining, 0, true
}

// grabsOnly reports an operation of grabs alone, of vouchers or of red
// packets (with __typename at most): the budget never charges them.
func grabsOnly(op *ast.OperationDefinition) bool {
	if op.Operation != ast.Mutation {
		return false
	}
	fields := graph.RootFields(op.SelectionSet, map[string]bool{})
	for _, f := range fields {
		if f.Name != graph.GrabField && f.Name != graph.RedPacketGrabField && f.Name != "__typename" {
			return false
		}
	}
	return len(fields) > 0
}

// overBudget is the refusal of an operation its caller's budget cannot
// pay for now.
func overBudget(retry time.Duration) *domain.Error {
	return &domain.Error{Code: domain.CodeRateLimited, RetryAfter: retry,
		Message: "this request costs more than your budget holds now; retry after retryAfterMs, or ask for fewer items or fields (extensions.cost tells what each request costs)"}
}

// chargeOf is the operation's charge, nil when it was not charged (a
// grab, no budget reached) or is a subscription (charged once, at its
// start; its events report nothing).
func chargeOf(ctx context.Context) *charge {
	if !graphql.HasOperationContext(ctx) {
		return nil // an error answered before there was an operation
	}
	rc := graphql.GetOperationContext(ctx)
	ch, _ := rc.Stats.GetExtension(costExtension).(*charge)
	if ch == nil || !ch.charged || rc.Operation.Operation == ast.Subscription {
		return nil
	}
	return ch
}

// InterceptResponse counts what the answer cost (graph.CostMeter, which
// the answer cap feeds field by field), gives back the unused points and
// reports the charge.
func (c costCharge) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	ch := chargeOf(ctx)
	if ch == nil {
		c.chargeUnpriced(ctx)
		return next(ctx)
	}
	meter := &graph.CostMeter{}
	resp := next(graph.WithCostMeter(ctx, meter))
	if resp == nil {
		return resp
	}
	actual := graph.RequestPoints + meter.Points()
	remaining := ch.remaining
	if unused := ch.requested - actual; unused >= costRefundMin && time.Now().UnixNano() >= c.away.Load() {
		callCtx, cancel := context.WithTimeout(ctx, costCallTimeout)
		r, err := c.budget.Refund(callCtx, ch.caller, unused)
		cancel()
		if err != nil {
			c.away.Store(time.Now().Add(costAwayFor).UnixNano())
			c.log.WarnContext(ctx, "unused cost not given back", "err", err)
		} else {
			remaining = r
		}
	}
	c.report(resp, ch, actual, remaining)
	return resp
}

// costPriced marks an operation that reached the budget's pricing
// (MutateOperationContext), charged or not.
const costPriced = "cost-priced"

// documentBytes is the size of a document admission read (past the rate
// limits), for chargeUnpriced: a document admission refuses never gets
// its text into the operation context.
const documentBytes = "document-bytes"

// chargeUnpriced charges a signed-in caller's document refused before it
// was priced (admission's shape limits, parsing, validation, an earlier
// limit) by its size: RequestPoints and a point per TextBytesPerPoint
// bytes. Its work was done all the same, and bounded by its size
// (validation stops at the first errors), so a user who floods the node
// with wrong documents empties their budget as with right ones, and is
// then refused from memory before the next is parsed (budgetGate).
// Refusals by the rate limits are not charged (they must stay cheap), nor
// are anonymous callers: their gate paces them, which holds a flood back
// better than quick refusals from memory (measured: 1.6× against 4.2× a
// quiet p99).
func (c costCharge) chargeUnpriced(ctx context.Context) {
	if !graphql.HasOperationContext(ctx) {
		return
	}
	rc := graphql.GetOperationContext(ctx)
	if rc == nil || rc.Stats.GetExtension(costPriced) != nil {
		return
	}
	size, _ := rc.Stats.GetExtension(documentBytes).(int)
	if size = max(size, len(rc.RawQuery)); size == 0 {
		return
	}
	if _, err := auth.FromContext(ctx); err != nil {
		return
	}
	c.take(ctx, costCaller(ctx), graph.RequestPoints+size/graph.TextBytesPerPoint, time.Now())
}

// InterceptOperation reports the charge of an operation answered without
// running its fields (introspection, answered from the schema's model by
// graph.NewIntrospectionAnswers): it cost what it was priced.
func (c costCharge) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	h := next(ctx)
	return func(ctx context.Context) *graphql.Response {
		resp := h(ctx)
		if resp == nil {
			return resp
		}
		if _, done := resp.Extensions[costExtension]; !done {
			if ch := chargeOf(ctx); ch != nil {
				c.report(resp, ch, ch.requested, ch.remaining)
			}
		}
		return resp
	}
}

func (c costCharge) report(resp *graphql.Response, ch *charge, actual, remaining int) {
	if resp.Extensions == nil {
		resp.Extensions = map[string]any{}
	}
	resp.Extensions[costExtension] = CostReport{Requested: ch.requested, Actual: actual, Remaining: remaining,
		Capacity: c.budget.Capacity(), RestoreRate: c.budget.RestorePerSec()}
}

// costCaller is whose budget a request draws on: its user, or without a
// valid token its address (domain.ClientKey: an IPv6 address's /64).
func costCaller(ctx context.Context) string {
	if id, err := auth.FromContext(ctx); err == nil {
		return "u:" + strconv.FormatInt(id.UserID, 10)
	}
	return "a:" + domain.ParseClientKey(auth.ClientIP(ctx)).String()
}

// refusedCallers remembers, per caller, until when its budget refused it,
// so that a caller who goes on asking meanwhile is refused from memory:
// before its request is decoded (budgetGate) and without a Redis round
// trip. At most refusedCallersMax callers are remembered; past that a
// refusal is not remembered, and the next request asks Redis again.
type refusedCallers struct {
	mu sync.Mutex
	m  map[string]time.Time
}

const refusedCallersMax = 1 << 16

func newRefusedCallers() *refusedCallers { return &refusedCallers{m: map[string]time.Time{}} }

// until is how long caller stays refused after now; 0 when it is not.
func (r *refusedCallers) until(caller string, now time.Time) time.Duration {
	r.mu.Lock()
	t, ok := r.m[caller]
	if ok && !t.After(now) {
		delete(r.m, caller)
	}
	r.mu.Unlock()
	if !ok {
		return 0
	}
	return max(t.Sub(now), 0)
}

func (r *refusedCallers) add(caller string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= refusedCallersMax {
		now := time.Now()
		for k, t := range r.m {
			if !t.After(now) {
				delete(r.m, k)
			}
		}
		if len(r.m) >= refusedCallersMax {
			return
		}
	}
	r.m[caller] = until
}

// budgetGate answers 429 at once, before gqlgen decodes the request, to
// a caller its budget refused a moment ago and who asks again before
// retryAfterMs: the refusal costs a map lookup and a short write. A
// request that may be a grab of a voucher or a red packet passes
// (mayGrab): grabs are never charged.
type budgetGate struct {
	next    http.Handler
	refused *refusedCallers
	present graphql.ErrorPresenterFunc
}

func (g budgetGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions || r.Header.Get("Upgrade") != "" || mayGrab(r.Context()) {
		g.next.ServeHTTP(w, r)
		return
	}
	if wait := g.refused.until(costCaller(r.Context()), time.Now()); wait > 0 {
		shedTotal.WithLabelValues("budget").Inc()
		writeRateLimited(w, r, g.present, overBudget(wait))
		return
	}
	g.next.ServeHTTP(w, r)
}

type mayGrabKey struct{}

// withMayGrab marks a request whose body names the grab field: it may be
// a grab, which budgetGate lets through (admission and costCharge tell
// once it is parsed).
func withMayGrab(ctx context.Context) context.Context {
	return context.WithValue(ctx, mayGrabKey{}, true)
}

func mayGrab(ctx context.Context) bool { ok, _ := ctx.Value(mayGrabKey{}).(bool); return ok }
