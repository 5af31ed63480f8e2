package orders

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"flashsale/domain"
	"flashsale/internal/maintenance"
	"flashsale/internal/metrics"
)

// ReconcileStore reads vouchers' stock identities
// (persistence.Reconciliations).
type ReconcileStore interface {
	Reconcile(ctx context.Context, voucherID int64) (domain.Reconciliation, error)
	// Vouchers lists the seckill vouchers whose sale ends after t.
	Vouchers(ctx context.Context, t time.Time) ([]int64, error)
}

// Unloader takes a load of a voucher out of Redis if Redis still holds it
// (persistence.Stock).
type Unloader interface {
	Unload(ctx context.Context, voucherID int64, stamp string) error
}

// Preheater loads a voucher into Redis from the database when Redis lacks
// it (catalog.Service).
type Preheater interface {
	EnsurePreheated(ctx context.Context, id int64) (bool, error)
}

// Reconcile defaults.
const (
	ReconcileIntervalDefault = time.Minute
	// ReconcileLookbackDefault: vouchers whose sale ended longer ago than
	// this are no longer checked by the background job.
	ReconcileLookbackDefault = 24 * time.Hour
)

// ReconcileConfig tunes the background reconciliation.
type ReconcileConfig struct {
	Interval time.Duration
	Lookback time.Duration
}

var reconcileDrift = metrics.GaugeVec("reconcile_drift", "Drift the last reconciliation run found over the vouchers it checked: stock = units unaccounted for (|initial - (remaining + pending + live + in flight + dead-lettered)|, or the whole initial stock of a voucher Redis lacks), users = users whose Redis count is off.", "kind")

// Reconciler is the one reconciler of the service: it checks invariant 5
// for an admin (Reconciliation for one voucher's identity, Reconcile for
// reports and repairs) and in the background (its Job, lease
// "reconcile"), and repairs Redis from the database on request.
type Reconciler struct {
	// Job runs RunOnce every interval under the lease (Start, Stop).
	*maintenance.Job[ReconcileRun]
	cfg     ReconcileConfig
	store   ReconcileStore
	unload  Unloader
	preheat Preheater
	log     *slog.Logger
	now     func() time.Time
}

// NewReconciler returns the reconciliation service and its background job.
func NewReconciler(store ReconcileStore, unload Unloader, preheat Preheater, locker maintenance.Locker, cfg ReconcileConfig, log *slog.Logger) *Reconciler {
	cfg.Interval = cmp.Or(cfg.Interval, ReconcileIntervalDefault)
	cfg.Lookback = cmp.Or(cfg.Lookback, ReconcileLookbackDefault)
	r := &Reconciler{cfg: cfg, store: store, unload: unload, preheat: preheat, log: log, now: time.Now}
	r.Job = maintenance.New(maintenance.Config{Name: "reconcile", Interval: cfg.Interval, Locker: locker}, log, r.RunOnce)
	return r
}

// Reconciliation reads one voucher's stock identity at one moment, as it
// is: no report, no repair.
func (r *Reconciler) Reconciliation(ctx context.Context, voucherID int64) (domain.Reconciliation, error) {
	return r.store.Reconcile(ctx, voucherID)
}

// Reconcile reports one voucher, or every voucher on sale or ended within
// the lookback when voucherID is nil. With repair, a voucher whose Redis
// state is off (or gone, after a Redis loss) is rebuilt from the database
// — only when the database is the whole truth: no order in flight in the
// order log and no stock change pending for Redis. Otherwise the report
// says why it was left alone.
func (r *Reconciler) Reconcile(ctx context.Context, voucherID *int64, repair bool) ([]domain.ReconcileReport, error) {
	var ids []int64
	if voucherID != nil {
		ids = []int64{*voucherID}
	} else {
		var err error
		if ids, err = r.store.Vouchers(ctx, r.now().Add(-r.cfg.Lookback)); err != nil {
			return nil, err
		}
	}
	out := make([]domain.ReconcileReport, 0, len(ids))
	for _, id := range ids {
		rep, err := r.one(ctx, id, repair)
		if err != nil {
			return nil, err
		}
		out = append(out, rep)
	}
	return out, nil
}

