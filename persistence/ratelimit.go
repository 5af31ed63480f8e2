package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// RateLimits are the limits of the configuration that several segments or
// nodes draw on together (RATE_VOUCHER_PER_SEC, RATE_IP_PER_SEC),
// enforced with redis_rate's GCRA so that every node shares them. A zero
// rate switches that limit off. The per-user limit (RATE_USER_PER_SEC)
// needs no Redis: a user's grabs for a voucher all reach one segment
// activation, which counts them in memory (actors.Options.UserRate).
type RateLimits struct {
	rdb               redis.UniversalClient
	limiter           *redis_rate.Limiter // for single checks (AllowIP)
	perVoucher, perIP redis_rate.Limit
}

// NewRateLimits returns the limits; rates are per second.
func NewRateLimits(rdb redis.UniversalClient, perVoucher, perIP int) *RateLimits {
	lim := func(rate int) redis_rate.Limit {
		if rate <= 0 {
			return redis_rate.Limit{}
		}
		return redis_rate.PerSecond(rate)
	}
	return &RateLimits{rdb: rdb, limiter: redis_rate.NewLimiter(rdb), perVoucher: lim(perVoucher), perIP: lim(perIP)}
}

// Enabled reports whether any limit is on.
func (l *RateLimits) Enabled() bool {
	return l != nil && !(l.perVoucher.IsZero() && l.perIP.IsZero())
}

// IPEnabled reports whether the per-IP limit is on.
func (l *RateLimits) IPEnabled() bool { return l != nil && !l.perIP.IsZero() }

// AllowIP counts one request from ip against the per-IP limit (the same
// budget grabs from that IP draw on, in Admit) and returns 0 if it is
// admitted, or how long to wait before retrying.
func (l *RateLimits) AllowIP(ctx context.Context, ip string) (time.Duration, error) {
	if !l.IPEnabled() || ip == "" {
		return 0, nil
	}
	res, err := l.limiter.Allow(ctx, rateIPKey(ip), l.perIP)
	if err != nil {
		return 0, fmt.Errorf("rate limit ip %s: %w", ip, err)
	}
	if res.Allowed == 0 {
		rateLimited.WithLabelValues("ip_request").Inc()
		return max(res.RetryAfter, time.Millisecond), nil
	}
	return 0, nil
}

