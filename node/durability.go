package node

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/config"
	"flashsale/persistence"
)

// checkRedisDurability tells the operator at start, in one line, what a
// crash of the stock Redis can do to the promises under its persistence
// settings (persistence.DurabilityTable, the same words as the docs), and
// which setting keeps them: a WARN for every setting but appendonly yes +
// appendfsync always, an INFO for that one. A server whose CONFIG is
// disabled, renamed or refused gets the WARN of settings that cannot be
// read: a managed service may be safe, but the service cannot tell. The
// in-process Redis of real mode (ALLOW_EMBEDDED_REDIS) gets its own WARN;
// the embedded demo mode, with no database either, gets none. A server
// that does not tell its run id to scripts gets a WARN that a rollback
// cannot be noticed (persistence.NoRunIDWarning). A Redis
// with replicas that can be promoted (REDIS_MODE sentinel or cluster)
// without acknowledgements gets a second WARN: a failover can lose orders
// answered OK whatever the persistence setting.
func checkRedisDurability(ctx context.Context, cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) {
	switch {
	case cfg.Embedded():
		return
	case cfg.RedisURL == "":
		log.Warn(persistence.DurabilityEmbedded.Warning())
		return
	}
	if cfg.RedisMode != "" && cfg.RedisMode != persistence.RedisSingle && cfg.RedisAckReplicas == 0 {
		log.Warn(persistence.FailoverWithoutAcks(cfg.RedisMode), "redis_mode", cfg.RedisMode, "redis_ack_replicas", 0)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if id, err := persistence.ReadRunID(ctx, rdb); err == nil && id == persistence.NoRunID {
		log.Warn(persistence.NoRunIDWarning)
	}
	d, err := persistence.ReadRedisDurability(ctx, rdb)
	if err != nil {
		log.Warn(persistence.DurabilityUnknown.Warning(), "err", err)
		return
	}
	risk := d.Risk()
	if risk.Safe {
		log.Info(risk.Warning())
		return
	}
	log.Warn(risk.Warning(), "appendonly", d.AppendOnly, "appendfsync", d.AppendFsync, "save", d.Save)
}
