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

// registerLogScript registers an order log under a new generation: scripts/register_log.lua.
var registerLogScript = newScript("register_log")

// unregisterLogScript unregisters an order log not registered again since: scripts/unregister_log.lua.
var unregisterLogScript = newScript("unregister_log")

// registerLog adds a voucher's order log to the registry under a new
// generation. It must follow the preheat script that wrote the voucher's
// metadata: that order is what prune's argument rests on.
func registerLog(ctx context.Context, rdb redis.UniversalClient, log string) error {
	keys := []string{orderLogsKey, orderLogGensKey, orderLogGenKey}
	if err := registerLogScript.Run(ctx, rdb, keys, log).Err(); err != nil {
		return fmt.Errorf("register order log %s: %w", log, err)
	}
	return nil
}

// logFinishedScript tells whether an order log is finished: scripts/log_finished.lua.
var logFinishedScript = newScript("log_finished")

// Prune drops finished order logs from the registry, so that the writer's
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
func (w *OrderWriter) Prune(ctx context.Context, logs []string) int {
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
		done, err := logFinishedScript.Run(ctx, w.rdb, []string{metaKey(id), s}).Int()
		if err != nil || done != 1 {
			continue
		}
		removed, err := unregisterLogScript.Run(ctx, w.rdb, []string{orderLogsKey, orderLogGensKey}, s, gen).Int()
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
