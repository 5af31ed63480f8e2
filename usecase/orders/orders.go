// Package orders is what a buyer and an admin do with orders after the
// grab: see them, pay, cancel, restock a voucher, and the background work
// behind them (cancelling unpaid orders after the pay timeout, finishing
// stock returns a crash left half done, reconciliation). The rules of who
// may do what live here; the conditional changes and the exactly-once
// Redis scripts live in persistence.
package orders

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

	"flashsale/domain"
)

// Storer is the record of orders (persistence.Orders, built by node).
type Storer interface {
	// Get returns an order from the database or, not yet there, from the
	// order log (InFlight); NOT_FOUND otherwise.
	Get(ctx context.Context, id int64) (domain.Order, error)
	ListByUser(ctx context.Context, userID int64, page domain.Page) ([]domain.Order, bool, error)
	// Pay and Cancel change the user's unpaid order conditionally;
	// NOT_FOUND for an order of the database that is not the user's.
	Pay(ctx context.Context, id, userID int64, now time.Time) (domain.Order, error)
	Cancel(ctx context.Context, id, userID int64, now time.Time) (domain.Order, error)
	CancelDue(ctx context.Context, cutoff time.Time, limit int, now time.Time) (int, error)
	ApplyPending(ctx context.Context, before time.Time, limit int) (int, error)
	AddStock(ctx context.Context, r domain.Restock, now time.Time) error
}

// StockReader reads a voucher's live stock (catalog.Service).
type StockReader interface {
	Stock(ctx context.Context, id int64) (domain.StockLevel, error)
}

// Defaults.
const (
	// PayTimeoutDefault is the contract's default PAY_TIMEOUT.
	PayTimeoutDefault = 30 * time.Minute
	// InFlightWaitDefault is how long a payment or cancellation of an
	// order still in the order log waits for the order writer to persist
	// it (normally milliseconds) before answering UNAVAILABLE.
	InFlightWaitDefault = 3 * time.Second
)

// Config tunes the service; zero values take the defaults.
type Config struct {
	PayTimeout   time.Duration
	InFlightWait time.Duration
}

// Service applies the rules of orders.
type Service struct {
	store Storer
	stock StockReader
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
}

// New returns the order service.
func New(store Storer, stock StockReader, cfg Config, log *slog.Logger) *Service {
	cfg.PayTimeout = cmp.Or(cfg.PayTimeout, PayTimeoutDefault)
	cfg.InFlightWait = cmp.Or(cfg.InFlightWait, InFlightWaitDefault)
	return &Service{store: store, stock: stock, cfg: cfg, log: log, now: time.Now}
}

func (s *Service) withDeadline(o domain.Order) domain.Order {
	o.PayDeadline = o.CreatedAt.Add(s.cfg.PayTimeout)
	return o
}

// Get returns an order to its owner or an admin; anyone else hears
// NOT_FOUND, as for an unknown id. An order still in the order log is
// shown at once, as UNPAID.
func (s *Service) Get(ctx context.Context, c domain.Caller, id int64) (domain.Order, error) {
	o, err := s.store.Get(ctx, id)
	if err != nil {
		return domain.Order{}, err
	}
	if !c.CanSee(o) {
		return domain.Order{}, domain.OrderNotFound(id)
	}
	return s.withDeadline(o), nil
}

// Mine returns a page of the caller's own orders, newest first.
func (s *Service) Mine(ctx context.Context, c domain.Caller, page domain.Page) ([]domain.Order, bool, error) {
	if page.First < 0 || page.First > domain.MaxPageSize {
		return nil, false, domain.InvalidField("first", "must be between 0 and %d", domain.MaxPageSize)
	}
	os, more, err := s.store.ListByUser(ctx, c.UserID, page)
	if err != nil {
		return nil, false, err
	}
	for i := range os {
		os[i] = s.withDeadline(os[i])
	}
	return os, more, nil
}

// OfUser returns a page of a user's orders, newest first, for an admin;
// FORBIDDEN for anyone else.
func (s *Service) OfUser(ctx context.Context, c domain.Caller, userID int64, page domain.Page) ([]domain.Order, bool, error) {
	if !c.Admin {
		return nil, false, domain.ErrForbidden
	}
	return s.Mine(ctx, domain.Caller{UserID: userID}, page)
}

// Pay marks the caller's unpaid order paid. Only the owner pays (an admin
// paying someone's order is NOT_FOUND like anyone else).
func (s *Service) Pay(ctx context.Context, c domain.Caller, id int64) (domain.Order, error) {
	return s.change(ctx, c, id, s.store.Pay)
}

// Cancel cancels the caller's unpaid order; its unit and the caller's
// slot go back on sale.
func (s *Service) Cancel(ctx context.Context, c domain.Caller, id int64) (domain.Order, error) {
	return s.change(ctx, c, id, s.store.Cancel)
}

// change runs a payment or cancellation. An order still in the order log
// is waited for (InFlightWait), since the database is where the
// conditional change decides races; if it does not arrive in time the
// answer is UNAVAILABLE, safe to retry.
func (s *Service) change(ctx context.Context, c domain.Caller, id int64, op func(context.Context, int64, int64, time.Time) (domain.Order, error)) (domain.Order, error) {
	deadline := s.now().Add(s.cfg.InFlightWait)
	for {
		o, err := op(ctx, id, c.UserID, s.now())
		if err == nil {
			return s.withDeadline(o), nil
		}
		if domain.ErrorCode(err) != domain.CodeNotFound {
			return domain.Order{}, err
		}
		o, gerr := s.store.Get(ctx, id)
		if gerr != nil || o.UserID != c.UserID {
			return domain.Order{}, domain.OrderNotFound(id)
		}
		// In the log, or recorded since op looked (then op decides again
		// at once).
		if !s.now().Before(deadline) {
			return domain.Order{}, domain.Errorf(domain.CodeUnavailable, "order %d is still being recorded; retry in a moment", id)
		}
		if !o.InFlight {
			continue
		}
		select {
		case <-ctx.Done():
			return domain.Order{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// AddStock adds units to a seckill voucher, once per key; an empty key
// gets one of its own (so only a retry that repeats the key is recognised).
func (s *Service) AddStock(ctx context.Context, r domain.Restock) (domain.StockLevel, error) {
	if err := r.Validate(); err != nil {
		return domain.StockLevel{}, err
	}
	if r.Key == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		r.Key = "auto-" + hex.EncodeToString(b)
	}
	if err := s.store.AddStock(ctx, r, s.now()); err != nil {
		return domain.StockLevel{}, err
	}
	return s.stock.Stock(ctx, r.VoucherID)
}
