package persistence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// preheatScript writes a voucher's metadata and, unless Redis has one, a load: scripts/preheat.lua.
var preheatScript = newScript("preheat")

// setStatusScript copies a status change to a preheated voucher: scripts/set_status.lua.
var setStatusScript = newScript("set_status")

// reqExpiry is how long after a sale ends its request ids are kept.
const reqExpiry = 24 * time.Hour

// ReloadHoldDefault is the longest a reload of a voucher that Redis lost
// sells nothing. An order writer that could not reach the database may
// hold orders sold from the lost load that no order log shows any more;
// the reload cannot count them, so it waits for them. The node ends the
// hold as soon as every order writer with a live lease row has held
// nothing since the reload began (catalog.Holds, WriterLeases), which
// takes about a writer's report period when they are healthy; this bound
// is for a writer that holds orders and cannot store them: longer than
// its longest pause between attempts (the persistence actor's
// MaxBackoffDefault) plus one attempt (AttemptTimeoutDefault). Orders
// that come later are dead-lettered, never sold twice (see
// adoptOrdersScript).
const ReloadHoldDefault = 8 * time.Second

// Stock is the live stock of seckill vouchers in Redis.
type Stock struct {
	rdb redis.UniversalClient
	// ReloadHold overrides ReloadHoldDefault (tests).
	ReloadHold time.Duration
}

// NewStock returns the Redis stock store.
func NewStock(rdb redis.UniversalClient) *Stock { return &Stock{rdb: rdb} }

// Preheat loads a seckill voucher into Redis from snap, the database's
// view taken under the voucher's row lock (use it through
// Vouchers.Preload), unless Redis has its stock already, in a load
// verified on the server that runs now; it reports whether it wrote a
// load, stamped with stamp, and whether that load replaced an unverified
// one. A load is verified on the server that wrote it (metaRun); after a
// restart or a failover Redis may hold an older state than what was sold,
// and the load is rebuilt as for a voucher Redis lost, holding its sales
// for ReloadHold the same way.
//
// Orders still in the voucher's order log and not in the database (sold
// from an earlier load, not yet persisted) are counted into the load too:
// their units, their users' marks and their request ids; their ids go to
// the adopted set so that the order writer does not count them again. No
// grab can append to the log meanwhile: with no stock in Redis there is no
// load to sell from. A reload (snap.Reload) also holds its sales for
// ReloadHold, for the orders no log shows (see adoptOrdersScript).
func (s *Stock) Preheat(ctx context.Context, snap domain.LoadSnapshot, stamp string) (domain.LoadResult, error) {
	v := snap.Voucher
	if v.Seckill == nil {
		return domain.LoadKept, fmt.Errorf("preheat voucher %d: not a seckill voucher", v.ID)
	}
	keys := []string{metaKey(v.ID), stockKey(v.ID), usersKey(v.ID), LogKey(v.ID), reqKey(v.ID), adoptedKey(v.ID)}
	// Most preheats find the stock there (start-up, another node's load):
	// refresh the metadata without reading the log and the users. A stale
	// load (the database sold the voucher while Redis was down) is
	// replaced whatever Redis holds.
	n, mode := 2, "resync"
	var err error
	if !snap.Stale {
		mode = ""
		n, err = preheatScript.Run(ctx, s.rdb, keys, s.preheatArgs(snap, 0, stamp, "meta")...).Int()
	}
	unverified := n == 3
	if err == nil && (n == 2 || n == 3) {
		var inflight []inflightOrder
		if inflight, err = s.inflight(ctx, snap); err == nil {
			stock := snap.Voucher.Seckill.Stock - len(inflight)
			args := s.preheatArgs(snap, max(stock, 0), stamp, mode)
			users := maps.Clone(snap.Users)
			reqs := maps.Clone(snap.Requests)
			for _, o := range inflight {
				if prev, ok := reqs[o.req]; o.req != "" && ok && prev != o.id {
					// The request id holds another order already (in the
					// database, or earlier in the log): the database will
					// refuse this one (duplicate_request), so it is not the
					// request's answer and not its user's order. Its unit
					// stays off the stock: a dead-lettered order keeps it.
					continue
				}
				users[o.user]++
				if o.req != "" {
					reqs[o.req] = o.id
				}
			}
			args = append(args, len(users))
			for u, c := range users {
				args = append(args, u, c)
			}
			args = append(args, len(reqs))
			for r, o := range reqs {
				args = append(args, r, o)
			}
			for _, o := range inflight {
				args = append(args, o.id)
			}
			n, err = preheatScript.Run(ctx, s.rdb, keys, args...).Int()
		}
	}
	if err != nil {
		// A Redis that did not answer (down, stalled, too slow) is
		// UNAVAILABLE to the caller, not an internal error.
		return domain.LoadKept, fmt.Errorf("preheat voucher %d: %w", v.ID, unavailable(err))
	}
	if n == 4 {
		return domain.LoadKept, fmt.Errorf("preheat voucher %d: %w", v.ID, redisEvicts(nil))
	}
	// The registry lives outside the voucher's hash slot, so it cannot be
	// written by the script. Registering after the script, every time
	// (not only when the stock was written), is what lets a writer's prune
	// tell that the log came back to life while it looked (see prune).
	if err := registerLog(ctx, s.rdb, LogKey(v.ID)); err != nil {
		return domain.LoadKept, fmt.Errorf("preheat voucher %d: %w", v.ID, unavailable(err))
	}
	switch {
	case n != 1:
		return domain.LoadKept, nil
	case unverified:
		loadsRebuilt.WithLabelValues("voucher").Inc()
		return domain.LoadRebuilt, nil
	}
	return domain.LoadWritten, nil
}

