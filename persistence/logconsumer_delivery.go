package persistence

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// The Redis side of a LogConsumer: listing the family's logs, reading,
// claiming, consumer groups, acknowledging, and the lag.

// list returns the logs registered now, sorted.
func (c *LogConsumer) list(ctx context.Context) ([]string, error) {
	s, err := c.rdb.SMembers(ctx, c.fam.Registry).Result()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", c.fam.Registry, err)
	}
	sort.Strings(s)
	return s, nil
}

// read reads entries of all logs: id "0" re-reads this consumer's own
// pending entries, ">" new ones (blocking up to block).
func (c *LogConsumer) read(ctx context.Context, logs []string, id string, block time.Duration) ([]LogEntry, error) {
	args := make([]string, 0, 2*len(logs))
	args = append(args, logs...)
	for range logs {
		args = append(args, id)
	}
	if block == 0 {
		block = -1 // no BLOCK argument
	}
	res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: c.fam.Group, Consumer: c.opts.Consumer, Streams: args, Count: int64(c.opts.Batch), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if isNoGroup(err) {
			if err := c.ensureGroups(ctx); err != nil {
				return nil, err
			}
			return nil, errStaleList
		}
		return nil, fmt.Errorf("xreadgroup: %w", err)
	}
	var out []LogEntry
	for _, s := range res {
		out = appendEntries(out, s.Stream, s.Messages)
	}
	return out, nil
}

// reclaim runs claim, under the Reclaim singleton when there is one.
func (c *LogConsumer) reclaim(ctx context.Context, logs []string) ([]LogEntry, error) {
	if c.opts.Reclaim == nil {
		return c.claim(ctx, logs)
	}
	var out []LogEntry
	_, err := c.opts.Reclaim(ctx, func(ctx context.Context) error {
		var err error
		out, err = c.claim(ctx, logs)
		return err
	})
	return out, err
}

// claim takes over entries that other consumers left pending too long.
func (c *LogConsumer) claim(ctx context.Context, logs []string) ([]LogEntry, error) {
	var out []LogEntry
	for _, s := range logs {
		start := "0-0"
		for len(out) < c.opts.Batch {
			msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
				Stream: s, Group: c.fam.Group, Consumer: c.opts.Consumer,
				MinIdle: c.opts.ClaimIdle, Start: start, Count: int64(c.opts.Batch - len(out)),
			}).Result()
			if err != nil {
				if isNoGroup(err) {
					break
				}
				return nil, fmt.Errorf("xautoclaim %s: %w", s, err)
			}
			out = appendEntries(out, s, msgs)
			if next == "0-0" || len(msgs) == 0 {
				break
			}
			start = next
		}
	}
	if len(out) > 0 {
		c.log.InfoContext(ctx, c.fam.Name+" took over entries left by another consumer", "entries", len(out))
	}
	return out, nil
}

func appendEntries(out []LogEntry, log string, msgs []redis.XMessage) []LogEntry {
	for _, m := range msgs {
		out = append(out, LogEntry{Log: log, ID: m.ID, Values: m.Values})
	}
	return out
}

// isNoGroup recognises Redis's NOGROUP error (a log without its group, or
// no log at all). go-redis has no typed error for it; HasErrorPrefix
// checks that err is a Redis error reply and reads its code.
func isNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// isBusyGroup recognises Redis's BUSYGROUP error: the group exists.
func isBusyGroup(err error) bool { return redis.HasErrorPrefix(err, "BUSYGROUP") }

// errStaleList says a read met a log without its group: the logs are
// listed again before the next read.
var errStaleList = errors.New("a log has no consumer group; listing the logs again")

