package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"flashsale/internal/maintenance"
)

// StatusSyncIntervalDefault is how often StatusSync runs: with one run's
// time (a query and a Redis round trip), about how long Redis can keep
// selling a voucher whose pause it missed.
const StatusSyncIntervalDefault = time.Second

// statusSyncEndedMargin keeps vouchers whose sale ended a little while ago
// (by this node's clock) in the sync: another clock may not have ended them.
const statusSyncEndedMargin = time.Minute

// statusSyncRunTimeout bounds one run, so that a stalled store delays the
// next run rather than stopping the sync.
const statusSyncRunTimeout = 5 * time.Second

// SyncStatuses copies to Redis every voucher status Redis missed and
// reports how many copies it wrote. First the changes this node committed
// and could not copy (SetStatus), which need no database; then, from the
// record, every seckill voucher whose status version (its row's update
// time) is newer than the one Redis holds: a change another node could not
// copy before it died. Redis's own version check refuses an older copy, so
// nodes running this at once, or with an admin's change, never undo a
// newer status; a voucher Redis does not hold is left to its next
// preheat, which copies the record whole.
func (s *Service) SyncStatuses(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	s.mu.Lock()
	uncopied := make(map[int64]statusCopy, len(s.uncopied))
	for id, c := range s.uncopied {
		uncopied[id] = c
	}
	s.mu.Unlock()
	for id, c := range uncopied {
		if err := s.stock.SetStatus(ctx, id, c.status, c.version); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		s.mu.Lock()
		if cur := s.uncopied[id]; cur.status == c.status && cur.version.Equal(c.version) { // not replaced by a newer change meanwhile
			delete(s.uncopied, id)
		}
		s.mu.Unlock()
	}

	vs, err := s.vouchers.SeckillsEndingAfter(ctx, s.now().Add(-statusSyncEndedMargin))
	if err != nil {
		return n, errors.Join(append(errs, err)...)
	}
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	held, err := s.stock.StatusVersions(ctx, ids)
	if err != nil {
		return n, errors.Join(append(errs, err)...)
	}
	for _, v := range vs {
		ver, ok := held[v.ID]
		if !ok || ver.UnixMicro() >= v.UpdatedAt.UnixMicro() {
			continue
		}
		if err := s.stock.SetStatus(ctx, v.ID, v.Status, v.UpdatedAt); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// StatusSync runs SyncStatuses on this node every interval. It runs on
// every node, under no lease: a run is idempotent and costs one query and
// one Redis round trip when nothing is missed, and without a lease the
// bound does not wait for a dead holder's lease to expire. Its first run
// is an interval after the start: the start-up preheat copied every
// record whole.
type StatusSync struct {
	// Job runs RunOnce every interval (Start, Stop).
	*maintenance.Job[int]
	catalog *Service
	log     *slog.Logger
}

// NewStatusSync returns the status sync of c; interval 0 takes
// StatusSyncIntervalDefault.
func NewStatusSync(c *Service, interval time.Duration, log *slog.Logger) *StatusSync {
	j := &StatusSync{catalog: c, log: log}
	j.Job = maintenance.New(maintenance.Config{Name: "status-sync", Interval: cmp.Or(interval, StatusSyncIntervalDefault),
		Timeout: statusSyncRunTimeout, FirstAfterInterval: true}, log, j.RunOnce)
	return j
}

// RunOnce is one run; it reports how many statuses it copied. Every
// TextSizesEvery it also reads the longest texts stored (the request
// cost's text sizes), as every node must and under no lease either.
func (j *StatusSync) RunOnce(ctx context.Context) (int, error) {
	if err := j.catalog.RefreshTextSizes(ctx, false); err != nil {
		j.log.WarnContext(ctx, "the longest voucher texts could not be read; the request cost prices them as last read", "err", err)
	}
	n, err := j.catalog.SyncStatuses(ctx)
	if n > 0 {
		j.log.WarnContext(ctx, "voucher statuses redis had missed were copied to it", "vouchers", n)
	}
	if err != nil {
		return n, fmt.Errorf("sync voucher statuses: %w", err)
	}
	return n, nil
}