// Stale returns the vouchers among ids whose load Redis does not hold
// verified on the server now serving: none at all, or one written before a
// restart, a failover or evictions (load_verified.lua). A voucher Redis
// could not be asked about (its shard down) is left out, and the first
// such error is returned beside the others' answer; while Redis evicts
// keys no voucher is stale, since none may be loaded.
func (s *Stock) Stale(ctx context.Context, ids []int64) ([]int64, error) {
	var stale []int64
	var first error
	for _, id := range ids {
		n, err := loadVerifiedScript.Run(ctx, s.rdb, []string{metaKey(id)}).Int()
		switch {
		case err != nil:
			if first == nil {
				first = fmt.Errorf("is voucher %d's load verified: %w", id, unavailable(err))
			}
		case n == 0 || n == 2:
			stale = append(stale, id)
		}
	}
	return stale, first
}

func (s *Stock) preheatArgs(snap domain.LoadSnapshot, stock int, stamp, mode string) []any {
	v, sk := snap.Voucher, snap.Voucher.Seckill
	var hold int64
	if snap.Reload {
		hold = cmp.Or(s.ReloadHold, ReloadHoldDefault).Milliseconds()
	}
	return []any{int(v.Status), sk.BeginAt.UnixMilli(), sk.EndAt.UnixMilli(), sk.PerUserLimit, sk.InitialStock,
		v.UpdatedAt.UnixMicro(), sk.EndAt.Add(reqExpiry).UnixMilli(), stock, stamp, hold, mode, max(sk.Segments, 1)}
}

// inflightOrder is an order of the order log that the database lacks.
type inflightOrder struct {
	id   int64
	user int64
	req  string
}

// inflight reads the voucher's order log and returns its orders that the
// database does not hold (snap.Persisted answers under the row lock, so
// no writer commits meanwhile).
func (s *Stock) inflight(ctx context.Context, snap domain.LoadSnapshot) ([]inflightOrder, error) {
	msgs, err := s.rdb.XRange(ctx, LogKey(snap.Voucher.ID), "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("read order log: %w", err)
	}
	var all []inflightOrder
	seen := map[int64]bool{}
	for _, m := range msgs {
		e, err := decodeOrderEntry(m.Values, time.Time{})
		o := e.order
		if err != nil || seen[o.ID] {
			continue // the writer dead-letters what it cannot read
		}
		seen[o.ID] = true
		all = append(all, inflightOrder{id: o.ID, user: o.UserID, req: deref(o.RequestID)})
	}
	if len(all) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(all))
	for i, o := range all {
		ids[i] = o.id
	}
	stored, err := snap.Persisted(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, o := range all {
		if !stored[o.id] {
			out = append(out, o)
		}
	}
	return out, nil
}

// unloadScript removes a voucher's load if Redis still holds that load: scripts/unload.lua.
var unloadScript = newScript("unload")

// Unload takes back a load of a voucher whose load stamp the database did
// not record (the transaction around it failed after Redis was written):
// without the stamp the order writer could not tell the orders it did not
// count from those it did. The next preheat loads the voucher again. It
// does nothing if Redis holds another load.
func (s *Stock) Unload(ctx context.Context, voucherID int64, stamp string) error {
	if err := unloadScript.Run(ctx, s.rdb, []string{metaKey(voucherID), stockKey(voucherID), usersKey(voucherID)}, stamp).Err(); err != nil {
		return fmt.Errorf("unload voucher %d: %w", voucherID, err)
	}
	return nil
}

// endHoldScript ends a reload's hold early: scripts/end_hold.lua.
var endHoldScript = newScript("end_hold")

// EndHold ends the hold of the voucher's reload stamped stamp, before its
// ReloadHold is over, and reports whether it did: a newer load, or one
// that holds nothing, is left alone. The caller has made sure that no
// order writer still holds an order of the lost load (catalog.Holds).
func (s *Stock) EndHold(ctx context.Context, voucherID int64, stamp string) (bool, error) {
	n, err := endHoldScript.Run(ctx, s.rdb, []string{metaKey(voucherID)}, stamp).Int()
	if err != nil {
		return false, fmt.Errorf("end the reload hold of voucher %d: %w", voucherID, unavailable(err))
	}
	return n == 1, nil
}

// SetStatus copies a status change to a preheated voucher; version is the
// row's update time after the change.
func (s *Stock) SetStatus(ctx context.Context, id int64, status domain.VoucherStatus, version time.Time) error {
	if err := setStatusScript.Run(ctx, s.rdb, []string{metaKey(id)}, int(status), version.UnixMicro()).Err(); err != nil {
		return fmt.Errorf("set status of voucher %d in redis: %w", id, err)
	}
	return nil
}

// Levels reads the live stock of several vouchers in one round trip. A
// voucher that is not in Redis is absent from the result.
func (s *Stock) Levels(ctx context.Context, ids []int64, now time.Time) (map[int64]domain.StockLevel, error) {
	if len(ids) == 0 {
		return map[int64]domain.StockLevel{}, nil
	}
	pipe := s.rdb.Pipeline()
	initials := make([]*redis.StringCmd, len(ids))
	remainings := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		initials[i] = pipe.HGet(ctx, metaKey(id), "initial")
		remainings[i] = pipe.Get(ctx, stockKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read stock levels: %w", unavailable(err))
	}
	out := make(map[int64]domain.StockLevel, len(ids))
	for i, id := range ids {
		initial, err1 := initials[i].Int()
		remaining, err2 := remainings[i].Int()
		if err1 != nil || err2 != nil {
			continue
		}
		out[id] = domain.StockLevel{VoucherID: id, Initial: initial, Remaining: remaining, At: now.UTC()}
	}
	return out, nil
}
