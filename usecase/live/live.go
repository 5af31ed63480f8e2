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

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"flashsale/domain"
)

// StockReader reads a voucher's current stock (catalog.Service).
type StockReader interface {
	Stock(ctx context.Context, id int64) (domain.StockLevel, error)
}

// OrderReader returns an order to its owner or an admin, NOT_FOUND to
// anyone else (orders.Service).
type OrderReader interface {
	Get(ctx context.Context, c domain.Caller, id int64) (domain.Order, error)
}

// Bus tells every node which vouchers' stock changed (persistence.Live).
type Bus interface {
	PublishStock(ctx context.Context, voucherIDs []int64) error
}

// Defaults of Options.
const (
	// StockIntervalDefault is the least time between two stock events of
	// one subscriber (the contract: at most one per 250 ms while it
	// changes).
	StockIntervalDefault = 250 * time.Millisecond
	// PublishIntervalDefault is the least time between two stock
	// announcements of this node: the grabs sold meanwhile, of any number
	// of vouchers, make one PUBLISH.
	PublishIntervalDefault = 100 * time.Millisecond
	// readTimeout bounds one re-read of the stock of the changed vouchers.
	readTimeout = 2 * time.Second
)

// Options tunes the service; zero values take the defaults.
type Options struct {
	StockInterval   time.Duration
	PublishInterval time.Duration
}

// Service fans stock and order changes out to this node's subscribers.
type Service struct {
	stock  StockReader
	orders OrderReader
	bus    Bus
	log    *slog.Logger
	opts   Options

	stockSubs, orderSubs *hub
	// sold holds the vouchers this node sold from since its last
	// announcement; changed those announced (by any node) whose stock
	// this node has not re-read yet.
	sold, changed *idSet

	mu     sync.Mutex
	levels map[int64]domain.StockLevel // the last read of each watched voucher
}

// New returns the service; Run must run for changes to flow. orders may be
// nil (orderChanged then answers NOT_IMPLEMENTED in the resolver).
func New(stock StockReader, orders OrderReader, bus Bus, log *slog.Logger, opts Options) *Service {
	opts.StockInterval = cmp.Or(opts.StockInterval, StockIntervalDefault)
	opts.PublishInterval = cmp.Or(opts.PublishInterval, PublishIntervalDefault)
	return &Service{
		stock: stock, orders: orders, bus: bus, log: log, opts: opts,
		stockSubs: newHub(), orderSubs: newHub(),
		sold: newIDSet(), changed: newIDSet(),
		levels: map[int64]domain.StockLevel{},
	}
}

// Sold records that this node sold units of a voucher (called by the
// voucher actor after a batch). It never blocks and costs no Redis call:
// the sales of PublishInterval are announced together.
func (s *Service) Sold(voucherID int64) { s.sold.add(voucherID) }

// StockChanged is called for every voucher announced by any node (and for
// the voucher events: restock, cancellations, status); a voucher with a
// subscriber here is re-read once for all of them.
func (s *Service) StockChanged(voucherID int64) {
	if s.stockSubs.watched(voucherID) {
		s.changed.add(voucherID)
	}
}

// OrderChanged is called for every order announced by any node: its
// subscribers here re-read it.
func (s *Service) OrderChanged(orderID int64) { s.orderSubs.publish(orderID) }

// Resync re-reads everything watched here: announcements made while the
// pub/sub connection was down are lost.
func (s *Service) Resync() {
	for _, id := range s.stockSubs.keys() {
		s.changed.add(id)
	}
	for _, id := range s.orderSubs.keys() {
		s.orderSubs.publish(id)
	}
}

// Open counts this node's open subscriptions, stock and order (for the
// subscriptions-open gauge of the metrics).
func (s *Service) Open() (stock, orders int) { return s.stockSubs.count(), s.orderSubs.count() }

// Run announces this node's sales and re-reads the changed vouchers until
// ctx ends; it returns when both loops have stopped.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.announce(ctx) })
	wg.Go(func() { s.refresh(ctx) })
	wg.Wait()
}

