package persistence

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The registry of order logs: the set orderLogsKey lists the logs the
// writers read. A log is registered by every preheat of its voucher and
// unregistered by a writer once it is finished. Each registration also
// stamps the log with a generation that never repeats, so that a writer
// can unregister a log only if nobody registered it again since it looked
// (see prune).
//
// The registry's keys share one Redis Cluster slot (keys.go); a voucher's
// own keys live in another, which is why the registry can never be
// written by the voucher's scripts.

// registerScript registers an order log under a new generation.
// KEYS: registry, gens, counter. ARGV: log.
// The generation is stored as the string GET returns, never as a Lua
// number (see "No Lua number is written back" in docs/DECISIONS.md).
var registerScript = redis.NewScript(`
redis.call('INCR', KEYS[3])
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], redis.call('GET', KEYS[3]))
return 1
`)

// unregisterScript unregisters an order log only if its generation is
// still the one the caller read before it found the log finished ("" for
// a log registered without one). KEYS: registry, gens. ARGV: log,
// generation. Returns 1 if it unregistered the log.
var unregisterScript = redis.NewScript(`
local g = redis.call('HGET', KEYS[2], ARGV[1]) or ''
if g ~= ARGV[2] then return 0 end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
`)

// registerLog adds a voucher's order log to the registry under a new
// generation. It must follow the preheat script that wrote the voucher's
// metadata: that order is what prune's argument rests on.
func registerLog(ctx context.Context, rdb redis.UniversalClient, log string) error {
	keys := []string{orderLogsKey, orderLogGensKey, orderLogGenKey}
	if err := registerScript.Run(ctx, rdb, keys, log).Err(); err != nil {
		return fmt.Errorf("register order log %s: %w", log, err)
	}
	return nil
}

// finishedScript tells whether an order log is finished: its voucher's
// sale ended more than a minute ago by Redis's clock (so no grab can
// append to it any more, even from a node whose clock lags) and it holds
// no entry. A voucher Redis no longer knows counts as ended. KEYS: meta,
// log. Returns 1 when finished.
var finishedScript = redis.NewScript(`
local e = tonumber(redis.call('HGET', KEYS[1], 'end') or '0')
local t = redis.call('TIME')
if tonumber(t[1]) * 1000 < e + 60000 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('XLEN', KEYS[2]) > 0 then return 0 end
return 1
`)

// prune drops finished order logs from the registry, so that the writer's
// reads, claims and lag probes do not grow with every voucher ever sold.
// A later preheat of the voucher registers its log again. It returns how
// many it dropped; errors only postpone pruning.
//
// The check (in the voucher's slot) and the unregistering (in the
// registry's) cannot be one script, and a log may come back to life
// between them: the voucher is preheated again (metadata written, then the
// log registered) and sells. So prune reads each log's generation first,
// then checks, then unregisters only if the generation is unchanged. A
// registration after that read either precedes the unregistering (the
// generation differs: nothing is removed) or follows it (the log is
// registered again); a registration before the read follows its preheat,
// which the check then sees. Nothing appends to a finished log until a
// preheat writes the metadata again, and that preheat's registration falls
// in the first two cases. So a log that can receive orders is missing from
// the registry at most between a preheat's script and that preheat's own
// registration, as a new voucher's log is (docs/DECISIONS.md).
func (w *OrderWriter) prune(ctx context.Context, logs []string) int {
	if len(logs) == 0 {
		return 0
	}
	gens, err := w.rdb.HMGet(ctx, orderLogGensKey, logs...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0
	}
	n := 0
	for i, s := range logs {
		id, ok := voucherIDFromKey(s)
		if !ok || i >= len(gens) {
			continue
		}
		gen, _ := gens[i].(string) // nil: registered without a generation
		done, err := finishedScript.Run(ctx, w.rdb, []string{metaKey(id), s}).Int()
		if err != nil || done != 1 {
			continue
		}
		removed, err := unregisterScript.Run(ctx, w.rdb, []string{orderLogsKey, orderLogGensKey}, s, gen).Int()
		if err != nil {
			continue
		}
		if removed == 1 {
			n++
		} else {
			w.log.InfoContext(ctx, "kept an order log registered again while it was being pruned", "log", s)
		}
	}
	return n
}
