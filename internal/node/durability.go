package node

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/config"
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
// the embedded demo mode, with no database either, gets none.
func checkRedisDurability(ctx context.Context, cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) {
	switch {
	case cfg.Embedded():
		return
	case cfg.RedisURL == "":
		log.Warn(persistence.DurabilityEmbedded.Warning())
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
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