// Admit checks a batch of grabs of one voucher against every limit in ONE
// pipelined round trip and returns, per grab, 0 if admitted or how long to
// wait before retrying. The voucher limit admits, in batch order, as many of
// the grabs the IP limit lets through as it allows.
//
// redis_rate runs one script per key and reads its reply at once; to
// pipeline them we run the limiter twice: a recording pass collects the
// script calls it would make, one pipeline executes them, and a replay pass
// feeds each reply back so that redis_rate itself parses it.
func (l *RateLimits) Admit(ctx context.Context, voucherID int64, checks []domain.RateCheck) ([]time.Duration, error) {
	out := make([]time.Duration, len(checks))
	if !l.Enabled() || len(checks) == 0 {
		return out, nil
	}
	type limitCall struct {
		grab  int // -1: the voucher's AllowAtMost for the whole batch
		key   string
		limit redis_rate.Limit
		kind  string // the metric's label: ip or voucher
	}
	var calls []limitCall
	for i, c := range checks {
		if !l.perIP.IsZero() && c.IP != "" {
			calls = append(calls, limitCall{i, rateIPKey(c.IP), l.perIP, "ip"})
		}
	}
	if !l.perVoucher.IsZero() {
		calls = append(calls, limitCall{-1, rateVoucherKey(voucherID), l.perVoucher, "voucher"})
	}
	run := func(lim redis_rate.Limiter, c limitCall) (*redis_rate.Result, error) {
		if c.grab < 0 {
			return lim.AllowAtMost(ctx, c.key, c.limit, len(checks))
		}
		return lim.Allow(ctx, c.key, c.limit)
	}

	rec := &recorder{}
	for _, c := range calls {
		_, _ = run(*redis_rate.NewLimiter(rec), c)
	}
	if len(rec.calls) != len(calls) {
		return nil, fmt.Errorf("rate limits: recorded %d script calls for %d limits", len(rec.calls), len(calls))
	}
	began := time.Now()
	defer func() { rateLimitScriptDuration.Observe(time.Since(began).Seconds()) }()
	pipe := l.rdb.Pipeline()
	replies := make([]*redis.Cmd, len(rec.calls))
	for i, c := range rec.calls {
		replies[i] = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !anyNoScript(replies) {
		return nil, fmt.Errorf("rate limits: %w", err)
	}
	if anyNoScript(replies) {
		// Redis does not have the scripts yet (first use, restart, SCRIPT
		// FLUSH): send those calls again with their source, which also
		// caches them for the next batches.
		pipe := l.rdb.Pipeline()
		for i, c := range rec.calls {
			if isNoScript(replies[i].Err()) {
				replies[i] = pipe.Eval(ctx, c.src, c.keys, c.args...)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("rate limits: %w", err)
		}
	}
	var voucher *redis_rate.Result
	for i, c := range calls {
		res, err := run(*redis_rate.NewLimiter(&replayer{rdb: l.rdb, reply: replies[i]}), c)
		if err != nil {
			return nil, fmt.Errorf("rate limit %s: %w", c.key, err)
		}
		if c.grab < 0 {
			voucher = res
		} else if res.Allowed == 0 {
			if out[c.grab] == 0 { // a grab refused by two limits counts once, for the first
				rateLimited.WithLabelValues(c.kind).Inc()
			}
			out[c.grab] = max(out[c.grab], res.RetryAfter, time.Millisecond)
		}
	}
	if voucher != nil {
		// The voucher's slots go, in order, to the grabs the other limits
		// admitted (a slot taken for a grab turned away is not reused).
		slots := voucher.Allowed
		for g := range out {
			switch {
			case out[g] > 0:
			case slots > 0:
				slots--
			default:
				rateLimited.WithLabelValues("voucher").Inc()
				out[g] = max(voucher.RetryAfter, time.Millisecond)
			}
		}
	}
	return out, nil
}

func anyNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if isNoScript(c.Err()) {
			return true
		}
	}
	return false
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

var (
	// errNotYet makes go-redis's Script.Run fall back from EVALSHA to EVAL
	// in the recording pass, so that the recorder sees the source too.
	errNotYet   = redis.ErrNoScript
	errRecorded = errors.New("recorded")
)

type scriptCall struct {
	sha, src string
	keys     []string
	args     []any
}

// recorder is a redis_rate backend that only notes the script calls.
type recorder struct{ calls []scriptCall }

func (r *recorder) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	r.calls = append(r.calls, scriptCall{sha: sha, keys: keys, args: args})
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errNotYet)
	return cmd
}

func (r *recorder) Eval(ctx context.Context, src string, _ []string, _ ...any) *redis.Cmd {
	if n := len(r.calls); n > 0 {
		r.calls[n-1].src = src
	}
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errRecorded)
	return cmd
}
func (r *recorder) EvalRO(ctx context.Context, s string, k []string, a ...any) *redis.Cmd {
	return r.Eval(ctx, s, k, a...)
}
func (r *recorder) EvalShaRO(ctx context.Context, s string, k []string, a ...any) *redis.Cmd {
	return r.Eval(ctx, s, k, a...)
}
func (r *recorder) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	cmd := redis.NewBoolSliceCmd(ctx)
	cmd.SetErr(errRecorded)
	return cmd
}
func (r *recorder) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx)
	cmd.SetErr(errRecorded)
	return cmd
}
func (r *recorder) Del(ctx context.Context, _ ...string) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx)
	cmd.SetErr(errRecorded)
	return cmd
}

// replayer answers redis_rate's EVALSHA with the pipelined reply; if Redis
// had lost the script (NOSCRIPT), redis_rate falls back to EVAL, which
// goes to Redis directly.
type replayer struct {
	recorder
	rdb   redis.UniversalClient
	reply *redis.Cmd
}

func (r *replayer) EvalSha(context.Context, string, []string, ...any) *redis.Cmd { return r.reply }

func (r *replayer) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.rdb.Eval(ctx, script, keys, args...)
}