// ensureGroups creates missing consumer groups, and the log if it is
// missing, for the logs registered now (for the order log, a voucher's
// preheat creates both; this covers a log Redis lost or that was created
// otherwise). It reads the registry afresh: the consumer's own list may
// predate a loss of Redis's data, and creating those logs again would
// leave empty, unregistered logs of vouchers Redis no longer knows.
func (c *LogConsumer) ensureGroups(ctx context.Context) error {
	logs, err := c.list(ctx)
	if err != nil {
		return err
	}
	for _, s := range logs {
		err := c.rdb.XGroupCreateMkStream(ctx, s, c.fam.Group, "0").Err()
		if err != nil && !isBusyGroup(err) {
			return fmt.Errorf("create group on %s: %w", s, err)
		}
	}
	return nil
}

// ackScript acknowledges and deletes entries of one log atomically: scripts/ack.lua.
var ackScript = newScript("ack")

// ack acknowledges and deletes handled entries, so that a log holds
// exactly the entries not yet handled (reconciliation counts them).
func (c *LogConsumer) ack(ctx context.Context, batch []LogEntry) error {
	ids := map[string][]string{}
	for _, e := range batch {
		ids[e.Log] = append(ids[e.Log], e.ID)
	}
	pipe := c.rdb.Pipeline()
	for s, list := range ids {
		args := make([]any, 0, 1+len(list))
		args = append(args, c.fam.Group)
		for _, id := range list {
			args = append(args, id)
		}
		ackScript.Run(ctx, pipe, []string{s}, args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// A pipelined EVALSHA cannot fall back to EVAL by itself.
		if !isNoScript(err) {
			return fmt.Errorf("ack: %w", err)
		}
		if err := ackScript.Load(ctx, c.rdb).Err(); err != nil {
			return fmt.Errorf("ack: load script: %w", err)
		}
		return c.ack(ctx, batch)
	}
	return nil
}

// updateLag samples the family's lag gauges, one pipeline for all logs. A
// failed sample leaves the gauges as they were: the next one corrects them.
func (c *LogConsumer) updateLag(ctx context.Context, logs []string) {
	if c.fam.Lag == nil && c.fam.LagSeconds == nil && c.fam.Pending == nil {
		return
	}
	pipe := c.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(logs))
	firsts := make([]*redis.XMessageSliceCmd, len(logs))
	pending := make([]*redis.XPendingCmd, len(logs))
	for i, s := range logs {
		lens[i] = pipe.XLen(ctx, s)
		firsts[i] = pipe.XRangeN(ctx, s, "-", "+", 1)
		pending[i] = pipe.XPending(ctx, s, c.fam.Group)
	}
	_, _ = pipe.Exec(ctx) // each reply is checked below: a log without its group yet fails alone
	var lag, pend int64
	now := time.Now()
	oldest := now
	for i := range logs {
		if lens[i].Err() != nil || firsts[i].Err() != nil {
			return
		}
		lag += lens[i].Val()
		if msgs := firsts[i].Val(); len(msgs) > 0 {
			if t, ok := entryTime(msgs[0].ID); ok && t.Before(oldest) {
				oldest = t
			}
		}
		if pending[i].Err() == nil {
			pend += pending[i].Val().Count
		}
	}
	setGauge(c.fam.Lag, float64(lag))
	setGauge(c.fam.Pending, float64(pend))
	setGauge(c.fam.LagSeconds, now.Sub(oldest).Seconds())
}

func setGauge(g prometheus.Gauge, v float64) {
	if g != nil {
		g.Set(v)
	}
}

// entryTime is when an entry was appended: the milliseconds part of its
// id, which Redis takes from its clock.
func entryTime(id string) (time.Time, bool) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}

// WaitDrained waits until every registered log is empty (every entry
// handled and acknowledged), polling, or until ctx ends.
func (c *LogConsumer) WaitDrained(ctx context.Context) error {
	for {
		logs, err := c.list(ctx)
		if err != nil {
			return err
		}
		var total int64
		for _, s := range logs {
			n, err := c.rdb.XLen(ctx, s).Result()
			if err != nil {
				return fmt.Errorf("length of %s: %w", s, err)
			}
			total += n
		}
		if total == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d entries not yet handled: %w", total, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
