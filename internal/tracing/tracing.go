// Package tracing holds what the service's own spans share beyond a
// context: the span contexts of sold grabs, kept in memory by order id
// until the order writer stores those orders, so that its batch's span
// links them (an order reaches the writer through the order log, which
// carries no trace context).
package tracing

import (
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of the service's own spans.
const Name = "flashsale"

// CarryDefault is how many sold grabs' span contexts a Carry keeps by
// default.
const CarryDefault = 1 << 16

// Carry keeps the span contexts of sold grabs by order id, bounded: of
// two generations of at most max/2 each, the older is dropped whole when
// the newer fills, so that the orders another node stores (whose context
// nobody takes here) age out. A nil *Carry keeps nothing.
type Carry struct {
	mu       sync.Mutex
	max      int
	cur, old map[int64]trace.SpanContext
}

// NewCarry returns a Carry of at most max span contexts (CarryDefault
// when max <= 0).
func NewCarry(max int) *Carry {
	if max <= 0 {
		max = CarryDefault
	}
	return &Carry{max: max, cur: map[int64]trace.SpanContext{}}
}

// Put keeps sc for the order; only a sampled span context is worth a
// link, so any other is not kept.
func (c *Carry) Put(orderID int64, sc trace.SpanContext) {
	if c == nil || !sc.IsSampled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) >= c.max/2 {
		c.old, c.cur = c.cur, make(map[int64]trace.SpanContext, len(c.cur))
	}
	c.cur[orderID] = sc
}

// Take returns and forgets the span context kept for the order.
func (c *Carry) Take(orderID int64) (trace.SpanContext, bool) {
	if c == nil {
		return trace.SpanContext{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc, ok := c.cur[orderID]; ok {
		delete(c.cur, orderID)
		return sc, true
	}
	sc, ok := c.old[orderID]
	if ok {
		delete(c.old, orderID)
	}
	return sc, ok
}

// Len is how many span contexts are kept.
func (c *Carry) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}
