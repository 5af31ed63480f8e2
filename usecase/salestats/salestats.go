// Package salestats is a sale's live figures for the console: grabs a
// second by answer, their latency, the stock, the writer's lag and the
// waiting room, cluster-wide.
//
// Each node counts the grabs it answers in memory (Recorder: a mutex and
// a few increments a grab, no Redis call), per voucher and second, and
// once a second adds the seconds that are over to the cluster's figures in
// Redis (Service's loop: one pipeline a second for every voucher it sold).
// A subscriber, on any node, reads the cluster's sum of the last whole
// second once a second, half a second after it ended, so that every node
// has added its own (clocks within a few hundred milliseconds of each
// other, as NTP keeps them). Summing latency histograms, not averages,
// makes the cluster's quantiles true ones, within a bucket (19 %).
package salestats

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"flashsale/domain"
)

// Store keeps the cluster's figures (implemented by persistence.SaleStats).
type Store interface {
	Add(ctx context.Context, seconds []domain.SaleSecond) error
	Second(ctx context.Context, voucherID, second int64) (domain.SaleSecond, int64, error)
	Room(ctx context.Context, voucherID int64) (domain.RoomFigures, bool, error)
	StoredOrders(ctx context.Context, voucherID int64) (int, error)
}

// StockReader reads a voucher's live stock (catalog.Service).
type StockReader interface {
	Stock(ctx context.Context, id int64) (domain.StockLevel, error)
}

// Defaults of Options.
const (
	// MaxVouchersDefault bounds the vouchers a node counts at once; grabs
	// of more are not counted (a node sells a handful at a time).
	MaxVouchersDefault = 1024
	// IdleAfterDefault is how long a voucher without grabs keeps its
	// counters before they are dropped.
	IdleAfterDefault = time.Minute
	// readDelay is how long after a second's end a subscriber reads it:
	// every node adds its second within about 100 ms of its end.
	readDelay = 500 * time.Millisecond
	// flushDelay is how long after a second's end a node adds it.
	flushDelay = 50 * time.Millisecond
	// pendingMax bounds the ended seconds a voucher keeps for a flush that
	// failed (Redis away): older ones are dropped, not queued.
	pendingMax = 4
)

// Options tune the recorder; zero values take the defaults.
type Options struct {
	MaxVouchers int
	IdleAfter   time.Duration
	// Now is the clock (tests); time.Now by default.
	Now func() time.Time
}

// Service records this node's grabs and serves the cluster's figures.
type Service struct {
	store Store
	stock StockReader
	log   *slog.Logger
	opts  Options

	// vouchers maps a voucher's id to its *window: a sync.Map, whose
	// reads take no lock, since every grab reads it; mu serialises its
	// changes and count is its size, under mu.
	vouchers sync.Map
	mu       sync.Mutex
	count    int
}

// window is one voucher's counts on this node: the second being counted
// and the ended seconds not yet added to the cluster's.
type window struct {
	mu      sync.Mutex
	cur     domain.SaleSecond
	pending []domain.SaleSecond
	last    int64 // the latest second with a grab
}

// New returns the service over its store and the stock; its loop (Start)
// adds this node's seconds to the store.
func New(store Store, stock StockReader, log *slog.Logger, opts Options) *Service {
	opts.MaxVouchers = cmp.Or(opts.MaxVouchers, MaxVouchersDefault)
	opts.IdleAfter = cmp.Or(opts.IdleAfter, IdleAfterDefault)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Service{store: store, stock: stock, log: log, opts: opts}
}

// Record counts one answered grab of voucher, with the index of its
// answer in domain.SaleCodes and how long its caller waited. It is on the
// grab's path: a lock-free map read and the voucher's own lock, never a
// call out.
func (s *Service) Record(voucher int64, code int, took time.Duration, now time.Time) {
	var w *window
	if v, ok := s.vouchers.Load(voucher); ok {
		w = v.(*window)
	} else if w = s.add(voucher); w == nil {
		return
	}
	sec := now.Unix()
	w.mu.Lock()
	if w.cur.Second != sec {
		w.rotate(sec)
	}
	w.last = sec
	w.cur.Codes[code]++
	w.cur.Latency[domain.LatencyBucket(took)]++
	w.mu.Unlock()
}

// add makes voucher's window; nil when MaxVouchers are counted already.
func (s *Service) add(voucher int64) *window {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.vouchers.Load(voucher); ok {
		return v.(*window)
	}
	if s.count >= s.opts.MaxVouchers {
		return nil
	}
	w := &window{cur: domain.SaleSecond{VoucherID: voucher}}
	s.vouchers.Store(voucher, w)
	s.count++
	return w
}

// rotate ends the current second (kept for the next flush when it
// counted anything) and starts sec. w.mu is held.
func (w *window) rotate(sec int64) {
	if w.cur.Second != 0 && w.cur.Total() > 0 {
		if len(w.pending) >= pendingMax {
			w.pending = w.pending[1:]
		}
		w.cur.Nodes = 1
		w.pending = append(w.pending, w.cur)
	}
	w.cur = domain.SaleSecond{VoucherID: w.cur.VoucherID, Second: sec}
}

