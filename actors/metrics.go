package actors

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"flashsale/domain"
	"flashsale/internal/metrics"
)

// The actors' metrics: namespaced, labelled only by a grab's code (a short
// fixed set), never by voucher or user.
var (
	grabsTotal = metrics.CounterVec("grab_total", "Grabs answered, by outcome.", "code")
	// grabDuration is the whole grab as its caller waits for it: queueing
	// in the actor's mailbox, rate limits, ids and the script call. The
	// buckets span the in-memory answers (microseconds) to GRAB_TIMEOUT.
	grabDuration = metrics.HistogramVec("grab_duration_seconds",
		"Time from a grab's arrival at the router to its answer, by outcome.",
		[]float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}, "code")
	// batchSize shows whether batching works under a rush: one grab per
	// script call when idle, up to GRAB_BATCH_SIZE under load.
	batchSize = metrics.Histogram("grab_batch_size",
		"Grabs sent together in one batch (one script call) by a voucher actor.",
		prometheus.ExponentialBuckets(1, 2, 10))
	actorsAlive = metrics.Gauge("actors_alive",
		"Voucher actors running on this node (started and not yet stopped).")
	actorPanics = metrics.CounterVec("actor_panics_total",
		"Actors whose message handler panicked (a bug: each is logged at ERROR with its stack), by kind (voucher, red_packet); the activation stopped and its grabs went to a new one.",
		"kind")
	actorsFull = metrics.Counter("grab_actor_cap_total",
		"Grabs answered UNAVAILABLE because this node runs MaxActors voucher actors already.")
	// The cluster's metrics: where segments live and how fairly the
	// placement spreads them.
	segmentsHosted = metrics.Gauge("cluster_segments_hosted",
		"Voucher segments this member hosts an activation of now.")
	placementShare = metrics.Gauge("cluster_placement_share",
		"Share (0..1) of a fixed sample of 4096 segment identities that this member would host under the current membership: the spread of the placement, 1/members when fair.")
	clusterMembers = metrics.Gauge("cluster_members",
		"Members of the cluster hosting segments, as this member sees them.")
	protoactorSuppressed = metrics.Counter("protoactor_log_suppressed_total",
		"protoactor-go warning and error lines not logged: repeats of a line already logged for the same event (the same message about the same member, each within a minute of the last).")
	remoteGrabs = metrics.CounterVec("cluster_remote_grabs_total",
		"Grabs this member sent to the member hosting their segment, by result (ok: an answer came back; failed: none did by the grab's deadline, answered UNAVAILABLE; resent: sent again to the segment's new host after the member it was sent to left).",
		"result")
	undecidedCalls = metrics.Counter("grab_undecided_calls_total",
		"Grab script calls that failed without an answer (Redis may still run them); their units, users and request ids stay off the database fallback until the segment claims a new fence.")
	leaseRefusals = metrics.Counter("segment_lease_refused_total",
		"Segment activations that could not take their Redlock lease in time (their grabs were answered UNAVAILABLE).")
	leaseLosses = metrics.Counter("segment_lease_lost_total",
		"Segment activations that stopped because their lease could not be extended.")
	userRateRefusals = metrics.Counter("user_rate_limit_refusals_total",
		"Grabs turned away by the per-user rate limit (RATE_USER_PER_SEC), which segment activations keep in memory; the limits shared in Redis count in rate_limit_refusals_total.")
	// saleMemoryAnswers and saleMemoryDrops show whether keyed grabs after
	// the sell-out are answered from an activation's proven record of the
	// sales (saleMemory) or looked up by the grab script.
	saleMemoryAnswers = metrics.Counter("grab_sale_memory_answers_total",
		"Keyed grabs answered from their activation's record of the sales, after a script call proved the record whole (no per-grab lookup in Redis).")
	saleMemoryDrops = metrics.Counter("grab_sale_memory_dropped_total",
		"Records of the sales an activation gave up (a call that may have sold unseen, a tally that disagreed, or the size bound); its keyed grabs go to the script from then on.")
)

// grabCodes are each code's series, looked up once here rather than by
// label on every grab (a hash and a lock per lookup), and so shown at 0
// from the start.
var grabCodes = map[domain.SeckillCode]struct {
	total    prometheus.Counter
	duration prometheus.Observer
}{}

func init() {
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
