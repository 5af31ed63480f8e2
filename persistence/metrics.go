package persistence

import (
	"context"
	"errors"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"flashsale/internal/metrics"
)

// The persistence metrics, in one place: namespaced and low-cardinality
// (labels only from short fixed sets: a dead letter's reason, a store, a grab code).
var (
	ordersPersisted = metrics.Counter("orders_persisted_total",
		"Orders inserted into tb_voucher_order by the order writer.")
	ordersAdopted = metrics.Counter("orders_adopted_total",
		"Orders sold before Redis lost a voucher and reloaded it from the database, put back into the reloaded stock.")
	shadowAppended = metrics.Counter("orders_reappended_total",
		"Orders answered OK that Redis lost before any order writer read them, appended to the order log again from the selling node's copy.")
	ordersDead = metrics.CounterVec("orders_dead_total",
		"Order-log entries the database refused for good, kept in tb_order_dead_letter, by reason.",
		"reason")
	writeBatchSize = metrics.Histogram("order_write_batch_size",
		"Order-log entries handled by one attempt of the order writer.",
		prometheus.ExponentialBuckets(1, 2, 10))
	writeDuration = metrics.Histogram("order_write_duration_seconds",
		"Time of one attempt of the order writer to commit a batch (transaction included).",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5})
	// scriptDuration times the Lua script calls of the hot path: the grab
	// batch, an activation's claim, and a batch's pipelined rate limits.
	scriptDuration = metrics.HistogramVec("redis_script_duration_seconds",
		"Time of one Redis script call (or pipeline of them), by script: grab, claim, rate_limit, red_packet_grab.",
		[]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5}, "script")
	// The script timers, looked up once rather than by label per call.
	grabScriptDuration      = scriptDuration.WithLabelValues("grab")
	claimScriptDuration     = scriptDuration.WithLabelValues("claim")
	rateLimitScriptDuration = scriptDuration.WithLabelValues("rate_limit")
	redPacketScriptDuration = scriptDuration.WithLabelValues("red_packet_grab")
	redisErrors             = metrics.CounterVec("redis_errors_total",
		"Redis commands that failed (not counting a missing key or a script to be loaded), by class: script, stream, ping, other.",
		"op")
	rateLimited = metrics.CounterVec("rate_limit_refusals_total",
		"Grabs or requests turned away by a rate limit shared in Redis, by the limit: ip, voucher, ip_request (before parsing), cost (a caller's budget of request cost). The per-user limit counts in user_rate_limit_refusals_total.",
		"kind")
	loadsRebuilt = metrics.CounterVec("redis_loads_rebuilt_total",
		"Loads found in Redis but not verified on its current server (it restarted or failed over, and may have gone back in time), rebuilt from the database and the order log, by kind: voucher, red_packet.",
		"kind")
	// ackWaits counts the acknowledgements that batches waited for
	// (REDIS_ACK_REPLICAS): a rising "short" is replicas that lag or are
	// gone, each such batch answered UNAVAILABLE and settled by request id.
	ackWaits = metrics.CounterVec("redis_ack_waits_total",
		"Acknowledgements (WAIT or WAITAOF, REDIS_ACK_REPLICAS) that a batch's script call waited for, by result: acknowledged, short (fewer replicas or fsyncs than required within REDIS_ACK_TIMEOUT, or WAITAOF refused), failed (the wait itself failed).",
		"result")
	fallbackGrabs = metrics.CounterVec("fallback_grab_total",
		"Grabs answered by the database fallback while Redis was down, by outcome.",
		"code")
)

func init() {
	// Present at 0 from the start, so that a dashboard tells "none" from
	// "not reported".
	for _, op := range []string{"script", "stream", "ping", "other"} {
		redisErrors.WithLabelValues(op)
	}
	for _, reason := range []string{DeadOverStock, DeadOverUserLimit, DeadIDCollision, DeadDuplicateRequest, DeadLostLoad, DeadUnknownVoucher, DeadMalformed, DeadRefused} {
		ordersDead.WithLabelValues(reason)
	}
	for _, kind := range []string{"ip", "voucher", "ip_request"} {
		rateLimited.WithLabelValues(kind)
	}
	for _, kind := range []string{"voucher", "red_packet"} {
		loadsRebuilt.WithLabelValues(kind)
	}
}

// RedisErrors is a go-redis hook that counts failed commands by class in
// flashsale_redis_errors_total; main adds it to every client.
type RedisErrors struct{}

var _ redis.Hook = RedisErrors{}

// DialHook implements redis.Hook.
func (RedisErrors) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (RedisErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		countRedisError(cmd.Name(), err) // cmd.Err() is set after the hooks return
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (RedisErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			countRedisError(c.Name(), c.Err())
		}
		return err
	}
}

// countRedisError counts cmd's error unless it is an answer rather than a
// failure: a missing key (redis.Nil), NOSCRIPT (the caller loads the script
// and calls again), or a caller that went away (context.Canceled: a
// blocking read ended by shutdown). A deadline that passed is counted: it
// is a Redis too slow to answer. The connection handshake's optional
// commands (HELLO, CLIENT SETINFO, CLIENT MAINT_NOTIFICATIONS), which an
// older Redis refuses and go-redis then does without, are not counted.
func countRedisError(name string, err error) {
	if err == nil || errors.Is(err, redis.Nil) || isNoScript(err) || errors.Is(err, context.Canceled) {
		return
	}
	if name = strings.ToLower(name); name == "hello" || name == "client" {
		return
	}
	redisErrors.WithLabelValues(redisOpClass(name)).Inc()
}

// redisOpClass maps a command to one of a few classes, the label's whole
// set: the scripts of the hot path, the order log's stream commands, the
// health probes, and the rest.
func redisOpClass(name string) string {
	switch {
	case strings.HasPrefix(name, "eval"), strings.HasPrefix(name, "script"), strings.HasPrefix(name, "fcall"):
		return "script"
	case strings.HasPrefix(name, "x"):
		return "stream"
	case name == "ping":
		return "ping"
	}
	return "other"
}
