package graph

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/domain"
)

// A request's cost, in points, is known before it runs and checked
// against the per-request cap (httpapi.Limits.MaxComplexity) and the
// caller's budget (httpapi.CostBudget) before anything is read:
//
//   - every field costs 1 plus its children (gqlgen's default): fields
//     answer from what their parent holds or from memory
//     (StockUpdate.seckill reads the voucher's terms from the gate's
//     per-node cache, and only when asked), never a read per item;
//   - a connection costs its page size (first, with the default and the
//     maximum the resolver applies) times what one item selects plus
//     RowPoints for reading the item's row, so nested lists multiply;
//   - a voucher's title, subTitle and rules cost one more point per
//     TextBytesPerPoint bytes of the longest such text stored (texts: the
//     catalog's TextSizes), since a page of long texts is most of what a
//     read costs: texts are bounded at creation and their longest length
//     is known before the page is read.
//
// One point is about a field's work: about 2 µs of CPU and 400 bytes
// allocated on the node (BenchmarkRequestCosts measures it).
func Complexity(texts func() domain.TextSizes) ComplexityRoot {
	var c ComplexityRoot
	c.Query.Vouchers = func(child int, _ *int64, first *int, _ *string) int { return pageCost(child, first) }
	c.Query.MyOrders = func(child int, first *int, _ *string) int { return pageCost(child, first) }
	c.Query.DeadLetteredOrders = func(child int, _ *int64, first *int, _ *string) int { return pageCost(child, first) }
	if texts != nil {
		c.Voucher.Title = func(int) int { return 1 + texts().Title/TextBytesPerPoint }
		c.Voucher.SubTitle = func(int) int { return 1 + texts().SubTitle/TextBytesPerPoint }
		c.Voucher.Rules = func(int) int { return 1 + texts().Rules/TextBytesPerPoint }
	}
	return c
}

// RequestPoints is what any request costs besides its fields, charged
// with its price to the caller's budget (httpapi.CostBudget): its HTTP
// and GraphQL handling, about 50 µs, which one field's point would
// leave out (a flood of { serverTime } then looked like 1 point a
// request).
const RequestPoints = 25

// RowPoints is what reading one item of a page from the database costs
// besides its fields: the row scanned (with its seckill row), and the
// item's live stock read with the page's.
const RowPoints = 10

// TextBytesPerPoint is how many bytes of a string cost one point more
// than its field, in the price before a request runs (the longest stored
// texts) and in what it actually cost (the strings answered).
const TextBytesPerPoint = 128

// pageCost is 1 for the connection plus, once per item of the page,
// child (its edges and pageInfo) and RowPoints. Counting pageInfo per item
// overprices it a little; the price stays a simple upper bound of the
// work and the answer's size. A first out of range costs as the maximum:
// the resolver refuses it.
func pageCost(child int, first *int) int {
	n := domain.DefaultPageSize
	if first != nil {
		n = min(max(*first, 0), domain.MaxPageSize)
	}
	return 1 + n*(max(child, 1)+RowPoints)
}

// selectsLongTexts reports whether the field being resolved (a voucher
// connection) selects a voucher's subTitle or rules anywhere below it:
// when it does not, the page is read without them.
func selectsLongTexts(ctx context.Context) bool {
	fc := graphql.GetFieldContext(ctx)
	if fc == nil || !graphql.HasOperationContext(ctx) {
		return true
	}
	return selectsName(graphql.GetOperationContext(ctx).Doc, fc.Field.Selections, map[string]bool{}, "subTitle", "rules")
}

// selectsName reports whether set selects, at any depth and under any
// fragment whatever its type condition, a field named one of names: only
// vouchers have fields of those names, so a match errs only towards
// reading the texts.
func selectsName(doc *ast.QueryDocument, set ast.SelectionSet, seen map[string]bool, names ...string) bool {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if slices.Contains(names, s.Name) || selectsName(doc, s.SelectionSet, seen, names...) {
				return true
			}
		case *ast.InlineFragment:
			if selectsName(doc, s.SelectionSet, seen, names...) {
				return true
			}
		case *ast.FragmentSpread:
			def := s.Definition
			if def == nil && doc != nil {
				def = doc.Fragments.ForName(s.Name)
			}
			if def != nil && !seen[s.Name] {
				seen[s.Name] = true
				if selectsName(doc, def.SelectionSet, seen, names...) {
					return true
				}
			}
		}
	}
	return false
}

// CostMeter counts what an operation actually cost, in the points of
// Complexity, as its fields resolve: 1 per field resolved and one more
// per TextBytesPerPoint bytes of each string answered. AnswerCap counts
// into the meter it finds in the context (WithCostMeter).
type CostMeter struct{ points atomic.Int64 }

// Points is the cost counted so far.
func (m *CostMeter) Points() int { return int(m.points.Load()) }

type costMeterKey struct{}

// countRows counts n items of a page read, RowPoints each, into the
// operation's meter, if it has one.
func countRows(ctx context.Context, n int) {
	if m, ok := ctx.Value(costMeterKey{}).(*CostMeter); ok {
		m.points.Add(int64(n * RowPoints))
	}
}

// WithCostMeter returns a context whose operation's fields are counted in
// m.
func WithCostMeter(ctx context.Context, m *CostMeter) context.Context {
	return context.WithValue(ctx, costMeterKey{}, m)
}

// answerBudget counts the bytes an answer will take while its fields
// resolve, so that an operation whose answer passes the cap stops
// fetching (its context is cancelled) long before the whole answer sits
// in memory, and is then answered with one coded error instead.
type answerBudget struct {
	max    int64
	meter  *CostMeter // nil: the cost is not counted
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
	meter, _ := ctx.Value(costMeterKey{}).(*CostMeter)
	b := &answerBudget{max: a.max, cancel: cancel, meter: meter}
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
	size, text := answerSize(ctx, res)
	b.charge(size)
	if b.meter != nil {
		b.meter.points.Add(1 + text/TextBytesPerPoint)
	}
	return res, err
}

func (a AnswerCap) tooLarge() *gqlerror.Error {
	return OperationError(domain.Errorf(domain.CodeBadInput,
		"the answer would exceed %d bytes: ask for fewer items or fields", a.max))
}

// answerSize estimates the bytes a field adds to the answer: its name and
// punctuation, plus a string's length (escaping aside: the marshalled
// answer is checked too), which is text.
func answerSize(ctx context.Context, v any) (size, text int64) {
	switch s := v.(type) {
	case string:
		text = int64(len(s))
	case *string:
		if s != nil {
			text = int64(len(*s))
		}
	}
	size = 8 + text
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		size += int64(len(fc.Field.Alias))
	}
	return size, text
}
