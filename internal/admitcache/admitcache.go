// Package admitcache is a cache bounded by the bytes of its entries whose
// admission keeps what clients use often (W-TinyLFU): the GraphQL caches of
// parsed documents, persisted queries, grab plans and introspection answers
// are filled by whatever clients send.
package admitcache

import (
	"context"
	"hash/maphash"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"flashsale/internal/metrics"
)

// Cache is a cache bounded by the bytes of its entries (as its
// weigher estimates them, keys included), whose admission keeps what
// clients use often: the caches of parsed documents, persisted queries
// and grab plans are filled by whatever clients send, and an LRU bounded
// by entry count let one anonymous client pin 50 MB with 1,000 distinct
// 16 KB documents and evict every document real clients had cached.
//
// It is a small W-TinyLFU (Einziger, Friedman, Manes: "TinyLFU: A Highly
// Efficient Cache Admission Policy"): a newcomer enters a window (an LRU
// of an eighth of the bytes); the entry the window pushes out enters the
// main LRU only if it was asked for more often, as a frequency sketch
// estimates, than every entry it would displace there. Documents sent
// once stay in the window and leave it; documents asked again and again
// stay in the main part whatever passes through the window. The sketch
// counts every lookup, also of keys not held, in 4-bit counters halved
// every 10 lookups per counter, so old popularity fades.
//
// Every operation takes one mutex: the caches are looked up once per
// request, as gqlgen's LRU (also one mutex) was.
type Cache[V any] struct {
	name  string
	weigh func(key string, v V) int

	mu     sync.Mutex
	items  map[string]*admitEntry[V]
	window admitList[V]
	main   admitList[V]
	sketch frequencySketch

	bytes   prometheus.Gauge
	hits    prometheus.Counter
	misses  prometheus.Counter
	dropped prometheus.Counter
}

type admitEntry[V any] struct {
	key        string
	val        V
	weight     int
	hash       uint64
	inMain     bool
	prev, next *admitEntry[V]
}

// admitList is an LRU list of entries with their total weight: the front
// is the most recently used.
type admitList[V any] struct {
	head, tail *admitEntry[V]
	weight     int
	max        int
}

func (l *admitList[V]) pushFront(e *admitEntry[V]) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	}
	l.head = e
	if l.tail == nil {
		l.tail = e
	}
	l.weight += e.weight
}

func (l *admitList[V]) remove(e *admitEntry[V]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.weight -= e.weight
}

var (
	cacheBytes = metrics.GaugeVec("graphql_cache_bytes",
		"Estimated bytes held by a GraphQL cache (documents, persisted queries, grab plans).",
		"cache")
	cacheLookups = metrics.CounterVec("graphql_cache_lookups_total",
		"Lookups in a GraphQL cache by result (hit, miss).",
		"cache", "result")
	cacheDropped = metrics.CounterVec("graphql_cache_dropped_total",
		"Entries a GraphQL cache let go without displacing more often used ones (or too large to keep).",
		"cache")
)

// New returns a cache named name (its metrics' label) that holds
// at most maxBytes as weigh counts them; an entry heavier than the window
// (an eighth of maxBytes) is not kept.
func New[V any](name string, maxBytes int, weigh func(key string, v V) int) *Cache[V] {
	window := max(maxBytes/8, 1)
	c := &Cache[V]{
		name:    name,
		weigh:   weigh,
		items:   map[string]*admitEntry[V]{},
		window:  admitList[V]{max: window},
		main:    admitList[V]{max: maxBytes - window},
		sketch:  newFrequencySketch(),
		bytes:   cacheBytes.WithLabelValues(name),
		hits:    cacheLookups.WithLabelValues(name, "hit"),
		misses:  cacheLookups.WithLabelValues(name, "miss"),
		dropped: cacheDropped.WithLabelValues(name),
	}
	return c
}

