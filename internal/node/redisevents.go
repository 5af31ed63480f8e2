package node

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/internal/maintenance"
	"flashsale/persistence"
)

// redisWatchInterval is how often a node reads the stock Redis's token.
const redisWatchInterval = time.Second

// redisWatch tells the operator, in one line each, when the stock Redis
// changed in a way that stops or restarts the sale: another server (a
// restart or a failover: another run id), keys evicted, an evicting
// maxmemory-policy switched on or off. It reads the token the scripts
// verify a load under (persistence.ReadRunID) once a second on every
// node; the grabs themselves say nothing of it but UNAVAILABLE while each
// voucher is rebuilt.
type redisWatch struct {
	rdb redis.Scripter
	log *slog.Logger

	mu   sync.Mutex
	last string // the token last read; "" before the first read
}

func newRedisWatch(rdb redis.Scripter, log *slog.Logger) *redisWatch {
	return &redisWatch{rdb: rdb, log: log}
}

// job is the watch as a maintenance job of every node.
func (w *redisWatch) job() *maintenance.Job[bool] {
	return maintenance.New(maintenance.Config{Name: "redis-watch", Interval: redisWatchInterval, Timeout: redisWatchInterval}, w.log,
		func(ctx context.Context) (bool, error) { return w.step(ctx), nil })
}

// step reads the token and logs what changed since the last read; it
// reports whether it logged. A failed read says nothing: the breaker and
// /readyz speak of a Redis that does not answer.
func (w *redisWatch) step(ctx context.Context) bool {
	token, err := persistence.ReadRunID(ctx, w.rdb)
	if err != nil {
		return false
	}
	w.mu.Lock()
	last := w.last
	w.last = token
	w.mu.Unlock()
	if last == "" || last == token {
		return false
	}
	was, now := persistence.ParseRunToken(last), persistence.ParseRunToken(token)
	switch {
	case now.Evicting != "":
		w.log.Warn("redis maxmemory-policy evicts keys: nothing is sold until it is noeviction", "maxmemory_policy", now.Evicting)
	case was.Evicting != "":
		w.log.Info("redis maxmemory-policy is noeviction again; loads verified before it changed are rebuilt only if keys were evicted", "evicted_keys", now.Evicted)
	case now.Run != was.Run:
		w.log.Warn("redis server changed (a restart or a failover): every voucher and red packet is rebuilt from the database before it sells again",
			"run_id", now.Run, "previous_run_id", was.Run)
	case now.Evicted != was.Evicted:
		w.log.Warn("redis evicted keys: every voucher and red packet is rebuilt from the database before it sells again",
			"evicted_keys", now.Evicted, "previously", was.Evicted)
	}
	return true
}
