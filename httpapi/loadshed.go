package httpapi

import (
	"cmp"
	"sync"
	"time"

	"github.com/vektah/gqlparser/v2/ast"

	"flashsale/internal/metrics"
)

// LoadGauge reports this node's grab load (actors.Router): the grabs
// waiting for an answer and the recent average duration of a grab.
type LoadGauge interface {
	Load() (queued int, latency time.Duration)
}

// LoadShedding configures shedding under load (SHED_QUEUE_DEPTH,
// SHED_GRAB_LATENCY): while the grabs waiting on this node reach
// QueueDepth, or their recent average duration reaches GrabLatency, the
// node answers non-core operations UNAVAILABLE so that their CPU, database
// and Redis time go to grabs. A zero threshold takes its default, a
// negative one is off; both off (or no Gauge) turns shedding off.
type LoadShedding struct {
	Gauge       LoadGauge
	QueueDepth  int
	GrabLatency time.Duration
}

// Defaults of the thresholds (SHED_QUEUE_DEPTH, SHED_GRAB_LATENCY). A
// script call takes a batch of up to 256 grabs in a few milliseconds, so
// 2048 waiting grabs are some tens of milliseconds of work queued; a grab
// that takes a quarter of a second on average is a node falling behind.
const (
	ShedQueueDepthDefault  = 2048
	ShedGrabLatencyDefault = 250 * time.Millisecond
)

func (cfg LoadShedding) withDefaults() LoadShedding {
	cfg.QueueDepth = cmp.Or(cfg.QueueDepth, ShedQueueDepthDefault)
	cfg.GrabLatency = cmp.Or(cfg.GrabLatency, ShedGrabLatencyDefault)
	return cfg
}

// shedCooldown is how long the load must stay under half of both
// thresholds before shedding stops: hysteresis, so that the node does not
// flap between shedding and not with every batch.
const shedCooldown = time.Second

// sheddable are the root fields shed under load: reads a shopper can
// retry a moment later (lists, an order's status, red packet details),
// introspection, and the admin reports (a page of dead letters, a whole
// reconciliation) that cost the database most. The trade path is never
// shed: seckillVoucher, stock (what the grab page shows), voucher,
// paying and cancelling orders, red packets' grabs, subscriptions, and
// the admin mutations an operator needs most during an incident (pausing
// a sale, adding stock).
var sheddable = map[string]bool{
	"vouchers":           true,
	"myOrders":           true,
	"order":              true,
	"redPacket":          true,
	"deadLetteredOrders": true,
	"reconciliation":     true,
	"reconcile":          true,
	"__schema":           true,
	"__type":             true,
}

var (
	sheddingGauge = metrics.Gauge("load_shedding",
		"1 while this node sheds non-core operations because grabs queue or slow down (SHED_QUEUE_DEPTH, SHED_GRAB_LATENCY).")
	shedTotal = metrics.CounterVec("shed_total",
		"Operations refused before parsing, by reason: load (non-core while shedding), flood (SHED_IP_PER_SEC), anonymous (without a valid token, over ANON_MAX_IN_FLIGHT or ANON_PER_SEC after ANON_WAIT), budget (a caller asking again while its budget of request cost refuses it).",
		"reason")
)

// loadShedder decides, from the gauge, whether the node sheds now. It
// samples the gauge when an operation asks, not on a timer: no goroutine
// to own, and nothing to decide while nobody asks.
type loadShedder struct {
	cfg LoadShedding
	now func() time.Time

	mu sync.Mutex
	on bool
	// busy is when the load was last seen at or over half a threshold.
	// Counting the cooldown from it (not from the first calm sample) ends
	// shedding at the first operation after a quiet spell.
	busy time.Time
}

// newLoadShedder returns nil when shedding is off.
func newLoadShedder(cfg LoadShedding) *loadShedder {
	if cfg.Gauge == nil || (cfg.QueueDepth <= 0 && cfg.GrabLatency <= 0) {
		return nil
	}
	return &loadShedder{cfg: cfg, now: time.Now}
}

// shedding reports whether non-core operations are shed now. It starts at
// once when a threshold is reached and ends once the load has been under
// half of each threshold for shedCooldown.
func (s *loadShedder) shedding() bool {
	queued, latency := s.cfg.Gauge.Load()
	high := (s.cfg.QueueDepth > 0 && queued >= s.cfg.QueueDepth) ||
		(s.cfg.GrabLatency > 0 && latency >= s.cfg.GrabLatency)
	low := (s.cfg.QueueDepth <= 0 || queued < s.cfg.QueueDepth/2) &&
		(s.cfg.GrabLatency <= 0 || latency < s.cfg.GrabLatency/2)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case high && !s.on:
		s.on = true
		sheddingGauge.Set(1)
	case s.on && low && now.Sub(s.busy) >= shedCooldown:
		s.on = false
		sheddingGauge.Set(0)
	}
	if !low {
		s.busy = now
	}
	return s.on
}

// isSheddable reports whether an operation with these root fields is
// shed under load: any non-core field makes it so (one answer per
// operation).
func isSheddable(fields []*ast.Field) bool {
	for _, f := range fields {
		if sheddable[f.Name] {
			return true
		}
	}
	return false
}