func (r *Reconciler) one(ctx context.Context, id int64, repair bool) (domain.ReconcileReport, error) {
	rec, err := r.store.Reconcile(ctx, id)
	if err != nil {
		return domain.ReconcileReport{}, err
	}
	rep := domain.ReconcileReport{Reconciliation: rec, Lines: describe(rec)}
	if !repair || rec.Balanced() {
		return rep, nil
	}
	if rec.InFlight > 0 || rec.Pending > 0 {
		rep.Lines = append(rep.Lines, fmt.Sprintf("not repaired: %d orders in flight and %d units pending for Redis; the database is not the whole truth yet, retry when they are through", rec.InFlight, rec.Pending))
		return rep, nil
	}
	if rec.Loaded {
		if err := r.unload.Unload(ctx, id, rec.LoadStamp); err != nil {
			return domain.ReconcileReport{}, err
		}
	}
	if _, err := r.preheat.EnsurePreheated(ctx, id); err != nil {
		return domain.ReconcileReport{}, fmt.Errorf("rebuild voucher %d in redis: %w", id, err)
	}
	r.log.WarnContext(ctx, "voucher rebuilt in redis from the database by reconciliation", "voucher", id,
		"remaining_before", rec.Remaining, "users_off_before", rec.UsersOff, "loaded_before", rec.Loaded)
	after, err := r.store.Reconcile(ctx, id)
	if err != nil {
		return domain.ReconcileReport{}, err
	}
	return domain.ReconcileReport{Reconciliation: after, Repaired: true,
		Lines: append(rep.Lines, append([]string{"repaired: Redis rebuilt from the database"}, describe(after)...)...)}, nil
}

// describe puts a reconciliation in words: one line for the identity, one
// per kind of drift.
func describe(rec domain.Reconciliation) []string {
	lines := []string{fmt.Sprintf("voucher %d: initial %d = remaining %d + pending %d + live %d + in flight %d + dead-lettered %d",
		rec.VoucherID, rec.Initial, rec.Remaining, rec.Pending, rec.Live, rec.InFlight, rec.DeadLettered)}
	switch {
	case !rec.Loaded:
		lines = append(lines, fmt.Sprintf("voucher %d: Redis holds no load of it (lost data?)", rec.VoucherID))
	case rec.Drift() != 0:
		lines = append(lines, fmt.Sprintf("voucher %d: stock off by %d", rec.VoucherID, rec.Drift()))
	}
	if rec.UsersOff > 0 {
		lines = append(lines, fmt.Sprintf("voucher %d: %d users' Redis counts differ from their live and in-flight orders", rec.VoucherID, rec.UsersOff))
	}
	if rec.Balanced() {
		lines = append(lines, fmt.Sprintf("voucher %d: balanced", rec.VoucherID))
	}
	return lines
}

// ReconcileRun is what one background reconciliation did.
type ReconcileRun struct {
	// Checked vouchers, of which Off were not balanced.
	Checked, Off int
}

// RunOnce checks every voucher in the lookback without repairing, sets
// the drift metric, logs each unbalanced voucher, and returns how many it
// checked and how many were off.
func (r *Reconciler) RunOnce(ctx context.Context) (ReconcileRun, error) {
	reps, err := r.Reconcile(ctx, nil, false)
	if err != nil {
		return ReconcileRun{}, err
	}
	stock, users, off := 0, 0, 0
	for _, rep := range reps {
		if rep.Balanced() {
			continue
		}
		off++
		users += rep.UsersOff
		if rep.Loaded {
			stock += rep.Drift()
		} else {
			stock += rep.Initial
		}
		r.log.WarnContext(ctx, "reconciliation found drift", "voucher", rep.VoucherID, "lines", rep.Lines)
	}
	reconcileDrift.WithLabelValues("stock").Set(float64(stock))
	reconcileDrift.WithLabelValues("users").Set(float64(users))
	return ReconcileRun{Checked: len(reps), Off: off}, nil
}
