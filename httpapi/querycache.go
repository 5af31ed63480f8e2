package httpapi

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"flashsale/internal/admitcache"
	"flashsale/internal/auth"
)

// The caches' bounds, in bytes as their weighers estimate them. Real
// clients send a few dozen documents of a few hundred bytes (a parsed
// document weighs about 250 bytes per field), so each bound holds every
// document they use many times over; what one client can make a node
// hold is the bound, never more.
const (
	// documentCacheBytes bounds the parsed and validated documents,
	// keyed by their text (gqlgen's query cache).
	documentCacheBytes = 4 << 20
	// persistedCacheBytes bounds the texts of automatic persisted
	// queries, keyed by their hash.
	persistedCacheBytes = 2 << 20
	// planCacheBytes bounds the compiled grab plans, keyed by text
	// (compiledGrabs); a text is at most compiledMaxText bytes.
	planCacheBytes = 512 << 10
)

func newQueryCache() *admitcache.Cache[*ast.QueryDocument] {
	return admitcache.New("documents", documentCacheBytes, func(key string, doc *ast.QueryDocument) int {
		return len(key) + documentWeight(doc)
	})
}

// documentWeight estimates the bytes of a parsed document from its
// nodes, as measured on gqlparser's AST: about 240 bytes a field (its
// names, position, argument and directive lists, the definitions
// validation links), 160 an argument or variable with its value, 120 a
// directive, 200 an operation or fragment.
func documentWeight(doc *ast.QueryDocument) int {
	if doc == nil {
		return 0
	}
	n := 0
	var set func(ast.SelectionSet)
	directives := func(list ast.DirectiveList) {
		for _, d := range list {
			n += 120 + 160*len(d.Arguments)
		}
	}
	set = func(s ast.SelectionSet) {
		for _, sel := range s {
			switch x := sel.(type) {
			case *ast.Field:
				n += 240 + 160*len(x.Arguments)
				directives(x.Directives)
				set(x.SelectionSet)
			case *ast.InlineFragment:
				n += 120
				directives(x.Directives)
				set(x.SelectionSet)
			case *ast.FragmentSpread:
				n += 120
				directives(x.Directives)
			}
		}
	}
	for _, op := range doc.Operations {
		n += 200 + 160*len(op.VariableDefinitions)
		directives(op.Directives)
		set(op.SelectionSet)
	}
	for _, f := range doc.Fragments {
		n += 200
		directives(f.Directives)
		set(f.SelectionSet)
	}
	return n
}

// newPersistedCache is the automatic-persisted-query cache: a query
// registered by a caller without a valid token is not kept (gqlgen's
// extension registers the text before admission decides; such a caller
// may run introspection alone, and sends its text again next time), so
// anonymous clients cannot fill it at all.
func newPersistedCache() graphql.Cache[string] {
	return signedInAdds[string]{admitcache.New("persisted", persistedCacheBytes, func(key, text string) int {
		return len(key) + len(text)
	})}
}

// signedInAdds keeps only what callers with a valid token add.
type signedInAdds[V any] struct{ *admitcache.Cache[V] }

func (c signedInAdds[V]) Add(ctx context.Context, key string, v V) {
	if _, err := auth.FromContext(ctx); err == nil {
		c.Cache.Add(ctx, key, v)
	}
}
