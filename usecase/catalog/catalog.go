// Package catalog manages vouchers: it keeps Postgres (the record) and
// Redis (the live stock) in step when vouchers are created, paused, read and
// preheated.
package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"flashsale/domain"
)

// VoucherStore is the record of vouchers (persistence.Vouchers, built by
// node). The catalog declares only what it calls, so that it depends on no
// storage package and a new use case adds its own store interface rather
// than widening this one.
type VoucherStore interface {
	Create(ctx context.Context, in domain.NewVoucher, now time.Time) (domain.Voucher, error)
	Get(ctx context.Context, id int64) (domain.Voucher, error)
	List(ctx context.Context, shopID *int64, page domain.Page) ([]domain.Voucher, bool, error)
	SetStatus(ctx context.Context, id int64, status domain.VoucherStatus, now time.Time) (domain.Voucher, error)
	// SetSegments changes a paused seckill voucher's segment count.
	SetSegments(ctx context.Context, id int64, segments int, now time.Time) error
	SeckillsEndingAfter(ctx context.Context, t time.Time) ([]domain.Voucher, error)
	// Preload runs load on a snapshot of a seckill voucher taken under its
	// row lock and records the load stamp load returns; NOT_FOUND for an id
	// that is no seckill voucher.
	Preload(ctx context.Context, id int64, load domain.Loader) error
	// DBSoldVouchers lists the vouchers the database fallback sold since
	// Redis last loaded them.
	DBSoldVouchers(ctx context.Context) ([]int64, error)
	// TextSizes returns the lengths of the longest texts stored.
	TextSizes(ctx context.Context) (domain.TextSizes, error)
}

// StockStore is the live stock in Redis (persistence.Stock, built by node),
// where the grab script reads status and stock: the catalog keeps it in
// step with the record.
type StockStore interface {
	// Preheat writes a load from snap, stamped with stamp, unless Redis
	// has the voucher's stock already; it reports whether it wrote.
	Preheat(ctx context.Context, snap domain.LoadSnapshot, stamp string) (domain.LoadResult, error)
	// Unload takes back the load with this stamp, if Redis still holds it.
	Unload(ctx context.Context, voucherID int64, stamp string) error
	SetStatus(ctx context.Context, id int64, status domain.VoucherStatus, version time.Time) error
	// StatusVersions reads the version of the status Redis holds for each
	// voucher; a voucher not in Redis is absent.
	StatusVersions(ctx context.Context, ids []int64) (map[int64]time.Time, error)
	Levels(ctx context.Context, ids []int64, now time.Time) (map[int64]domain.StockLevel, error)
	// Stale returns the vouchers among ids whose load Redis does not hold
	// verified on the server now serving; one it could not ask about is
	// left out, and the first such error returned.
	Stale(ctx context.Context, ids []int64) ([]int64, error)
}

// Service is the voucher catalog.
type Service struct {
	vouchers VoucherStore
	stock    StockStore
	log      *slog.Logger
	now      func() time.Time

	// Holds, if set, ends the holds of this catalog's reloads as soon as
	// no order writer can hold an order of the lost load; without it a
	// reload holds its sales for the stock's ReloadHold.
	Holds *Holds

	// uncopied holds the status changes this node committed but could not
	// copy to Redis, the newest per voucher (so at most one entry per
	// voucher), for SyncStatuses to copy without the database, which may
	// be down by then.
	mu       sync.Mutex
	uncopied map[int64]statusCopy

	// texts are the longest texts stored, as this node knows them: read
	// by RefreshTextSizes, raised by this node's creations at once.
	texts     atomic.Pointer[domain.TextSizes]
	textsRead atomic.Int64 // when RefreshTextSizes last read them (Unix ns)
}

// statusCopy is a status with its version, the row's update time: read
// together, from one row, so that Redis's version check never pairs one
// change's status with another's version.
type statusCopy struct {
	status  domain.VoucherStatus
	version time.Time
}

// New returns a catalog over the voucher record and the live stock.
func New(vouchers VoucherStore, stock StockStore, log *slog.Logger) *Service {
	s := &Service{vouchers: vouchers, stock: stock, log: log, now: time.Now, uncopied: map[int64]statusCopy{}}
	s.texts.Store(&domain.TextSizes{})
	return s
}

