package actors

import (
	"sync/atomic"
	"time"
)

// loadMeter is the node's grab load as the GraphQL layer's load shedder
// reads it: how many grabs wait for an answer on this node, and how long
// grabs took lately. Both are kept with atomics on the grab path (one add
// per enqueue and answer, one compare-and-swap per grab) so that reading
// them costs the shedder nothing and the hot path next to nothing.
type loadMeter struct {
	queued atomic.Int64
	// latency is an exponentially weighted moving average of grab
	// durations in nanoseconds; observed is when the last grab ended, so
	// that an old average does not keep the node "slow" once grabs stop.
	latency  atomic.Int64
	observed atomic.Int64
}

// latencyWeight is the weight of the newest grab in the average (1/8):
// a few hundred grabs a second move it within tens of milliseconds,
// while one slow grab does not.
const latencyWeight = 8

// latencyStale is how long an average stays meaningful without a new
// grab: after it, the node reports no latency (the queue depth still
// shows grabs that are stuck rather than finished).
const latencyStale = time.Second

func (m *loadMeter) observe(d time.Duration, now time.Time) {
	for {
		old := m.latency.Load()
		next := old + (int64(d)-old)/latencyWeight
		if old == 0 {
			next = int64(d)
		}
		if m.latency.CompareAndSwap(old, next) {
			break
		}
	}
	m.observed.Store(now.UnixNano())
}

// Load reports the grabs waiting for an answer on this node (queued in a
// voucher actor or in a script call) and the recent average duration of a
// grab, zero when no grab ended in the last second. The GraphQL layer
// sheds non-core operations while either is over its threshold.
func (r *Router) Load() (queued int, latency time.Duration) {
	if time.Since(time.Unix(0, r.load.observed.Load())) <= latencyStale {
		latency = time.Duration(r.load.latency.Load())
	}
	return int(r.load.queued.Load()), latency
}

// Answered counts the grabs this router has answered since it started;
// the shutdown log reports how many were answered while draining.
func (r *Router) Answered() uint64 { return r.answered.Load() }
