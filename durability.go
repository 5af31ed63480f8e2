package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/persistence"
)

// checkRedisDurability warns at start when REDIS_URL's server keeps nothing
// across a restart (appendonly no and no RDB save rules): orders answered
// OK wait in Redis's order log until they are in the database, so such a
// restart loses them. A server that refuses CONFIG (managed Redis services
// often disable it) gets a debug line only: we cannot tell.
func checkRedisDurability(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	d, err := persistence.ReadRedisDurability(ctx, rdb)
	switch {
	case err != nil:
		log.Debug("redis persistence unknown (CONFIG refused); run it with appendonly yes", "err", err)
	case !d.Persistent():
		log.Warn("redis keeps nothing across a restart (appendonly no, no save rules): orders answered OK wait in redis until they are in the database and would be lost; run it with appendonly yes (appendfsync always for no loss)")
	case !d.AppendOnly:
		log.Info("redis persists by snapshots only (appendonly no): a crash loses the orders accepted since the last snapshot; appendonly yes is safer", "save", d.Save)
	}
}
