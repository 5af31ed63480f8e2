package persistence

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The registry of order logs: the set orderLogsKey lists the logs the
// writers read. A log is registered by every preheat of its voucher and
// unregistered by a writer once it is finished. Each registration also
// stamps the log with a generation that never repeats, so that a writer
// can unregister a log only if nobody registered it again since it looked
// (see OrderLogHandler.Prune).
//
// The registry's keys share one Redis Cluster slot (keys.go); a voucher's
// own keys live in another, which is why the registry can never be
// written by the voucher's scripts.

// registerLogScript registers an order log under a new generation: scripts/register_log.lua.
var registerLogScript = newScript("register_log")

// registerLog adds a voucher's order log to the registry under a new
// generation. It must follow the preheat script that wrote the voucher's
// metadata: that order is what OrderLogHandler.Prune's argument rests on.
func registerLog(ctx context.Context, rdb redis.UniversalClient, log string) error {
	keys := []string{orderLogsKey, orderLogGensKey, orderLogGenKey}
	if err := registerLogScript.Run(ctx, rdb, keys, log).Err(); err != nil {
		return fmt.Errorf("register order log %s: %w", log, err)
	}
	return nil
}
