package admitcache

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

var ctx = context.Background()

// stringCache is a Cache of strings weighed by their bytes.
func stringCache(maxBytes int) *Cache[string] {
	return New(fmt.Sprintf("test-%d", maxBytes), maxBytes, func(k, v string) int { return len(k) + len(v) })
}

// use looks key up as a request would and adds it when it is missing.
func use(c *Cache[string], key string) bool {
	if _, ok := c.Get(ctx, key); ok {
		return true
	}
	c.Add(ctx, key, "")
	return false
}

// Whatever is added, the cache holds at most its bound in bytes; an
// entry heavier than its window is not kept at all.
func TestAdmitCacheStaysWithinItsBytes(t *testing.T) {
	c := stringCache(64 << 10)
	for i := range 2000 {
		use(c, fmt.Sprintf("%d-%s", i, strings.Repeat("x", 1+i%3000)))
		if w := c.weight(); w > 64<<10 {
			t.Fatalf("after %d entries the cache holds %d bytes, over its %d", i+1, w, 64<<10)
		}
	}
	heavy := strings.Repeat("y", 9<<10) // over the window of 8 KB
	use(c, heavy)
	if _, ok := c.Get(ctx, heavy); ok {
		t.Fatal("an entry heavier than the window was kept")
	}
}

// Entries clients use again and again survive a flood of entries used
// once, however many and however large: the flood passes through the
// window and never displaces them.
func TestAdmitCacheKeepsFrequentEntriesThroughAFlood(t *testing.T) {
	c := stringCache(256 << 10)
	var real []string
	for i := range 40 {
		real = append(real, fmt.Sprintf("query Real%d { vouchers { edges { node { id } } } }", i))
	}
	for range 5 {
		for _, k := range real {
			use(c, k)
		}
	}
	for i := range 5000 {
		use(c, fmt.Sprintf("#%d %s\n{ __typename }", i, strings.Repeat("z", 2000)))
	}
	for _, k := range real {
		if _, ok := c.Get(ctx, k); !ok {
			t.Fatalf("%q was evicted by documents used once", k)
		}
	}
	// A document that becomes popular still gets in.
	newcomer := "query Newcomer { vouchers { pageInfo { hasNextPage } } }"
	for range 20 {
		use(c, newcomer)
		for i := range 30 {
			use(c, fmt.Sprintf("#again %d %s\n{ __typename }", i, strings.Repeat("z", 2000)))
		}
	}
	if _, ok := c.Get(ctx, newcomer); !ok {
		t.Fatal("a document used 20 times did not get in")
	}
}
