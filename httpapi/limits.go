package httpapi

import (
	"context"
	"fmt"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"flashsale/graph"
)

// depthLimit rejects operations nested deeper than max fields. gqlgen has
// a complexity limit but no depth limit; depth is what a recursive schema
// abuse (or a fragment chain) grows first. Introspection (root fields
// __schema and __type) has its own, larger bound: GraphiQL's schema query is
// 15 levels deep.
type depthLimit struct{ max, introspectionMax int }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = depthLimit{}

func (depthLimit) ExtensionName() string                   { return "DepthLimit" }
func (depthLimit) Validate(graphql.ExecutableSchema) error { return nil }

func (d depthLimit) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	memo := map[string]int{}
	for _, sel := range graph.RootFields(oc.Operation.SelectionSet, map[string]bool{}) {
		limit := d.max
		if sel.Name == "__schema" || sel.Name == "__type" {
			limit = d.introspectionMax
		}
		if depth := 1 + selectionDepth(sel.SelectionSet, memo); depth > limit {
			return &gqlerror.Error{
				Message:    fmt.Sprintf("query is nested %d levels deep under %s; the limit is %d", depth, sel.Name, limit),
				Extensions: map[string]any{"code": "DEPTH_LIMIT_EXCEEDED"},
			}
		}
	}
	return nil
}

// selectionDepth is the deepest chain of fields under set. Fragment depths
// are memoised by name so that a document repeating a fragment many times
// costs one walk of it (validation has already rejected fragment cycles).
func selectionDepth(set ast.SelectionSet, memo map[string]int) int {
	deepest := 0
	for _, sel := range set {
		var d int
		switch s := sel.(type) {
		case *ast.Field:
			d = 1 + selectionDepth(s.SelectionSet, memo)
		case *ast.InlineFragment:
			d = selectionDepth(s.SelectionSet, memo)
		case *ast.FragmentSpread:
			if s.Definition == nil {
				continue
			}
			cached, ok := memo[s.Name]
			if !ok {
				memo[s.Name] = 0 // guards against a cycle that slipped through
				cached = selectionDepth(s.Definition.SelectionSet, memo)
				memo[s.Name] = cached
			}
			d = cached
		}
		if d > deepest {
			deepest = d
		}
	}
	return deepest
}
