package persistence

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Adoption: orders sold from an earlier Redis load of a voucher than the
// one the database recorded, returned to the reloaded stock by the order
// writer's transaction (see Stock.Preheat for the orders a reload counts
// itself).

// adoptScript puts orders that a reload of the voucher's stock could not
// count back into Redis: orders sold from an earlier load that were in no
// order log when the reload ran, because an order writer was holding them
// in an attempt to commit (see Stock.Preheat, which counts those still in
// the log). It takes their units off the stock, counts them for their
// users and remembers their request ids, once per order (the adopted set
// makes a replayed batch a no-op), and only
//   - while Redis holds the load the database recorded; any other load is
//     one whose stamp never got recorded (its transaction failed), and is
//     removed so that the next activation reloads from the database, which
//     holds these orders once this transaction commits;
//   - while the reload still holds its sales (meta 'hold', Redis time), so
//     no unit of these orders can have been sold again; later, they are
//     refused, never sold twice;
//   - if the stock covers them all.
//
// KEYS: meta, stock, users, adopted, req. ARGV: load stamp, then (order, user,
// request id or "") triples. Returns {adopted}, or {-1} another load was
// removed, {-2} the hold is over, {-3} the stock does not cover them.
var adoptScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], '` + metaLoadStamp + `') ~= ARGV[1] then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
    redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
  end
  return {-1}
end
local fresh = {}
for i = 2, #ARGV, 3 do
  if redis.call('SISMEMBER', KEYS[4], ARGV[i]) == 0 then
    fresh[#fresh + 1] = i
  end
end
if #fresh == 0 then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(redis.call('HGET', KEYS[1], 'hold') or '0') then
  return {-2}
end
if tonumber(redis.call('GET', KEYS[2]) or '0') < #fresh then
  return {-3}
end
for _, i in ipairs(fresh) do
  redis.call('SADD', KEYS[4], ARGV[i])
  redis.call('HINCRBY', KEYS[3], ARGV[i + 1], 1)
  if ARGV[i + 2] ~= '' then
    redis.call('HSET', KEYS[5], ARGV[i + 2], ARGV[i])
  end
end
redis.call('DECRBY', KEYS[2], #fresh)
local expire = redis.call('HGET', KEYS[1], 'expire')
if expire then
  redis.call('PEXPIREAT', KEYS[4], expire)
end
redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
return {#fresh}
`)

// adopt handles the orders of this transaction that were sold from an
// earlier Redis load of their voucher than the one the database recorded:
// Redis lost the voucher and reloaded it from the database while these
// orders were on their way, so the reload may not have counted them. It
// runs inside the transaction, before the commit, so that a crash cannot
// persist an order and forget to adopt it; a retried transaction adopts
// nothing twice. Orders that can no longer be adopted abort the
// transaction with refusedOrders: they are dead-lettered, never persisted
// beside units that were sold again.
func (w *OrderWriter) adopt(ctx context.Context, inserted []int64, rowByID map[int64]*orderRow, byID map[int64][]*pendingOrder, locked map[int64]lockedVoucher) error {
	perVoucher := map[int64][]any{}
	for _, id := range inserted {
		o := rowByID[id]
		stamp, cur := byID[id][0].stamp, locked[o.VoucherID].stamp
		if stamp == "" || cur == "" || stamp == cur {
			continue
		}
		perVoucher[o.VoucherID] = append(perVoucher[o.VoucherID], o.ID, o.UserID, deref(o.RequestID))
	}
	lost := &refusedOrders{reason: DeadLostLoad, ids: map[int64]bool{}}
	for v, triples := range perVoucher {
		args := append([]any{locked[v].stamp}, triples...)
		keys := []string{metaKey(v), stockKey(v), usersKey(v), adoptedKey(v), reqKey(v)}
		res, err := adoptScript.Run(ctx, w.rdb, keys, args...).Int64Slice()
		if err != nil || len(res) != 1 {
			return fmt.Errorf("return %d orders of voucher %d to its reloaded stock: %v %w", len(triples)/3, v, res, err)
		}
		switch n := res[0]; {
		case n == -1:
			w.log.WarnContext(ctx, "redis held an unrecorded load of the voucher; removed it so that it reloads with these orders",
				"voucher", v, "orders", len(triples)/3)
		case n < -1:
			for i := 0; i < len(triples); i += 3 {
				lost.ids[triples[i].(int64)] = true
			}
		case n > 0:
			ordersAdopted.Add(float64(n))
			w.log.WarnContext(ctx, "orders sold before redis reloaded the voucher were returned to its stock", "voucher", v, "orders", n)
		}
	}
	if len(lost.ids) > 0 {
		return lost
	}
	return nil
}
