package httpapi

import (
	"context"
	"log/slog"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/internal/auth"
)

// admission refuses, before gqlgen parses and validates an operation,
// what can be refused cheaply, cheapest first (a request without a valid
// token has passed the anonymous budget before, see anonymousGate):
//
//  1. the in-process per-IP flood limit (SHED_IP_PER_SEC), every
//     operation;
//  2. the shared per-IP limit (RATE_IP_PER_SEC, one Redis round trip),
//     every operation but a grab;
//  3. an operation whose shape could make validation expensive (see
//     shapeLimits);
//  4. an operation that is not introspection alone, without a valid
//     token; __schema or __type that INTROSPECTION rules out (for
//     everyone, or without a token), or asked beside other root fields;
//  5. a non-core operation while the node sheds load.
//
// It is a gqlgen OperationParameterMutator: these run after the request
// is decoded (HTTP body or websocket message) and before the executor
// parses and validates, and they see the operation's text. A text that is
// in the query cache has passed validation before: its cached document
// tells exactly what it asks, so a grab is known without parsing (and
// its per-IP budget is left to its voucher actor, which answers grabs
// decided from memory for free). Any other text is parsed here once with
// gqlparser's parser, which is linear, and the executor parses it again
// if it is admitted: one more linear parse on a cache miss buys never
// running validation on a hostile shape.
type admission struct {
	cache   graphql.Cache[*ast.QueryDocument]
	flood   *floodShedder // nil: off
	ipLimit IPLimiter     // nil: off
	shed    *loadShedder  // nil: off
	shape   shapeLimits
	tokens  int // the parser's token limit
	log     *slog.Logger

	// introspection says who may ask __schema and __type.
	introspection graph.IntrospectionMode
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationParameterMutator
} = admission{}

func (admission) ExtensionName() string                   { return "Admission" }
func (admission) Validate(graphql.ExecutableSchema) error { return nil }

func (a admission) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	doc, known := a.cache.Get(ctx, params.Query)
	var op *ast.OperationDefinition
	if known {
		op = doc.Operations.ForName(params.OperationName)
	}
	grab := op != nil && isGrab(op)
	if a.flood != nil {
		if ok, wait := a.flood.allow(auth.ClientIP(ctx)); !ok {
			shedTotal.WithLabelValues("flood").Inc()
			return graph.OperationError(domain.RateLimited(wait))
		}
	}
	if !grab {
		if err := a.limitIP(ctx); err != nil {
			return graph.OperationError(err)
		}
	}
	// Past the rate limits, the document is read: a refusal from here on
	// is charged to the caller's budget by its size (costCharge).
	graphql.GetOperationContext(ctx).Stats.SetExtension(documentBytes, len(params.Query))
	if !known {
		parsed, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: params.Query}, a.tokens)
		if err != nil {
			return nil // the executor reports it, with gqlgen's code
		}
		if err := checkShape(parsed, a.shape); err != nil {
			return err
		}
		doc = parsed
		op = doc.Operations.ForName(params.OperationName)
	}
	if op == nil {
		return nil // the executor reports a missing operation
	}
	fields := namedRootFields(op.SelectionSet, doc.Fragments, map[string]bool{})
	_, authErr := auth.FromContext(ctx)
	if authErr != nil && !graph.IntrospectionOnly(fields) {
		return graph.OperationError(graph.AsDomainError(authErr))
	}
	if err := graph.IntrospectionRefusal(a.introspection, fields, authErr == nil); err != nil {
		return graph.OperationError(err)
	}
	if a.shed != nil && isSheddable(fields) && a.shed.shedding() {
		shedTotal.WithLabelValues("load").Inc()
		return graph.OperationError(domain.Errorf(domain.CodeUnavailable, "the node is busy with a sale and sheds this operation for now; retry in a few seconds"))
	}
	return nil
}

// isGrab reports an operation that is a grab and nothing else, from a
// validated document (its fragment spreads are linked).
func isGrab(op *ast.OperationDefinition) bool {
	if op.Operation != ast.Mutation {
		return false
	}
	fields := graph.RootFields(op.SelectionSet, map[string]bool{})
	for _, f := range fields {
		if f.Name != graph.GrabField && f.Name != "__typename" {
			return false
		}
	}
	return len(fields) > 0
}

// namedRootFields is graph.RootFields for a document that may not be
// validated yet: fragment spreads are found by name.
func namedRootFields(set ast.SelectionSet, frags ast.FragmentDefinitionList, seen map[string]bool) []*ast.Field {
	var out []*ast.Field
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			out = append(out, s)
		case *ast.InlineFragment:
			out = append(out, namedRootFields(s.SelectionSet, frags, seen)...)
		case *ast.FragmentSpread:
			if def := frags.ForName(s.Name); def != nil && !seen[s.Name] {
				seen[s.Name] = true
				out = append(out, namedRootFields(def.SelectionSet, frags, seen)...)
			}
		}
	}
	return out
}
