package actors

import "time"

// userRates is a segment activation's per-user grab rate limit
// (RATE_USER_PER_SEC), kept in the activation's memory with no Redis
// call: every grab of a user for a voucher goes to the user's one segment
// (hash(user) mod S), and the segment has one activation under its lease,
// so this memory sees all of that user's grabs for the voucher, on every
// node. It is the generic cell rate algorithm as redis_rate computes it
// (redis_rate.PerSecond: a burst of one second's rate, then one grab per
// 1/rate), so a client sees the same admissions and retryAfterMs as when
// the limit lived in Redis. What it gives up, written down in
// docs/DECISIONS.md ("Rate limits: redis_rate per batch; the per-user
// rate limit in the segment's memory"):
// the limit is per user and voucher rather than per user across
// vouchers, and a new activation (a member joins or dies) starts every
// user with a full burst.
type userRates struct {
	interval int64 // nanoseconds between grabs at the steady rate
	burst    int64 // how far ahead of now a user's arrival time may run
	// tat is each recent user's theoretical arrival time (unix ns); a user
	// whose time has passed is as a new one and is forgotten by sweep.
	tat   map[int64]int64
	swept int64
}

// newUserRates returns the limit for perSec grabs a second, nil when off.
func newUserRates(perSec int) *userRates {
	if perSec <= 0 {
		return nil
	}
	interval := int64(time.Second) / int64(perSec)
	return &userRates{interval: interval, burst: interval * int64(perSec), tat: map[int64]int64{}}
}

// take admits one grab of user at now (unix ns) and returns 0, or returns
// how long until the user may grab again and admits nothing.
func (u *userRates) take(user, now int64) time.Duration {
	next := max(u.tat[user], now) + u.interval
	if wait := next - now - u.burst; wait > 0 {
		return time.Duration(wait)
	}
	u.tat[user] = next
	u.sweep(now)
	return 0
}

// sweep forgets, at most once a second, the users whose arrival time has
// passed, so that the map holds about the users of the last second rather
// than everyone who ever grabbed.
func (u *userRates) sweep(now int64) {
	if now-u.swept < int64(time.Second) {
		return
	}
	u.swept = now
	for user, t := range u.tat {
		if t <= now {
			delete(u.tat, user)
		}
	}
}
