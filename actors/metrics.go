package actors

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"flashsale/domain"
)

// The actors' metrics: namespaced, labelled only by a grab's code (a short
// fixed set), never by voucher or user.
var (
	grabsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "grab_total", Help: "Grabs answered, by outcome.",
	}, []string{"code"})
	// grabDuration is the whole grab as its caller waits for it: queueing
	// in the actor's mailbox, rate limits, ids and the script call. The
	// buckets span the in-memory answers (microseconds) to GRAB_TIMEOUT.
	grabDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "flashsale", Name: "grab_duration_seconds",
		Help:    "Time from a grab's arrival at the router to its answer, by outcome.",
		Buckets: []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"code"})
	// batchSize shows whether batching works under a rush: one grab per
	// script call when idle, up to GRAB_BATCH_SIZE under load.
	batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "flashsale", Name: "grab_batch_size",
		Help:    "Grabs sent together in one batch (one script call) by a voucher actor.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10), // 1 … 512
	})
	actorsAlive = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "actors_alive",
		Help: "Voucher actors running on this node (started and not yet stopped).",
	})
	actorsFull = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "grab_actor_cap_total",
		Help: "Grabs answered UNAVAILABLE because this node runs MaxActors voucher actors already.",
	})
	// The cluster's metrics: where segments live and how fairly the
	// placement spreads them.
	segmentsHosted = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "cluster_segments_hosted",
		Help: "Voucher segments this member hosts an activation of now.",
	})
	placementShare = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "cluster_placement_share",
		Help: "Share (0..1) of a fixed sample of 4096 segment identities that this member would host under the current membership: the spread of the placement, 1/members when fair.",
	})
	clusterMembers = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "cluster_members",
		Help: "Members of the cluster hosting segments, as this member sees them.",
	})
	protoactorSuppressed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "protoactor_log_suppressed_total",
		Help: "protoactor-go warning and error lines not logged: repeats of a line already logged for the same event (the same message about the same member, each within a minute of the last).",
	})
	remoteGrabs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "cluster_remote_grabs_total",
		Help: "Grabs this member sent to the member hosting their segment, by result (ok: an answer came back; failed: none did by the grab's deadline, answered UNAVAILABLE; resent: sent again to the segment's new host after the member it was sent to left).",
	}, []string{"result"})
	undecidedCalls = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "grab_undecided_calls_total",
		Help: "Grab script calls that failed without an answer (Redis may still run them); their units, users and request ids stay off the database fallback until the segment claims a new fence.",
	})
	leaseRefusals = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "segment_lease_refused_total",
		Help: "Segment activations that could not take their Redlock lease in time (their grabs were answered UNAVAILABLE).",
	})
	leaseLosses = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "segment_lease_lost_total",
		Help: "Segment activations that stopped because their lease could not be extended.",
	})
	userRateRefusals = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "user_rate_limit_refusals_total",
		Help: "Grabs turned away by the per-user rate limit (RATE_USER_PER_SEC), which segment activations keep in memory; the limits shared in Redis count in rate_limit_refusals_total.",
	})
	// saleMemoryAnswers and saleMemoryDrops show whether keyed grabs after
	// the sell-out are answered from an activation's proven record of the
	// sales (saleMemory) or looked up by the grab script.
	saleMemoryAnswers = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "grab_sale_memory_answers_total",
		Help: "Keyed grabs answered from their activation's record of the sales, after a script call proved the record whole (no per-grab lookup in Redis).",
	})
	saleMemoryDrops = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "grab_sale_memory_dropped_total",
		Help: "Records of the sales an activation gave up (a call that may have sold unseen, a tally that disagreed, or the size bound); its keyed grabs go to the script from then on.",
	})
)

// grabCodes are each code's series, looked up once here rather than by
// label on every grab (a hash and a lock per lookup), and so shown at 0
// from the start.
var grabCodes = map[domain.SeckillCode]struct {
	total    prometheus.Counter
	duration prometheus.Observer
}{}

func init() {
	prometheus.MustRegister(grabsTotal, grabDuration, batchSize, actorsAlive, actorsFull,
		segmentsHosted, placementShare, clusterMembers, remoteGrabs, protoactorSuppressed, leaseRefusals, leaseLosses, userRateRefusals,
		saleMemoryAnswers, saleMemoryDrops, undecidedCalls)
	for _, c := range []domain.SeckillCode{domain.SeckillOK, domain.SeckillNotFound, domain.SeckillNotStarted,
		domain.SeckillEnded, domain.SeckillPaused, domain.SeckillSoldOut, domain.SeckillLimitReached,
		domain.SeckillUnavailable, domain.SeckillRateLimited} {
		grabCodes[c] = struct {
			total    prometheus.Counter
			duration prometheus.Observer
		}{grabsTotal.WithLabelValues(string(c)), grabDuration.WithLabelValues(string(c))}
	}
}

// countGrab records one answered grab.
func countGrab(code domain.SeckillCode, took time.Duration) {
	m, ok := grabCodes[code]
	if !ok { // a code added later and not listed above
		grabsTotal.WithLabelValues(string(code)).Inc()
		grabDuration.WithLabelValues(string(code)).Observe(took.Seconds())
		return
	}
	m.total.Inc()
	m.duration.Observe(took.Seconds())
}
