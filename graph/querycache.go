package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/vektah/gqlparser/v2/ast"
)

// Parsed queries are cached by their text. The cache is bounded by entry
// count, not bytes, so a query longer than maxCachedQueryLen (real clients'
// queries are a few hundred bytes) is parsed every time instead: a thousand
// entries of near-limit queries and their ASTs would pin over a gigabyte.
const (
	queryCacheSize    = 1000
	maxCachedQueryLen = 16 << 10
)

// boundedCache skips entries whose key is too long to be worth keeping.
type boundedCache[T any] struct {
	graphql.Cache[T]
	maxKeyLen int
}

func (c boundedCache[T]) Add(ctx context.Context, key string, value T) {
	if len(key) <= c.maxKeyLen {
		c.Cache.Add(ctx, key, value)
	}
}

func newQueryCache() graphql.Cache[*ast.QueryDocument] {
	return boundedCache[*ast.QueryDocument]{Cache: lru.New[*ast.QueryDocument](queryCacheSize), maxKeyLen: maxCachedQueryLen}
}
