package node

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"flashsale/internal/metrics"
	"flashsale/persistence"
)

// readyTimeout bounds each store's check of one /readyz probe. Load
// balancers probe every few seconds with a timeout of their own; an
// answer after that is no answer, and a stalled Redis must read as "cannot
// sell", not hold the probe.
const readyTimeout = 500 * time.Millisecond

// degraded says, per store, whether the last /readyz probe found it
// unreachable while the node still sells: an operator alerts on it, while
// the load balancer keeps the node.
var degraded = metrics.GaugeVec("degraded",
	"1 while the node sells without this store (as of the last /readyz probe).", "store")

// readiness answers /readyz: whether a load balancer should send this node
// grabs. Grabs need Redis only (accepted orders wait in the order log while
// Postgres is away), or, with the database fallback, Postgres while Redis
// is down; so Redis decides, and with the fallback Postgres may stand in; a Postgres outage is reported
// ("degraded" and the flashsale_degraded gauge) but does not take the node
// out: every node shares the database, and a blip would otherwise empty the
// whole pool at once. Draining (shutdown started) is 503, so the balancer
// stops sending before the listener closes.
type readiness struct {
	// redis reads the token the scripts verify a load under (persistence.
	// ReadRunID) with a client whose own timeouts are short: a ping that
	// also tells whether Redis's maxmemory-policy evicts keys ("!<policy>"),
	// under which nothing is sold.
	redis func(context.Context) (string, error)
	// breaker says whether grabs may use Redis (Usable: not while it is
	// open, nor while Redis is re-synced from the database after an
	// outage) and whether it is down (open or half-open: the database
	// fallback sells then, not during the re-sync). nil: always usable.
	breaker interface {
		Usable() bool
		Down() bool
	}
	db func(context.Context) error
	// held is how many vouchers this node's reloads hold (catalog.Holds):
	// they sell nothing until no order writer can hold an order of the
	// load Redis lost. nil: none.
	held func() int
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
	token, redisErr := rd.redis(ctx)
	evicting := persistence.ParseRunToken(token).Evicting
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
	case evicting != "":
		http.Error(w, "redis maxmemory-policy "+evicting+" evicts keys: cannot sell until it is noeviction", http.StatusServiceUnavailable)
		return
	case rd.breaker != nil && !rd.breaker.Usable():
		switch down := rd.breaker.Down(); {
		case down && rd.fallback && pgErr == nil:
			_, _ = w.Write([]byte("ready (degraded: redis unavailable; grabs sold from the database)\n"))
		case down:
			http.Error(w, "redis unavailable (circuit breaker open): cannot sell", http.StatusServiceUnavailable)
		default:
			http.Error(w, "redis is back and being re-synced from the database: cannot sell yet", http.StatusServiceUnavailable)
		}
		return
	}
	if n := rd.heldVouchers(); n > 0 {
		http.Error(w, fmt.Sprintf("%d voucher(s) rebuilt after redis lost data and held until no order writer holds an order of the lost load: cannot sell them yet", n),
			http.StatusServiceUnavailable)
		return
	}
	if pgErr != nil {
		_, _ = w.Write([]byte("ready (degraded: database unavailable; orders wait in the order log)\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

func (rd *readiness) heldVouchers() int {
	if rd.held == nil {
		return 0
	}
	return rd.held()
}
