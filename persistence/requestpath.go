package persistence

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// Request-path Redis: short deadlines. A stalled Redis (process stopped,
// sockets open) answers nothing and closes nothing, so only deadlines end
// a call; the circuit breaker in front of the request-path client
// (internal/breaker, installed as a go-redis hook by node) then stops
// sending calls at all.

// Defaults of the request-path client.
const (
	// RequestTimeoutDefault bounds one request-path Redis call, dial, read
	// and write each: a grab batch's script call takes a few ms, and a grab
	// must be answered UNAVAILABLE within 500 ms when Redis stalls.
	RequestTimeoutDefault = 200 * time.Millisecond
)

// notSent marks err as domain.ErrNotSent when it proves that the call
// never ran: the breaker refused it (its error wraps domain.ErrNotSent),
// the connection was refused, no pooled connection came free in time, or
// a Redis Cluster node refused it before running it (clusterRefusal).
// Any other failure (a timeout, a reset) may have run the call.
func notSent(err error) error {
	if err == nil || errors.Is(err, domain.ErrNotSent) ||
		!errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, redis.ErrPoolTimeout) && !clusterRefusal(err) {
		return err
	}
	return fmt.Errorf("%w: %w", domain.ErrNotSent, err)
}

// clusterRefusal recognises the replies of a Redis Cluster node that did
// not run a call: the slot is served elsewhere (MOVED, ASK), its keys are
// being moved (TRYAGAIN), or the cluster cannot serve it now (CLUSTERDOWN,
// during a failover). They prove the call did not run only because the
// request-path clients make one attempt (RequestTuning): after a retry
// the last reply says nothing of an earlier attempt that timed out.
func clusterRefusal(err error) bool {
	for _, code := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, code) {
			return true
		}
	}
	return false
}

// RequestClientOptions returns opts tuned for request paths (RequestTuning).
func RequestClientOptions(opts redis.Options, timeout time.Duration) *redis.Options {
	o, _ := SingleTarget(opts).Options(RequestTuning(timeout))
	return o
}

// BackgroundClientOptions returns opts for the background loops
// (BackgroundTuning).
func BackgroundClientOptions(opts redis.Options) *redis.Options {
	o, _ := SingleTarget(opts).Options(BackgroundTuning())
	return o
}

// unavailable marks err as UNAVAILABLE for clients when Redis did not
// answer (breaker open, timeout, connection refused), keeping the cause
// for the log; Redis's own error replies stay internal errors, but for a
// Redis Cluster's refusals during a failover or a resharding.
func unavailable(err error) error {
	var reply redis.Error
	if err == nil || errors.As(err, &reply) && !clusterRefusal(err) {
		return err
	}
	return fmt.Errorf("%w: %w", domain.ErrLiveStockUnavailable, err)
}

// redisEvicts is the error of a script that found the stock Redis's
// maxmemory-policy evicting keys (serverRunLua): it wrote nothing, and
// nothing is loaded or sold until the policy is noeviction again, because
// an evicted request id or order log breaks the promises without a trace.
// token is the script's '!<policy>' (nil where the script gave none).
// The error is UNAVAILABLE to the caller and proves the call changed
// nothing (domain.ErrNotSent).
func redisEvicts(token any) error {
	s, _ := token.(string)
	policy := ParseRunToken(s).Evicting
	if policy == "" {
		policy = "other than noeviction"
	}
	return fmt.Errorf("%w: %w", domain.ErrNotSent, &domain.Error{Code: domain.CodeUnavailable,
		Message: "redis evicts keys (maxmemory-policy " + policy + "): nothing is sold until it is noeviction"})
}
