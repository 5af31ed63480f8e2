package persistence

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// pendingMember names a pending change in the applied set (appliedKey):
// the apply script changes stock once per member, however often a
// canceller and the sweeper run it.
func pendingMember(kind string, ref int64) string {
	if kind == pendingRestock {
		return "r" + strconv.FormatInt(ref, 10)
	}
	return "c" + strconv.FormatInt(ref, 10)
}

// applyScript applies stock changes the database committed (see
// tb_stock_pending) to a voucher's Redis load, each at most once: a change
// already in the applied set, or one made under another load than Redis
// holds (a reload after the commit read it from the database already), or
// for a voucher Redis does not hold, is skipped. A returned order gives
// back its unit and its user's slot; a restock adds its units and raises
// the metadata's initial stock to the database's figure. It announces the
// voucher so that every node's actor reloads: a sold-out voucher sells
// again.
//
// KEYS: meta, stock, users, applied. ARGV: (member, load stamp, delta,
// user id or "", initial or "0") per change. Returns {applied, skipped}.
var applyScript = redis.NewScript(`
local life = redis.call('HGET', KEYS[1], '` + metaLoadStamp + `')
local applied, skipped, total = 0, 0, 0
for i = 1, #ARGV, 5 do
  local member, stamp, delta, user, initial = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], tonumber(ARGV[i + 4])
  if (not life) or life ~= stamp or redis.call('SISMEMBER', KEYS[4], member) == 1 then
    skipped = skipped + 1
  else
    redis.call('SADD', KEYS[4], member)
    total = total + delta
    if user ~= '' and tonumber(redis.call('HGET', KEYS[3], user) or '0') > 0 then
      redis.call('HINCRBY', KEYS[3], user, -1)
    end
    if initial > tonumber(redis.call('HGET', KEYS[1], 'initial') or '0') then
      redis.call('HSET', KEYS[1], 'initial', ARGV[i + 4])
    end
    applied = applied + 1
  end
end
if total > 0 then
  redis.call('INCRBY', KEYS[2], total)
end
if applied > 0 then
  local expire = redis.call('HGET', KEYS[1], 'expire')
  if expire then
    redis.call('PEXPIREAT', KEYS[4], expire)
  end
  redis.call('PUBLISH', '` + eventsChannel + `', KEYS[1])
end
return {applied, skipped}
`)

// applyPending runs the apply script for pending changes of one voucher.
func applyPending(ctx context.Context, rdb redis.UniversalClient, voucherID int64, rows []pendingRow) (applied int, err error) {
	if len(rows) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 5*len(rows))
	for _, p := range rows {
		user := ""
		if p.UserID != nil {
			user = strconv.FormatInt(*p.UserID, 10)
		}
		args = append(args, pendingMember(p.Kind, p.RefID), p.LoadStamp, p.Delta, user, p.Initial)
	}
	keys := []string{metaKey(voucherID), stockKey(voucherID), usersKey(voucherID), appliedKey(voucherID)}
	res, err := applyScript.Run(ctx, rdb, keys, args...).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, fmt.Errorf("apply %d stock changes to voucher %d in redis: %v %w", len(rows), voucherID, res, err)
	}
	return int(res[0]), nil
}