// announce publishes the vouchers sold from, at most once per
// PublishInterval. A failed publish is logged and dropped: the stock
// subscribers elsewhere then show the level of the next change (or of
// their next subscription), never a wrong one for longer.
func (s *Service) announce(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.sold.signal:
		}
		if ids := s.sold.take(); len(ids) > 0 {
			pctx, cancel := context.WithTimeout(ctx, readTimeout)
			if err := s.bus.PublishStock(pctx, ids); err != nil && ctx.Err() == nil {
				s.log.Warn("stock change not announced; subscribers see the next one", "vouchers", len(ids), "err", err)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.opts.PublishInterval):
		}
	}
}

// refresh re-reads the changed vouchers, one at a time in one loop so that
// the levels it hands out follow each other in time (the last read is the
// newest), and raises their subscribers' slots.
func (s *Service) refresh(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed.signal:
		}
		for _, id := range s.changed.take() {
			rctx, cancel := context.WithTimeout(ctx, readTimeout)
			l, err := s.stock.Stock(rctx, id)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("stock of a changed voucher not read; subscribers see the next change", "voucher", id, "err", err)
				}
				continue
			}
			s.mu.Lock()
			s.levels[id] = l
			s.mu.Unlock()
			s.stockSubs.publish(id)
		}
	}
}

// SubscribeStock sends the voucher's current level at once, then every
// change, at most one per StockInterval and always ending on the newest.
// It returns the first read's error (NOT_FOUND for an unknown voucher).
// The goroutine it starts belongs to the subscription: it ends, and calls
// done, when ctx ends or send returns false; send may block (a slow
// client) without holding anyone else up.
func (s *Service) SubscribeStock(ctx context.Context, voucherID int64, send func(domain.StockLevel) bool, done func()) error {
	sub := s.stockSubs.subscribe(voucherID)
	first, err := s.stock.Stock(ctx, voucherID)
	if err != nil {
		s.unsubscribeStock(sub)
		return err
	}
	go func() {
		defer done()
		defer s.unsubscribeStock(sub)
		last, sent := first, time.Now()
		if !send(first) {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.ready:
			}
			// Changes during the wait raise the slot again; the level
			// read after it is the newest.
			if wait := s.opts.StockInterval - time.Since(sent); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			select {
			case <-sub.ready: // taken with this read
			default:
			}
			s.mu.Lock()
			l, ok := s.levels[voucherID]
			s.mu.Unlock()
			if !ok || (l.Remaining == last.Remaining && l.Initial == last.Initial) {
				continue
			}
			if !send(l) {
				return
			}
			last, sent = l, time.Now()
		}
	}()
	return nil
}

func (s *Service) unsubscribeStock(sub *slot) {
	s.stockSubs.unsubscribe(sub)
	s.mu.Lock()
	if !s.stockSubs.watched(sub.key) {
		delete(s.levels, sub.key)
	}
	s.mu.Unlock()
}

// SubscribeOrder sends the order as the caller may see it at once
// (NOT_FOUND, returned, for an order that is not theirs), then on every
// change: recorded in the database, paid, cancelled, timed out. Like
// SubscribeStock, its goroutine belongs to the subscription.
func (s *Service) SubscribeOrder(ctx context.Context, c domain.Caller, orderID int64, send func(domain.Order) bool, done func()) error {
	sub := s.orderSubs.subscribe(orderID)
	first, err := s.orders.Get(ctx, c, orderID)
	if err != nil {
		s.orderSubs.unsubscribe(sub)
		return err
	}
	go func() {
		defer done()
		defer s.orderSubs.unsubscribe(sub)
		last := first
		if !send(first) {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.ready:
			}
			o, err := s.orders.Get(ctx, c, orderID)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("changed order not read; its subscriber sees the next change", "order", orderID, "err", err)
				}
				continue
			}
			if sameOrderState(o, last) {
				continue
			}
			if !send(o) {
				return
			}
			last = o
		}
	}()
	return nil
}

// sameOrderState reports whether nothing a subscriber can tell apart
// changed; leaving the order log (InFlight) counts, as "recorded".
func sameOrderState(a, b domain.Order) bool {
	return a.Status == b.Status && a.InFlight == b.InFlight &&
		timeEqual(a.PaidAt, b.PaidAt) && timeEqual(a.CancelledAt, b.CancelledAt)
}

func timeEqual(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

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
