// Package live fans out changes of stock levels and orders to this node's
// subscribers (the GraphQL subscriptions stockChanged and orderChanged),
// whichever node made the change: changes travel between nodes as ids on
// Redis pub/sub, and each node re-reads the current value once per change
// for all its subscribers.
//
// Stock and order states are levels, not event streams: a subscriber only
// ever needs the newest value. So the publisher never blocks and never
// queues: each subscriber has one slot holding "something changed", and
// the subscriber reads the current value when it gets to it (STYLE: never
// block a publisher on a subscriber).
package live

import "sync"

// slot is one subscriber's coalescing mailbox: a flag raised by every
// publish, however many, until the subscriber takes it. Its bound is one;
// when it is full a publish has nothing to add.
type slot struct {
	key   int64
	ready chan struct{}
}

func (s *slot) raise() {
	select {
	case s.ready <- struct{}{}:
	default: // already raised: the subscriber reads the newest value anyway
	}
}

// hub holds the slots of the subscribers of each key (voucher or order id).
type hub struct {
	mu    sync.Mutex
	slots map[int64]map[*slot]struct{}
}

func newHub() *hub { return &hub{slots: map[int64]map[*slot]struct{}{}} }

func (h *hub) subscribe(key int64) *slot {
	s := &slot{key: key, ready: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.slots[key]
	if m == nil {
		m = map[*slot]struct{}{}
		h.slots[key] = m
	}
	m[s] = struct{}{}
	return s
}

func (h *hub) unsubscribe(s *slot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.slots[s.key]
	delete(m, s)
	if len(m) == 0 {
		delete(h.slots, s.key)
	}
}

// publish raises the slot of every subscriber of key; it never blocks.
func (h *hub) publish(key int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.slots[key] {
		s.raise()
	}
}

// watched reports whether key has a subscriber on this node.
func (h *hub) watched(key int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.slots[key]) > 0
}

// count is the number of subscribers.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.slots {
		n += len(m)
	}
	return n
}

// keys are the keys with subscribers.
func (h *hub) keys() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]int64, 0, len(h.slots))
	for k := range h.slots {
		out = append(out, k)
	}
	return out
}

// idSet is a set of ids waiting for one loop to take them, with a signal
// raised when it becomes non-empty. It is bounded by the ids in use (the
// vouchers of this node, or the orders with a subscriber), so adding
// never blocks and never drops.
type idSet struct {
	mu     sync.Mutex
	ids    map[int64]struct{}
	signal chan struct{}
}

func newIDSet() *idSet { return &idSet{ids: map[int64]struct{}{}, signal: make(chan struct{}, 1)} }

func (s *idSet) add(id int64) {
	s.mu.Lock()
	s.ids[id] = struct{}{}
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

func (s *idSet) take() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int64, 0, len(s.ids))
	for id := range s.ids {
		out = append(out, id)
	}
	clear(s.ids)
	return out
}