// Get returns the value of key and counts the lookup, held or not.
func (c *Cache[V]) Get(_ context.Context, key string) (V, bool) {
	h := maphash.String(cacheSeed, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sketch.increment(h)
	e := c.items[key]
	if e == nil {
		c.misses.Inc()
		var zero V
		return zero, false
	}
	c.hits.Inc()
	l := c.list(e)
	l.remove(e)
	l.pushFront(e)
	return e.val, true
}

// Add offers key's value: a newcomer enters the window; a key held is
// updated where it is.
func (c *Cache[V]) Add(_ context.Context, key string, v V) {
	w := c.weigh(key, v)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.items[key]; e != nil {
		l := c.list(e)
		l.remove(e)
		e.val, e.weight = v, w
		l.pushFront(e)
	} else {
		if w > c.window.max {
			c.dropped.Inc()
			return
		}
		e := &admitEntry[V]{key: key, val: v, weight: w, hash: maphash.String(cacheSeed, key)}
		c.items[key] = e
		c.window.pushFront(e)
	}
	for c.window.weight > c.window.max {
		c.promote(c.window.tail)
	}
	for c.main.weight > c.main.max { // a held entry grew
		c.evict(c.main.tail)
	}
	c.bytes.Set(float64(c.window.weight + c.main.weight))
}

func (c *Cache[V]) list(e *admitEntry[V]) *admitList[V] {
	if e.inMain {
		return &c.main
	}
	return &c.window
}

// promote moves the window's least recently used entry to the main part
// if it fits there, or if it is asked for more often than every entry it
// would displace; otherwise it is dropped.
func (c *Cache[V]) promote(cand *admitEntry[V]) {
	c.window.remove(cand)
	need := c.main.weight + cand.weight - c.main.max
	freq := c.sketch.estimate(cand.hash)
	victim := c.main.tail
	for freed := 0; freed < need; victim = victim.prev {
		if victim == nil || c.sketch.estimate(victim.hash) >= freq {
			delete(c.items, cand.key)
			c.dropped.Inc()
			return
		}
		freed += victim.weight
	}
	for c.main.weight+cand.weight > c.main.max {
		c.evict(c.main.tail)
	}
	cand.inMain = true
	c.main.pushFront(cand)
}

func (c *Cache[V]) evict(e *admitEntry[V]) {
	c.list(e).remove(e)
	delete(c.items, e.key)
}

// weight is the bytes held, for tests.
func (c *Cache[V]) weight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.window.weight + c.main.weight
}

// cacheSeed keys the sketch's hash per process, so that a client cannot
// compute keys that collide with the ones real clients use.
var cacheSeed = maphash.MakeSeed()

// frequencySketch is a count-min sketch of 4-bit counters (one byte each
// here, capped at 15): four rows of sketchWidth, one counter per row for
// a key; its estimate is the least of them. After sketchWidth*10
// increments every counter is halved.
type frequencySketch struct {
	rows    [4][sketchWidth]uint8
	samples int
}

const sketchWidth = 4096 // a power of two

func newFrequencySketch() frequencySketch { return frequencySketch{} }

func (s *frequencySketch) index(h uint64, row int) uint32 {
	// Double hashing: the high half, made odd, steps through the rows.
	step := uint32(h>>32) | 1
	return (uint32(h) + uint32(row)*step) & (sketchWidth - 1)
}

func (s *frequencySketch) increment(h uint64) {
	// Conservative update: only the counters at the minimum grow, which
	// keeps collisions from inflating a rare key's estimate.
	least := s.estimate(h)
	if least < 15 {
		for r := range s.rows {
			if i := s.index(h, r); s.rows[r][i] == least {
				s.rows[r][i]++
			}
		}
	}
	if s.samples++; s.samples >= 10*sketchWidth {
		s.samples = 0
		for r := range s.rows {
			for i := range s.rows[r] {
				s.rows[r][i] >>= 1
			}
		}
	}
}

func (s *frequencySketch) estimate(h uint64) uint8 {
	least := uint8(15)
	for r := range s.rows {
		least = min(least, s.rows[r][s.index(h, r)])
	}
	return least
}
