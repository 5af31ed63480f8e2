package httpapi

import (
	"net/netip"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"flashsale/domain"
)

// floodShedder is the in-process per-IP limit (SHED_IP_PER_SEC): a token
// bucket per client key (domain.ClientKey: an IPv4 address, an IPv6
// /64), refilled at rate per second up to burst,
// kept in memory only. It needs no Redis round trip, so it holds when
// Redis is slow or down and costs a map lookup; it is per node, so a
// cluster of N nodes admits up to N times the rate from one address
// (RATE_IP_PER_SEC is the cluster-wide limit). Every request pays it,
// grabs too: a flood of grabs answered from memory is cheap for the
// actor but not for the JSON, token and GraphQL work in front of it.
type floodShedder struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu sync.Mutex
	// buckets is bounded: an address that has been quiet long enough to
	// be evicted had a full bucket anyway, so forgetting it costs nothing.
	// A flood from more addresses than the cache holds evicts buckets
	// early and so admits more; the cache is sized for far more addresses
	// than one node serves at once.
	buckets *lru.Cache[netip.Addr, *bucket]
}

type bucket struct {
	tokens float64
	at     time.Time
}

// FloodPerSecDefault is SHED_IP_PER_SEC's default: what one client
// address may send one node a second, after a burst of two seconds'
// worth. A shop's frontend sends a few operations when a page opens and
// a grab or two a second while a sale runs (RATE_USER_PER_SEC caps a
// user at 10), so an office or a home network behind one NAT with a few
// hundred shoppers stays well under it; four clients of one address once
// ran a trivial query 5,384 times a second. A proxy or load balancer in
// front puts every client behind one address: set 0 there, as for
// CONN_PER_IP_PER_SEC.
const FloodPerSecDefault = 1000

// floodBuckets bounds the addresses remembered (about 100 bytes each).
const floodBuckets = 65536

// newFloodShedder returns nil (no limit) for perSec <= 0. The burst is two
// seconds' worth, so a client that pauses may send a short run at once.
func newFloodShedder(perSec int) *floodShedder {
	if perSec <= 0 {
		return nil
	}
	c, _ := lru.New[netip.Addr, *bucket](floodBuckets) // errors only for size <= 0
	return &floodShedder{rate: float64(perSec), burst: 2 * float64(perSec), now: time.Now, buckets: c}
}

// allow takes one token from the bucket of ip's client key, or reports
// how long until one is there.
func (f *floodShedder) allow(ip string) (bool, time.Duration) {
	key := domain.ParseClientKey(ip)
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.buckets.Get(key)
	if !ok {
		b = &bucket{tokens: f.burst, at: now}
		f.buckets.Add(key, b)
	}
	b.tokens = f.level(b, now)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, f.until(b.tokens)
}

// refusing reports whether key's bucket is empty now, and how long until
// it has a token, taking nothing and changing nothing: what allow would
// answer, for a refusal made before anything else is read (refusalEdge).
func (f *floodShedder) refusing(key netip.Addr) (time.Duration, bool) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.buckets.Peek(key)
	if !ok {
		return 0, false
	}
	if tokens := f.level(b, now); tokens < 1 {
		return f.until(tokens), true
	}
	return 0, false
}

// level is b's tokens at now.
func (f *floodShedder) level(b *bucket, now time.Time) float64 {
	return min(f.burst, b.tokens+now.Sub(b.at).Seconds()*f.rate)
}

// until is how long a bucket of tokens (fewer than 1) takes to hold one.
func (f *floodShedder) until(tokens float64) time.Duration {
	return time.Duration((1 - tokens) / f.rate * float64(time.Second))
}
