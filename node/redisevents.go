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
//
// On a Redis Cluster each primary has a token of its own: the watch reads
// every primary's and says when one changed, and when a new one serves
// slots (a replica promoted, a shard added).
type redisWatch struct {
	rdb redis.Scripter
	log *slog.Logger
	// onChange, if set, hears that loads may have been lost (another
	// server, keys evicted, the evicting policy off again).
	onChange func(ctx context.Context)

	mu      sync.Mutex
	last    string            // the token last read; "" before the first read
	byNode  map[string]string // on a cluster: each primary's token
	started bool              // on a cluster: a first round was read
}

func newRedisWatch(rdb redis.Scripter, log *slog.Logger) *redisWatch {
	return &redisWatch{rdb: rdb, log: log}
}

// job is the watch as a maintenance job of every node.
func (w *redisWatch) job() *maintenance.Job[bool] {
	return maintenance.New(maintenance.Config{Name: "redis-watch", Interval: redisWatchInterval, Timeout: redisWatchInterval}, w.log,
		func(ctx context.Context) (bool, error) {
			changed := w.step(ctx)
			if changed && w.onChange != nil {
				w.onChange(ctx)
			}
			return changed, nil
		})
}

// step reads the token and logs what changed since the last read; it
// reports whether it logged. A failed read says nothing: the breaker and
// /readyz speak of a Redis that does not answer.
func (w *redisWatch) step(ctx context.Context) bool {
	if cc, ok := w.rdb.(*redis.ClusterClient); ok {
		return w.clusterStep(ctx, cc)
	}
	token, err := persistence.ReadRunID(ctx, w.rdb)
	if err != nil {
		return false
	}
	w.mu.Lock()
	last := w.last
	w.last = token
	w.mu.Unlock()
	return w.compare(last, token)
}

// clusterStep reads every primary's token and compares each with what the
// same primary said before; a primary not seen before is news after the
// first round.
func (w *redisWatch) clusterStep(ctx context.Context, cc *redis.ClusterClient) bool {
	var mu sync.Mutex
	now := map[string]string{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		token, err := persistence.ReadRunID(ctx, node)
		if err == nil {
			mu.Lock()
			now[node.Options().Addr] = token
			mu.Unlock()
		}
		return nil
	})
	if err != nil || len(now) == 0 {
		return false
	}
	w.mu.Lock()
	before, started := w.byNode, w.started
	if w.byNode == nil {
		w.byNode = map[string]string{}
	}
	for addr, token := range now {
		w.byNode[addr] = token
	}
	w.started = true
	w.mu.Unlock()
	logged := false
	for addr, token := range now {
		last, seen := before[addr]
		switch {
		case !seen && started:
			w.log.Warn("redis cluster has a new primary (a failover or a new shard): its vouchers are rebuilt from the database before they sell again",
				"node", addr)
			logged = true
		case seen:
			logged = w.compare(last, token, "node", addr) || logged
		}
	}
	return logged
}

// compare logs what changed from the token last to token; it reports
// whether it logged.
func (w *redisWatch) compare(last, token string, args ...any) bool {
	if last == "" || last == token {
		return false
	}
	was, now := persistence.ParseRunToken(last), persistence.ParseRunToken(token)
	switch {
	case now.Evicting != "":
		w.log.Warn("redis maxmemory-policy evicts keys: nothing is sold until it is noeviction", append([]any{"maxmemory_policy", now.Evicting}, args...)...)
	case was.Evicting != "":
		w.log.Info("redis maxmemory-policy is noeviction again; loads verified before it changed are rebuilt only if keys were evicted", append([]any{"evicted_keys", now.Evicted}, args...)...)
	case now.Run != was.Run:
		w.log.Warn("redis server changed (a restart or a failover): every voucher and red packet is rebuilt from the database before it sells again",
			append([]any{"run_id", now.Run, "previous_run_id", was.Run}, args...)...)
	case now.Evicted != was.Evicted:
		w.log.Warn("redis evicted keys: every voucher and red packet is rebuilt from the database before it sells again",
			append([]any{"evicted_keys", now.Evicted, "previously", was.Evicted}, args...)...)
	}
	return true
}
