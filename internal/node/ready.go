package node

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// readyTimeout bounds each store's check of one /readyz probe. Load
// balancers probe every few seconds with a timeout of their own; an
// answer after that is no answer, and a stalled Redis must read as "cannot
// sell", not hold the probe.
const readyTimeout = 500 * time.Millisecond

// degraded says, per store, whether the last /readyz probe found it
// unreachable while the node still sells: an operator alerts on it, while
// the load balancer keeps the node.
var degraded = promauto.NewGaugeVec(prometheus.GaugeOpts{
	Namespace: "flashsale",
	Name:      "degraded",
	Help:      "1 while the node sells without this store (as of the last /readyz probe).",
}, []string{"store"})

// readiness answers /readyz: whether a load balancer should send this node
// grabs. Grabs need Redis only (accepted orders wait in the order log while
// Postgres is away), or, with the database fallback, Postgres while Redis
// is down; so Redis decides, and with the fallback Postgres may stand in; a Postgres outage is reported
// ("degraded" and the flashsale_degraded gauge) but does not take the node
// out: every node shares the database, and a blip would otherwise empty the
// whole pool at once. Draining (shutdown started) is 503, so the balancer
// stops sending before the listener closes.
type readiness struct {
	redis func(context.Context) error // ping with a client whose own timeouts are short
	db    func(context.Context) error
	// fallback (DEGRADE_TO_DB) sells from the database while Redis is
	// down, so then a reachable database is enough to sell.
	fallback bool
	draining atomic.Bool
}

func (rd *readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if rd.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	// Both at once: the probe takes the slower of the two, not the sum.
	dbErr := make(chan error, 1)
	go func() { dbErr <- rd.db(ctx) }()
	redisErr := rd.redis(ctx)
	pgErr := <-dbErr
	if pgErr != nil {
		degraded.WithLabelValues("postgres").Set(1)
	} else {
		degraded.WithLabelValues("postgres").Set(0)
	}
	switch {
	case redisErr != nil && rd.fallback && pgErr == nil:
		_, _ = w.Write([]byte("ready (degraded: redis unavailable; grabs sold from the database)\n"))
		return
	case redisErr != nil:
		http.Error(w, "redis unavailable: cannot sell", http.StatusServiceUnavailable)
		return
	}
	if pgErr != nil {
		_, _ = w.Write([]byte("ready (degraded: database unavailable; orders wait in the order log)\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}