// ended takes the seconds before now that are over, and reports whether
// the voucher has been idle since before idleSince.
func (w *window) ended(now, idleSince int64) (out []domain.SaleSecond, idle bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur.Second < now {
		w.rotate(now)
	}
	out, w.pending = w.pending, nil
	return out, len(out) == 0 && w.last < idleSince
}

// Flush adds every second that is over to the cluster's figures and
// drops the counters of vouchers idle for IdleAfter; it returns how many
// seconds it added. A failed add keeps them for the next flush (up to
// pendingMax a voucher).
func (s *Service) Flush(ctx context.Context) (int, error) {
	now := s.opts.Now()
	sec := now.Unix()
	idleSince := now.Add(-s.opts.IdleAfter).Unix()
	var out []domain.SaleSecond
	var idle []int64
	s.vouchers.Range(func(id, v any) bool {
		secs, isIdle := v.(*window).ended(sec, idleSince)
		out = append(out, secs...)
		if isIdle {
			idle = append(idle, id.(int64))
		}
		return true
	})
	if len(idle) > 0 {
		s.mu.Lock()
		for _, id := range idle {
			// A grab between the two looks keeps it.
			if v, ok := s.vouchers.Load(id); ok && v.(*window).idle(idleSince) {
				s.vouchers.Delete(id)
				s.count--
			}
		}
		s.mu.Unlock()
	}
	if err := s.store.Add(ctx, out); err != nil {
		s.requeue(out)
		return 0, err
	}
	return len(out), nil
}

// idle reports whether nothing was counted since before idleSince.
func (w *window) idle(idleSince int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) == 0 && w.last < idleSince
}

// requeue puts back seconds a failed flush took.
func (s *Service) requeue(secs []domain.SaleSecond) {
	for _, sec := range secs {
		v, ok := s.vouchers.Load(sec.VoucherID)
		if !ok {
			continue
		}
		w := v.(*window)
		w.mu.Lock()
		if len(w.pending) < pendingMax {
			w.pending = append(w.pending, sec)
		}
		w.mu.Unlock()
	}
}

// Run flushes once a second, just after each second ends, until ctx
// ends (the node runs it as a lifecycle.Loop).
func (s *Service) Run(ctx context.Context) {
	for {
		if !sleepUntil(ctx, s.opts.Now(), flushDelay) {
			return
		}
		if _, err := s.Flush(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("sale figures not added (kept for the next second)", "err", err)
		}
	}
}

// sleepUntil waits until offset past the next whole second; false when
// ctx ended first.
func sleepUntil(ctx context.Context, now time.Time, offset time.Duration) bool {
	next := now.Truncate(time.Second).Add(time.Second + offset)
	if d := now.Sub(now.Truncate(time.Second)); d < offset {
		next = now.Truncate(time.Second).Add(offset)
	}
	t := time.NewTimer(next.Sub(now))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Read is a voucher's figures now: the cluster's last whole second that
// every node has added (the one before now, when now is past readDelay
// into its second), the stock, the stored orders and the room.
func (s *Service) Read(ctx context.Context, voucherID int64) (domain.SaleStats, error) {
	now := s.opts.Now()
	sec := now.Add(-readDelay).Unix() - 1
	stock, err := s.stock.Stock(ctx, voucherID)
	if err != nil {
		return domain.SaleStats{}, err
	}
	last, answered, err := s.store.Second(ctx, voucherID, sec)
	if err != nil {
		return domain.SaleStats{}, err
	}
	stored, err := s.store.StoredOrders(ctx, voucherID)
	if err != nil {
		return domain.SaleStats{}, err
	}
	out := domain.SaleStats{VoucherID: voucherID, Last: last, Remaining: stock.Remaining, Sold: stock.Sold(),
		Answered: answered, Stored: stored, At: now}
	room, ok, err := s.store.Room(ctx, voucherID)
	if err != nil {
		return domain.SaleStats{}, err
	}
	if ok {
		out.Room = &room
	}
	return out, nil
}

// Subscribe sends voucherID's figures at once, then once a second (half
// a second after each second ends), from a goroutine of its own that ends
// with ctx or a send refused, and then calls done. A failed first read is
// the error (NOT_FOUND for a voucher without stock); a later one skips
// its second.
func (s *Service) Subscribe(ctx context.Context, voucherID int64, send func(domain.SaleStats) bool, done func()) error {
	first, err := s.Read(ctx, voucherID)
	if err != nil {
		return err
	}
	go func() {
		defer done()
		if !send(first) {
			return
		}
		for sleepUntil(ctx, s.opts.Now(), readDelay) {
			st, err := s.Read(ctx, voucherID)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Debug("sale figures not read", "voucher_id", voucherID, "err", err)
				}
				continue
			}
			if !send(st) {
				return
			}
		}
	}()
	return nil
}
