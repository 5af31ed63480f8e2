package catalog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"flashsale/domain"
	"flashsale/internal/metrics"
)

// vouchersHeld is Held summed over the process's Holds, for the dashboard
// and the alert on a hold that outlasts the writers' reports.
var vouchersHeld = metrics.Gauge("vouchers_held",
	"Vouchers whose reload on this node still holds their sales until no order writer can hold an order of the load Redis lost (their grabs answer UNAVAILABLE; /readyz answers 503 meanwhile).")

// A reload of a voucher that Redis lost (a restart, a failover, a wipe)
// holds the voucher's sales (persistence.Stock.Preheat): an order writer
// may hold orders sold from the lost load that no order log shows any
// more, and the reload could not count them. Holds ends each such hold as
// soon as no writer can hold one: when every writer with a live lease has
// reported holding nothing since the reload began (the lease rows,
// persistence.WriterLeases). The hold's own end in Redis
// (persistence.ReloadHoldDefault) stays the bound when a writer does not
// report.

// WriterRows is what Holds reads of the order writers' lease rows.
type WriterRows interface {
	// Now is the clock the rows are kept in (the database's).
	Now(ctx context.Context) (time.Time, error)
	// CleanSince is the earliest time since which every writer with a
	// live lease has held nothing read before it.
	CleanSince(ctx context.Context) (time.Time, error)
}

// HoldEnder ends a reload's hold (persistence.Stock.EndHold).
type HoldEnder interface {
	EndHold(ctx context.Context, voucherID int64, stamp string) (bool, error)
}

// holdPoll is how often Holds reads the lease rows while a hold waits.
const holdPoll = 20 * time.Millisecond

// Holds ends the holds of this node's reloads once no order writer can
// hold an order of the lost loads. Add is called by the reload; Run does
// the work until its context ends.
type Holds struct {
	rows  WriterRows
	stock HoldEnder
	log   *slog.Logger
	// Bound is how long after Add a hold is given up on (its end in Redis
	// has come by then): persistence.ReloadHoldDefault.
	Bound time.Duration

	mu      sync.Mutex
	pending map[int64]*heldLoad
	wake    chan struct{}
}

// heldLoad is one reload whose hold may end early.
type heldLoad struct {
	stamp string
	added time.Time // local clock, for Bound
	since time.Time // the rows' clock; zero until read
}

// NewHolds returns the hold releaser over the writers' rows and the stock.
func NewHolds(rows WriterRows, stock HoldEnder, bound time.Duration, log *slog.Logger) *Holds {
	return &Holds{rows: rows, stock: stock, log: log, Bound: bound, pending: map[int64]*heldLoad{}, wake: make(chan struct{}, 1)}
}

// Add asks for the hold of the voucher's reload stamped stamp to end
// early. It never blocks.
func (h *Holds) Add(voucherID int64, stamp string) {
	h.mu.Lock()
	if h.pending[voucherID] == nil {
		vouchersHeld.Inc()
	}
	h.pending[voucherID] = &heldLoad{stamp: stamp, added: time.Now()}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Held is how many of this node's reloads still hold their voucher's
// sales (up to Bound after each).
func (h *Holds) Held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending)
}

// forget drops the voucher's hold; h.mu is held.
func (h *Holds) forget(voucherID int64) {
	delete(h.pending, voucherID)
	vouchersHeld.Dec()
}

// Run ends holds until ctx ends.
func (h *Holds) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		case <-t.C:
		}
		if h.round(ctx) {
			t.Reset(holdPoll)
		}
	}
}

// round ends the holds it can and reports whether some still wait.
func (h *Holds) round(ctx context.Context) (waiting bool) {
	h.mu.Lock()
	var fresh []*heldLoad
	for id, l := range h.pending {
		if time.Since(l.added) > h.Bound {
			h.forget(id)
		} else if l.since.IsZero() {
			fresh = append(fresh, l)
		}
	}
	n := len(h.pending)
	h.mu.Unlock()
	if n == 0 {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if len(fresh) > 0 {
		// Read after the reload: a later time than its start, so a
		// writer clean since then was clean since the reload began.
		now, err := h.rows.Now(rctx)
		if err != nil {
			h.log.DebugContext(ctx, "reload holds: cannot read the database clock", "err", err)
			return true
		}
		h.mu.Lock()
		for _, l := range fresh {
			l.since = now
		}
		h.mu.Unlock()
	}
	clean, err := h.rows.CleanSince(rctx)
	if err != nil {
		h.log.DebugContext(ctx, "reload holds: cannot read the writers' leases", "err", err)
		return true
	}
	h.mu.Lock()
	type done struct {
		id   int64
		load heldLoad
	}
	var ready []done
	for id, l := range h.pending {
		if !l.since.IsZero() && !clean.Before(l.since) {
			ready = append(ready, done{id, *l})
		}
	}
	h.mu.Unlock()
	for _, d := range ready {
		ended, err := h.stock.EndHold(rctx, d.id, d.load.stamp)
		if err != nil {
			h.log.DebugContext(ctx, "reload holds: cannot end a hold", "voucher", d.id, "err", err)
			continue
		}
		h.mu.Lock()
		if cur := h.pending[d.id]; cur != nil && cur.stamp == d.load.stamp {
			h.forget(d.id)
		}
		h.mu.Unlock()
		if ended {
			h.log.InfoContext(ctx, "voucher sells again after its reload: no order writer holds an order of the lost load",
				"voucher", d.id, "held", time.Since(d.load.added).Round(time.Millisecond).String())
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending) > 0
}

// HeldWhy says why a reload holds its voucher's sales.
const HeldWhy = "reloaded after Redis lost its load: sells again once no order writer can hold an order of the lost load"

// Vouchers lists the vouchers this node's reloads hold, for the console.
func (h *Holds) Vouchers() []domain.HeldSale {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]domain.HeldSale, 0, len(h.pending))
	for id, l := range h.pending {
		out = append(out, domain.HeldSale{VoucherID: id, Since: l.added, Why: HeldWhy})
	}
	return out
}
