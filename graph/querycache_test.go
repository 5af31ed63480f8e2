package graph

import (
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
)

func TestQueryCacheSkipsLongQueries(t *testing.T) {
	cache := newQueryCache()
	short, long := "{ __typename }", "{ __typename }"+strings.Repeat(" ", maxCachedQueryLen)
	doc := &ast.QueryDocument{}
	cache.Add(t.Context(), short, doc)
	cache.Add(t.Context(), long, doc)
	if _, ok := cache.Get(t.Context(), short); !ok {
		t.Error("a short query was not cached")
	}
	if _, ok := cache.Get(t.Context(), long); ok {
		t.Errorf("a %d-byte query was cached: a thousand of them pin gigabytes", len(long))
	}
}
