package graph

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
)

// Complexity prices the fields whose answer grows with an argument: a
// connection costs its page size (first, with the default and the maximum
// the resolver applies) times what one item selects, so nested lists
// multiply. Every other field costs 1 plus its children (gqlgen's
// default): they answer from what their parent holds or from memory
// (StockUpdate.seckill reads the voucher's terms from the gate's per-node
// cache, and only when asked), never a read per item. The operation's total is checked against the HTTP edge's
// httpapi.Limits.MaxComplexity before anything runs.
func Complexity() ComplexityRoot {
	var c ComplexityRoot
	c.Query.Vouchers = func(child int, _ *int64, first *int, _ *string) int { return pageCost(child, first) }
	c.Query.MyOrders = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Query.DeadLetteredOrders = func(child int, _ *int64, first *int, _ *string) int { return pageCost(child, first) }
	return c
}

// pageCost is 1 for the connection plus child (its edges and pageInfo)
// once per item of the page. Counting pageInfo per item overprices it a
// little; the price stays a simple upper bound of the answer's size.
// A first out of range costs as the maximum: the resolver refuses it.
func pageCost(child int, first *int) int {
	n := domain.DefaultPageSize
	if first != nil {
		n = min(max(*first, 0), domain.MaxPageSize)
	}
	return 1 + n*max(child, 1)
}

// answerBudget counts the bytes an answer will take while its fields
// resolve, so that an operation whose answer passes the cap stops
// fetching (its context is cancelled) long before the whole answer sits
// in memory, and is then answered with one coded error instead.
type answerBudget struct {
	max    int64
	used   atomic.Int64
	over   atomic.Bool
	cancel context.CancelFunc
	once   sync.Once
}

type answerBudgetKey struct{}

// charge adds n bytes and reports whether the answer is still within the
// cap; the first charge past it cancels the operation's context.
func (b *answerBudget) charge(n int64) bool {
	if b.used.Add(n) <= b.max {
		return true
	}
	b.once.Do(func() { b.over.Store(true); b.cancel() })
	return false
}

// AnswerCap is the answer-size cap: a response middleware that gives each
// answer a budget, a field middleware that charges it, and the check of the
// marshalled answer (which catches what the estimate missed).
type AnswerCap struct{ max int64 }

// NewAnswerCap caps answers at max bytes (httpapi.Limits.MaxAnswerBytes).
func NewAnswerCap(max int64) AnswerCap { return AnswerCap{max: max} }

var _ interface {
	graphql.HandlerExtension
	graphql.ResponseInterceptor
	graphql.FieldInterceptor
} = AnswerCap{}

func (AnswerCap) ExtensionName() string                   { return "AnswerCap" }
func (AnswerCap) Validate(graphql.ExecutableSchema) error { return nil }

func (a AnswerCap) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &answerBudget{max: a.max, cancel: cancel}
	resp := next(context.WithValue(ctx, answerBudgetKey{}, b))
	if resp == nil {
		return nil
	}
	if b.over.Load() || int64(len(resp.Data)) > a.max {
		return &graphql.Response{Errors: gqlerror.List{a.tooLarge()}}
	}
	return resp
}

func (a AnswerCap) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	b, _ := ctx.Value(answerBudgetKey{}).(*answerBudget)
	if b == nil {
		return next(ctx)
	}
	if fc := graphql.GetFieldContext(ctx); fc != nil && b.over.Load() {
		// The answer will be dropped: nothing more is fetched, and
		// nullable fields (the long texts among them) stay null, so that
		// what is marshalled stays near the cap. Non-null fields of values
		// already in memory still resolve: they are short, and a null
		// there would add an error per field.
		if fc.IsResolver {
			return nil, a.tooLarge()
		}
		if def := fc.Field.Definition; def != nil && !def.Type.NonNull {
			return nil, nil
		}
	}
	res, err := next(ctx)
	b.charge(answerSize(ctx, res))
	return res, err
}

func (a AnswerCap) tooLarge() *gqlerror.Error {
	return OperationError(domain.Errorf(domain.CodeBadInput,
		"the answer would exceed %d bytes: ask for fewer items or fields", a.max))
}

// answerSize estimates the bytes a field adds to the answer: its name and
// punctuation, plus a string's length (escaping aside: the marshalled
// answer is checked too).
func answerSize(ctx context.Context, v any) int64 {
	n := int64(8)
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		n += int64(len(fc.Field.Alias))
	}
	switch s := v.(type) {
	case string:
		n += int64(len(s))
	case *string:
		if s != nil {
			n += int64(len(*s))
		}
	}
	return n
}