// TextSizes are the longest texts stored as this node knows them: a
// creation on this node counts at once, one on another node once
// RefreshTextSizes has run (the status sync runs it every
// TextSizesEvery).
func (s *Service) TextSizes() domain.TextSizes { return *s.texts.Load() }

// TextSizesEvery is how often the status sync reads the longest texts
// stored: a voucher created on another node with longer texts is priced
// by them on this one within about this long.
const TextSizesEvery = 10 * time.Second

// RefreshTextSizes reads the longest texts stored, if they were last read
// longer than TextSizesEvery ago (force: in any case).
func (s *Service) RefreshTextSizes(ctx context.Context, force bool) error {
	now := s.now()
	if !force && now.Sub(time.Unix(0, s.textsRead.Load())) < TextSizesEvery {
		return nil
	}
	t, err := s.vouchers.TextSizes(ctx)
	if err != nil {
		return err
	}
	s.textsRead.Store(now.UnixNano())
	s.raiseTexts(t)
	return nil
}

// raiseTexts keeps the longest of what is known and t.
func (s *Service) raiseTexts(t domain.TextSizes) {
	for {
		old := s.texts.Load()
		next := domain.TextSizes{Title: max(old.Title, t.Title), SubTitle: max(old.SubTitle, t.SubTitle), Rules: max(old.Rules, t.Rules)}
		if next == *old || s.texts.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Create validates and stores a voucher. A seckill voucher is written to
// Postgres first and then preheated into Redis, so a crash in between
// leaves a voucher that is not yet sellable (PreheatAll or the next read
// repairs it), never one sellable in Redis but absent from Postgres.
func (s *Service) Create(ctx context.Context, in domain.NewVoucher) (domain.Voucher, error) {
	if err := in.Validate(); err != nil {
		return domain.Voucher{}, err
	}
	v, err := s.vouchers.Create(ctx, in, s.now())
	if err != nil {
		return domain.Voucher{}, err
	}
	s.raiseTexts(domain.TextSizes{}.Raise(in))
	if v.Seckill == nil {
		return v, nil
	}
	if err := s.preheat(ctx, v.ID); err != nil {
		return domain.Voucher{}, fmt.Errorf("voucher %d stored but not preheated: %w", v.ID, err)
	}
	v.Seckill.Remaining = v.Seckill.Stock
	return v, nil
}

// Get returns a voucher with its live remaining stock.
func (s *Service) Get(ctx context.Context, id int64) (domain.Voucher, error) {
	v, err := s.vouchers.Get(ctx, id)
	if err != nil {
		return domain.Voucher{}, err
	}
	vs := []domain.Voucher{v}
	s.fillRemaining(ctx, vs)
	return vs[0], nil
}

// List returns a page of vouchers, optionally of one shop, and whether a
// next page exists.
func (s *Service) List(ctx context.Context, shopID *int64, page domain.Page) ([]domain.Voucher, bool, error) {
	if page.First < 0 || page.First > domain.MaxPageSize {
		return nil, false, domain.InvalidField("first", "must be between 0 and %d", domain.MaxPageSize)
	}
	vs, more, err := s.vouchers.List(ctx, shopID, page)
	if err != nil {
		return nil, false, err
	}
	s.fillRemaining(ctx, vs)
	return vs, more, nil
}

// SetStatus pauses, resumes or ends a voucher's sale: in Postgres, the
// record, and then in Redis, where the grab script reads it.
//
// The change is made when Postgres commits it, so the call succeeds even
// if Redis cannot be written (after one retry within the call): an error
// would tell the admin the change failed when it stands, and repeating it
// would add nothing. Redis gets it from SyncStatuses instead,
// within the bound StatusSync keeps (docs/DECISIONS.md, "Status changes
// converge"); the copy is logged as delayed.
func (s *Service) SetStatus(ctx context.Context, id int64, status domain.VoucherStatus) (domain.Voucher, error) {
	if !status.Valid() {
		return domain.Voucher{}, domain.InvalidField("status", "unknown status")
	}
	v, err := s.vouchers.SetStatus(ctx, id, status, s.now())
	if err != nil {
		return domain.Voucher{}, err
	}
	if v.Seckill != nil {
		// v was read after the commit, status and version together: a
		// change another admin made meanwhile is copied whole, or not at all.
		s.copyStatus(ctx, v.ID, statusCopy{status: v.Status, version: v.UpdatedAt})
	}
	return s.Get(ctx, id)
}

// statusRetryPause is how long SetStatus waits before its one retry of a
// failed copy to Redis: past a dropped connection, well within a request.
const statusRetryPause = 50 * time.Millisecond

// copyStatus copies a committed status change to Redis, retrying once; if
// both fail it leaves the change to SyncStatuses.
func (s *Service) copyStatus(ctx context.Context, id int64, c statusCopy) {
	err := s.stock.SetStatus(ctx, id, c.status, c.version)
	if err != nil {
		select {
		case <-ctx.Done():
		case <-time.After(statusRetryPause):
			err = s.stock.SetStatus(ctx, id, c.status, c.version)
		}
	}
	if err == nil {
		return
	}
	s.mu.Lock()
	if prev, ok := s.uncopied[id]; !ok || prev.version.Before(c.version) {
		s.uncopied[id] = c
	}
	s.mu.Unlock()
	s.log.WarnContext(ctx, "voucher status committed but not yet in redis; the status sync copies it",
		"voucher", id, "status", int(c.status), "err", err)
}

// SetSegments changes how many segments share a seckill voucher's grabs,
// only while the sale is paused: in Postgres, then in the voucher's
// metadata in Redis, whose announcement makes every member's actors reload
// it.
func (s *Service) SetSegments(ctx context.Context, id int64, segments int) (domain.Voucher, error) {
	if !domain.ValidSegments(segments) {
		return domain.Voucher{}, domain.InvalidField("segments", "must be between 1 and %d", domain.MaxSegments)
	}
	if err := s.vouchers.SetSegments(ctx, id, segments, s.now()); err != nil {
		return domain.Voucher{}, err
	}
	if err := s.preheat(ctx, id); err != nil {
		return domain.Voucher{}, fmt.Errorf("voucher %d: segments stored but not in redis yet: %w", id, err)
	}
	return s.Get(ctx, id)
}

// Stock returns the live stock of a seckill voucher from Redis, preheating
// it first if Redis has lost it.
func (s *Service) Stock(ctx context.Context, id int64) (domain.StockLevel, error) {
	levels, err := s.stock.Levels(ctx, []int64{id}, s.now())
	if err != nil {
		return domain.StockLevel{}, err
	}
	if l, ok := levels[id]; ok {
		return l, nil
	}
	if err := s.preheat(ctx, id); err != nil { // NOT_FOUND for an unknown id or a normal voucher
		return domain.StockLevel{}, err
	}
	levels, err = s.stock.Levels(ctx, []int64{id}, s.now())
	if err != nil {
		return domain.StockLevel{}, err
	}
	l, ok := levels[id]
	if !ok {
		return domain.StockLevel{}, fmt.Errorf("voucher %d missing from redis right after preheat", id)
	}
	return l, nil
}

// EnsurePreheated makes sure a seckill voucher is in Redis, loading it from
// the database if Redis lost it. found is false for an id that is no
// seckill voucher (unknown, or a normal voucher).
func (s *Service) EnsurePreheated(ctx context.Context, id int64) (bool, error) {
	err := s.preheat(ctx, id) // NOT_FOUND for an unknown id or a normal voucher
	if domain.ErrorCode(err) == domain.CodeNotFound {
		return false, nil
	}
	return err == nil, err
}

// PreheatAll loads every seckill voucher whose sale has not ended into
// Redis, leaving alone those already there. Run at start-up, it restores
// stock after Redis lost its data, and finishes a creation that crashed
// between Postgres and Redis.
func (s *Service) PreheatAll(ctx context.Context) (int, error) {
	vs, err := s.vouchers.SeckillsEndingAfter(ctx, s.now())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range vs {
		if err := s.preheat(ctx, v.ID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// PreheatStale preheats the live vouchers whose load Redis does not hold
// verified on the server now serving (a restart, a failover, a flush,
// evictions): they are rebuilt, and their holds begin, now rather than at
// each one's next grab. Loads still verified cost one Redis call each, no
// row lock; each stale one is asked about again just before its preheat,
// so that a voucher another node rebuilt meanwhile is left alone. A
// voucher that fails is left to its next grab and the others go on; it
// returns how many it preheated and the first error.
func (s *Service) PreheatStale(ctx context.Context) (int, error) {
	vs, err := s.vouchers.SeckillsEndingAfter(ctx, s.now())
	if err != nil {
		return 0, err
	}
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	stale, first := s.stock.Stale(ctx, ids)
	n := 0
	for _, id := range stale {
		if ctx.Err() != nil {
			return n, cmp.Or(first, ctx.Err())
		}
		if again, err := s.stock.Stale(ctx, []int64{id}); err == nil && len(again) == 0 {
			continue
		}
		if err := s.preheat(ctx, id); err != nil {
			first = cmp.Or(first, fmt.Errorf("preheat voucher %d: %w", id, err))
			continue
		}
		n++
	}
	return n, first
}

// ResyncDBSold re-syncs Redis from the database for every voucher the
// database fallback sold while Redis was down: Redis's load does not know
// those sales. It runs when Redis is back, before grabs use it again (see
// breaker.Breaker); each reload counts the orders still in the
// voucher's order log, as every reload does.
func (s *Service) ResyncDBSold(ctx context.Context) error {
	ids, err := s.vouchers.DBSoldVouchers(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := s.preheat(ctx, id); err != nil {
			return fmt.Errorf("re-sync voucher %d: %w", id, err)
		}
	}
	if len(ids) > 0 {
		s.log.InfoContext(ctx, "redis re-synced from the database after the outage", "vouchers", len(ids))
	}
	return nil
}

// preheat loads a seckill voucher into Redis, unless Redis has its stock
// already, from a consistent snapshot of the database taken under the
// voucher's row lock (VoucherStore.Preload).
//
// If the transaction fails, the load may be in Redis with its stamp not
// recorded (the call timed out after the script ran, or the commit
// failed); it is taken back, if Redis still holds it, so that the next
// preheat loads again and records its stamp.
func (s *Service) preheat(ctx context.Context, id int64) error {
	stamp := domain.NewLoadStamp()
	held := false
	err := s.vouchers.Preload(ctx, id, func(ctx context.Context, snap domain.LoadSnapshot) (string, error) {
		res, err := s.stock.Preheat(ctx, snap, stamp)
		if err != nil || res == domain.LoadKept {
			return "", err
		}
		held = snap.Reload
		if res == domain.LoadRebuilt {
			s.log.WarnContext(ctx, "redis restarted or failed over and may have gone back in time: voucher stock rebuilt from the database and its order log",
				"voucher", id, "stock", snap.Voucher.Seckill.Stock, "users", len(snap.Users))
		} else {
			s.log.InfoContext(ctx, "voucher stock preheated", "voucher", id, "stock", snap.Voucher.Seckill.Stock,
				"users", len(snap.Users), "reload", snap.Reload)
		}
		return stamp, nil
	})
	if err != nil && domain.ErrorCode(err) != domain.CodeNotFound {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if uerr := s.stock.Unload(uctx, id, stamp); uerr != nil {
			s.log.ErrorContext(ctx, "a voucher load whose stamp was not recorded could not be taken back", "voucher", id, "err", uerr)
		}
		cancel()
	}
	if err == nil && held && s.Holds != nil {
		s.Holds.Add(id, stamp)
	}
	return err
}

// fillRemaining sets each seckill voucher's live remaining stock from
// Redis in one round trip. If Redis cannot be read it keeps the database's
// figure, which trails the live one, rather than failing a catalogue read.
func (s *Service) fillRemaining(ctx context.Context, vs []domain.Voucher) {
	var ids []int64
	for i := range vs {
		if sk := vs[i].Seckill; sk != nil {
			sk.Remaining = sk.Stock
			ids = append(ids, vs[i].ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	levels, err := s.stock.Levels(ctx, ids, s.now())
	if err != nil {
		switch {
		case errors.Is(err, context.Canceled):
		case domain.ErrorCode(err) == domain.CodeUnavailable:
			// Redis is down or stalled: the breaker logs that once; a line
			// per catalogue read would flood the log during the outage.
			s.log.DebugContext(ctx, "live stock unavailable, showing database stock", "err", err)
		default:
			s.log.WarnContext(ctx, "live stock unavailable, showing database stock", "err", err)
		}
		return
	}
	for i := range vs {
		if l, ok := levels[vs[i].ID]; ok && vs[i].Seckill != nil {
			vs[i].Seckill.Remaining = l.Remaining
		}
	}
}
