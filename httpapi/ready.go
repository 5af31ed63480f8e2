package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"flashsale/internal/metrics"
)

// ReadyTimeout bounds each store's check of one /readyz probe. Load
// balancers probe every few seconds with a timeout of their own; an
// answer after that is no answer, and a stalled Redis must read as "cannot
// sell", not hold the probe.
const ReadyTimeout = 500 * time.Millisecond

// degraded says, per store, whether the last /readyz probe found it
// unreachable while the node still sells: an operator alerts on it, while
// the load balancer keeps the node.
var degraded = metrics.GaugeVec("degraded",
	"1 while the node sells without this store (as of the last /readyz probe).", "store")

// ready is /readyz's last answer as a series, for alerts that see what the
// load balancer sees. A vector without labels: the series is absent until
// the first probe, so a node nobody probes reads as unknown, not as down.
var ready = metrics.GaugeVec("ready",
	"1 while the last /readyz probe answered 200 (ready, degraded included), 0 when it answered 503 (cannot sell, or draining); absent before the first probe.")

// RedisBreaker is the circuit breaker on the request path's Redis client
// (breaker.Breaker) as /readyz reads it.
type RedisBreaker interface {
	// Usable says whether grabs may use Redis: not while the breaker is
	// open, nor while Redis is re-synced from the database after an
	// outage.
	Usable() bool
	// Down says whether Redis is taken to be down (open or half-open):
	// the database fallback sells then, not during the re-sync.
	Down() bool
}

// Readiness answers /readyz: whether a load balancer should send this node
// grabs. Grabs need Redis only (accepted orders wait in the order log while
// Postgres is away), or, with the database fallback, Postgres while Redis
// is down; so Redis decides, and with the fallback Postgres may stand in; a Postgres outage is reported
// ("degraded" and the flashsale_degraded gauge) but does not take the node
// out: every node shares the database, and a blip would otherwise empty the
// whole pool at once. Draining (shutdown started) is 503, so the balancer
// stops sending before the listener closes.
//
// The node fills in what only it knows: its stores' checks, its breaker
// and its held vouchers.
type Readiness struct {
	// Redis reads the token the scripts verify a load under with a client
	// whose own timeouts are short, and returns Redis's maxmemory-policy
	// when it evicts keys (nothing is sold then), "" when it does not.
	Redis func(context.Context) (evicting string, err error)
	// Breaker, if set, keeps the node out while grabs may not use Redis;
	// nil: always usable.
	Breaker RedisBreaker
	// DB pings the database.
	DB func(context.Context) error
	// Held is how many vouchers this node's reloads hold (catalog.Holds):
	// they sell nothing until no order writer can hold an order of the
	// load Redis lost. nil: none.
	Held func() int
	// Fallback (DEGRADE_TO_DB) sells from the database while Redis is
	// down, so then a reachable database is enough to sell.
	Fallback bool

	draining atomic.Bool
}

// Drain makes every later probe answer 503 "draining": the shutdown
// calls it first, so that load balancers stop sending before the
// listener closes.
func (rd *Readiness) Drain() { rd.draining.Store(true) }

// Draining reports whether Drain was called.
func (rd *Readiness) Draining() bool { return rd.draining.Load() }

// ServeHTTP answers one probe: 200 while the node can sell ("ready",
// or "ready (degraded: ...)"), 503 with the reason otherwise; the answer
// is kept in flashsale_ready.
func (rd *Readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	rd.answer(rec, r)
	if rec.code == http.StatusOK {
		ready.WithLabelValues().Set(1)
	} else {
		ready.WithLabelValues().Set(0)
	}
}

// statusRecorder notes the status an answer was given with.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// answer is ServeHTTP's answer, before it is noted.
func (rd *Readiness) answer(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if rd.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
	defer cancel()
	// Both at once: the probe takes the slower of the two, not the sum.
	dbErr := make(chan error, 1)
	go func() { dbErr <- rd.DB(ctx) }()
	evicting, redisErr := rd.Redis(ctx)
	pgErr := <-dbErr
	if pgErr != nil {
		degraded.WithLabelValues("postgres").Set(1)
	} else {
		degraded.WithLabelValues("postgres").Set(0)
	}
	switch {
	case redisErr != nil && rd.Fallback && pgErr == nil:
		_, _ = w.Write([]byte("ready (degraded: redis unavailable; grabs sold from the database)\n"))
		return
	case redisErr != nil:
		http.Error(w, "redis unavailable: cannot sell", http.StatusServiceUnavailable)
		return
	case evicting != "":
		http.Error(w, "redis maxmemory-policy "+evicting+" evicts keys: cannot sell until it is noeviction", http.StatusServiceUnavailable)
		return
	case rd.Breaker != nil && !rd.Breaker.Usable():
		switch down := rd.Breaker.Down(); {
		case down && rd.Fallback && pgErr == nil:
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

func (rd *Readiness) heldVouchers() int {
	if rd.Held == nil {
		return 0
	}
	return rd.Held()
}
