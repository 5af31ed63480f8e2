package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// Families of logs whose writers keep a lease row (tb_writer_lease).
const (
	// OrdersFamily is the family of the vouchers' order logs.
	OrdersFamily = "orders"
)

// WriterLeaseTTL is how long a writer's lease row counts after its last
// refresh. A running writer refreshes it at every step, and a step comes
// at least every writer MaxBackoff + AttemptTimeout, below this; so only
// a writer that stopped (killed, frozen, cut off from the database) lets
// it lapse. It is the reload's longest hold: a reload never waits longer
// for a writer than it would have held its sales without the rows.
const WriterLeaseTTL = ReloadHoldDefault

// WriterLeases is the lease rows of one family's writers: what lets a
// reload of a voucher that Redis lost hold its sales only as long as a
// writer may still hold an order of the lost load (see catalog.Holds).
//
// A writer reports "clean" at a moment it holds no entry read from Redis
// and has no read in flight: every entry it holds later was read after
// the report, so from the Redis that serves then. Its row's clean_at is
// the database's time of that report. A reload that began at t waits for
// every writer whose lease is live and whose clean_at is before t; one
// that reported clean since holds nothing of the lost load. On SQLite
// (embedded mode: one process, no other writer, no hold) the rows are not
// kept and nobody is waited for.
type WriterLeases struct {
	db     bun.IDB
	family string
	also   []string // further families CleanSince covers
	pg     bool
}

// NewWriterLeases returns the lease rows of family's writers.
func NewWriterLeases(db bun.IDB, family string) *WriterLeases {
	return &WriterLeases{db: db, family: family, pg: IsPostgres(db)}
}

// HoldRows is what a reload's hold waits for (catalog.Holds): the order
// writers, which may hold orders of the lost load they read, and the
// selling nodes, which may hold the only copy of orders Redis lost before
// any writer read them (SoldShadow).
func HoldRows(db bun.IDB) *WriterLeases {
	return NewWriterLeases(db, OrdersFamily).With(SellersFamily)
}

// With returns the same rows, whose CleanSince covers family too.
func (l *WriterLeases) With(family string) *WriterLeases {
	c := *l
	c.also = append(append([]string(nil), l.also...), family)
	return &c
}

// Report refreshes consumer's lease and, when clean, records that it
// holds nothing now. The caller must hold no entry and have no read in
// flight while a clean report runs.
func (l *WriterLeases) Report(ctx context.Context, consumer string, clean bool) error {
	if !l.pg {
		return nil
	}
	_, err := l.db.NewRaw(`INSERT INTO tb_writer_lease AS w (family, consumer, expires_at, clean_at)
VALUES (?, ?, clock_timestamp() + ? * interval '1 millisecond', CASE WHEN ? THEN clock_timestamp() ELSE timestamptz 'epoch' END)
ON CONFLICT (family, consumer) DO UPDATE SET expires_at = EXCLUDED.expires_at,
  clean_at = CASE WHEN ? THEN EXCLUDED.clean_at ELSE w.clean_at END`,
		l.family, consumer, WriterLeaseTTL.Milliseconds(), clean, clean).Exec(ctx)
	if err != nil {
		return fmt.Errorf("refresh writer lease of %s/%s: %w", l.family, consumer, err)
	}
	return nil
}

// ReportSince refreshes consumer's lease and, when clean, moves its
// clean_at to at (never back): for a holder that learns only afterwards
// that it held nothing from before at (SoldShadow). It returns the
// database's time the report ran at.
func (l *WriterLeases) ReportSince(ctx context.Context, consumer string, clean bool, at time.Time) (time.Time, error) {
	if !l.pg {
		return time.Now(), nil
	}
	if at.IsZero() {
		clean = false
	}
	var now time.Time
	err := l.db.NewRaw(`INSERT INTO tb_writer_lease AS w (family, consumer, expires_at, clean_at)
VALUES (?, ?, clock_timestamp() + ? * interval '1 millisecond', CASE WHEN ? THEN ?::timestamptz ELSE timestamptz 'epoch' END)
ON CONFLICT (family, consumer) DO UPDATE SET expires_at = EXCLUDED.expires_at,
  clean_at = CASE WHEN ? THEN greatest(w.clean_at, EXCLUDED.clean_at) ELSE w.clean_at END
RETURNING clock_timestamp()`,
		l.family, consumer, WriterLeaseTTL.Milliseconds(), clean, at, clean).Scan(ctx, &now)
	if err != nil {
		return time.Time{}, fmt.Errorf("refresh lease of %s/%s: %w", l.family, consumer, err)
	}
	return now, nil
}

// Release removes consumer's row: a writer that stopped holds nothing
// (what it read and did not acknowledge stays pending in Redis).
func (l *WriterLeases) Release(ctx context.Context, consumer string) error {
	if !l.pg {
		return nil
	}
	_, err := l.db.NewDelete().Table("tb_writer_lease").Where("family = ?", l.family).Where("consumer = ?", consumer).Exec(ctx)
	if err != nil {
		return fmt.Errorf("release writer lease of %s/%s: %w", l.family, consumer, err)
	}
	return nil
}

// Now is the database's clock, the one the rows are kept in.
func (l *WriterLeases) Now(ctx context.Context) (time.Time, error) {
	if !l.pg {
		return time.Now(), nil
	}
	var t time.Time
	if err := l.db.NewRaw("SELECT clock_timestamp()").Scan(ctx, &t); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return t, nil
}

// CleanSince returns the earliest clean_at among the holders whose lease
// is live, of this family and of those added With: every one of them has
// held nothing from before it. With none live it returns the database's
// time now (nobody holds anything).
func (l *WriterLeases) CleanSince(ctx context.Context) (time.Time, error) {
	if !l.pg {
		return time.Now(), nil
	}
	var t time.Time
	err := l.db.NewRaw(`SELECT coalesce(min(clean_at), clock_timestamp()) FROM tb_writer_lease
WHERE family IN (?) AND expires_at > clock_timestamp()`, bun.In(append([]string{l.family}, l.also...))).Scan(ctx, &t)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the writer leases of %s: %w", l.family, err)
	}
	return t, nil
}
