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

// preheatScript writes a voucher's metadata and, only when the stock key
// is absent, a whole load: stock, per-user marks, request ids and the ids
// of orders already counted (the adopted set). Running it again never
// resets stock that grabs have already taken. Metadata carries a version
// (the row's update time): an older version never overwrites a newer one,
// so a start-up preheat that read the row before an admin paused the
// voucher cannot resume it in Redis.
//
// It also creates the order log's consumer group (from the start of the
// order log, so no order is ever appended before a group can see it) and
// announces the voucher on the events channel so actors reload it.
//
// Every value is passed as a string from Go and written as is: Lua numbers
// written back to Redis risk float formatting.
//
// A load that writes the stock stamps the metadata with its load stamp
// (a random string from the caller), which every order sold from this load
// carries into the order log (see Vouchers.Preload and the OrderWriter),
// and, for a reload, with the Redis time until which it holds its sales
// (see Stock.ReloadHold).
//
// KEYS: meta, stock, users, log, req, adopted. ARGV: status, begin, end,
// limit, initial, version, expire, stock, load stamp, hold ms (0 = none),
// "meta" to refresh metadata only or "resync" to replace a stale load,
// segments, then the number of users and
// user/count pairs, the number of requests and request/order pairs, and
// the rest: ids of orders counted already. Returns 1 when it wrote the
// load, 0 when Redis had it, 2 when a metadata-only call found no stock.
var preheatScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'ver') or '-1')
if tonumber(ARGV[6]) >= cur then
  redis.call('HSET', KEYS[1], 'status', ARGV[1], 'begin', ARGV[2], 'end', ARGV[3], 'limit', ARGV[4],
    'initial', ARGV[5], 'ver', ARGV[6], 'expire', ARGV[7], 'segs', ARGV[12])
end
redis.pcall('XGROUP', 'CREATE', KEYS[4], '` + OrderLogGroup + `', '0', 'MKSTREAM')
redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 and ARGV[11] ~= 'resync' then
  return 0
end
if ARGV[11] == 'meta' then
  return 2
end
redis.call('DEL', KEYS[3], KEYS[5], KEYS[6])
local i = 14
for _ = 1, tonumber(ARGV[13]) do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local nreq = tonumber(ARGV[i])
i = i + 1
for _ = 1, nreq do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for k = i, #ARGV do
  redis.call('SADD', KEYS[6], ARGV[k])
end
for _, k in ipairs({KEYS[5], KEYS[6]}) do
  if redis.call('EXISTS', k) == 1 then
    redis.call('PEXPIREAT', k, ARGV[7])
  end
end
redis.call('SET', KEYS[2], ARGV[8])
redis.call('HSET', KEYS[1], '` + metaLoadStamp + `', ARGV[9])
if tonumber(ARGV[10]) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'hold', string.format('%.0f', now + tonumber(ARGV[10])))
else
  redis.call('HDEL', KEYS[1], 'hold')
end
return 1
`)

// setStatusScript changes the status of a preheated voucher unless a newer
// version is already there, and does nothing for one that is not in Redis
// (the next preheat copies it). It announces the change so that actors
// caching the old status reload. KEYS: meta. ARGV: status, version.
var setStatusScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if tonumber(ARGV[2]) < tonumber(redis.call('HGET', KEYS[1], 'ver') or '-1') then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'ver', ARGV[2])
redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
return 1
`)

// reqExpiry is how long after a sale ends its request ids are kept.
const reqExpiry = 24 * time.Hour

// ReloadHoldDefault is how long a reload of a voucher that Redis lost
// sells nothing. An order writer that could not reach the database may
// hold orders sold from the lost load that no order log shows any more;
// the reload cannot count them, so it waits for them: longer than a
// writer's longest pause between attempts (MaxBackoffDefault) plus one
// attempt (AttemptTimeoutDefault). Orders that come later are
// dead-lettered, never sold twice (see adoptScript).
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
// Vouchers.Preload), unless Redis has its stock already; it reports
// whether it wrote the load, stamped with stamp.
//
// Orders still in the voucher's order log and not in the database (sold
// from an earlier load, not yet persisted) are counted into the load too:
// their units, their users' marks and their request ids; their ids go to
// the adopted set so that the order writer does not count them again. No
// grab can append to the log meanwhile: with no stock in Redis there is no
// load to sell from. A reload (snap.Reload) also holds its sales for
// ReloadHold, for the orders no log shows (see adoptScript).
func (s *Stock) Preheat(ctx context.Context, snap domain.LoadSnapshot, stamp string) (bool, error) {
	v := snap.Voucher
	if v.Seckill == nil {
		return false, fmt.Errorf("preheat voucher %d: not a seckill voucher", v.ID)
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
	if err == nil && n == 2 {
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
		return false, fmt.Errorf("preheat voucher %d: %w", v.ID, err)
	}
	// The registry lives outside the voucher's hash slot, so it cannot be
	// written by the script. Registering after the script, every time
	// (not only when the stock was written), is what lets a writer's prune
	// tell that the log came back to life while it looked (see prune).
	if err := registerLog(ctx, s.rdb, LogKey(v.ID)); err != nil {
		return false, fmt.Errorf("preheat voucher %d: %w", v.ID, err)
	}
	return n == 1, nil
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

// unloadScript removes a voucher's load from Redis if Redis still holds
// that load (by its load stamp), and announces it so that actors
// re-activate and load the voucher again. KEYS: meta, stock, users.
// ARGV: load stamp. Returns 1 if it removed the load.
var unloadScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], '` + metaLoadStamp + `') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
return 1
`)

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
