package persistence

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// The Redis side of the log writers: a family of stream logs listed in a
// registry and read by one consumer group. Each method is one round trip
// (Claim and the lag sample one per log at most); the loop that drives
// them, its retries and its pacing belong to the persistence actor.

// Logs is one family of order logs: the registry listing them, their
// consumer group, and the prefix of the lease on a consumer's name.
type Logs struct {
	rdb         redis.UniversalClient
	registry    string
	group       string
	leasePrefix string
}

// NewLogs returns the family of logs listed in the set registry, read by
// group, whose consumers lease their names under leasePrefix. The
// service's families are NewOrderLogs and NewRedPacketLogs.
func NewLogs(rdb redis.UniversalClient, registry, group, leasePrefix string) *Logs {
	return &Logs{rdb: rdb, registry: registry, group: group, leasePrefix: leasePrefix}
}

// NewOrderLogs returns the vouchers' order logs.
func NewOrderLogs(rdb redis.UniversalClient) *Logs {
	return NewLogs(rdb, orderLogsKey, OrderLogGroup, orderLeasePrefix)
}

// NewRedPacketLogs returns the red packets' order logs.
func NewRedPacketLogs(rdb redis.UniversalClient) *Logs {
	return NewLogs(rdb, redPacketLogsKey, RedPacketLogGroup, redPacketLeasePrefix)
}

// List returns the logs registered now, sorted.
func (l *Logs) List(ctx context.Context) ([]string, error) {
	s, err := l.rdb.SMembers(ctx, l.registry).Result()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.registry, err)
	}
	sort.Strings(s)
	return s, nil
}

// ErrStaleList says a read met a log without its group: the groups were
// created again, and the logs must be listed again before the next read.
var ErrStaleList = errors.New("a log has no consumer group; listing the logs again")

// Read reads up to count entries of each of logs as consumer: id "0"
// re-reads the consumer's own pending entries, ">" new ones, waiting up to
// block for them (0: no wait). A log without its group gets it
// (EnsureGroups) and the read fails with ErrStaleList.
//
// One server reads every log in one XREADGROUP. A Redis Cluster refuses a
// command whose keys hash to different slots (CROSSSLOT), so there the
// logs are read one hash tag at a time (readSharded).
func (l *Logs) Read(ctx context.Context, consumer string, logs []string, id string, count int, block time.Duration) ([]domain.LogEntry, error) {
	if _, ok := l.rdb.(*redis.ClusterClient); ok {
		return l.readSharded(ctx, consumer, logs, id, count, block)
	}
	if block == 0 {
		block = -1 // no BLOCK argument
	}
	res, err := l.rdb.XReadGroup(ctx, l.readArgs(consumer, logs, id, count, block)).Result()
	return l.readResult(ctx, res, err)
}

// readArgs is XREADGROUP of logs from id.
func (l *Logs) readArgs(consumer string, logs []string, id string, count int, block time.Duration) *redis.XReadGroupArgs {
	args := make([]string, 0, 2*len(logs))
	args = append(args, logs...)
	for range logs {
		args = append(args, id)
	}
	return &redis.XReadGroupArgs{Group: l.group, Consumer: consumer, Streams: args, Count: int64(count), Block: block}
}

// readResult turns one XREADGROUP's reply into entries.
func (l *Logs) readResult(ctx context.Context, res []redis.XStream, err error) ([]domain.LogEntry, error) {
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if isNoGroup(err) {
			if err := l.EnsureGroups(ctx); err != nil {
				return nil, err
			}
			return nil, ErrStaleList
		}
		return nil, fmt.Errorf("xreadgroup: %w", err)
	}
	var out []domain.LogEntry
	for _, s := range res {
		out = appendEntries(out, s.Stream, s.Messages)
	}
	return out, nil
}

// clusterReadPoll is how often a read across a Redis Cluster's slots
// looks again for new entries while it waits out its block.
const clusterReadPoll = 25 * time.Millisecond

// readSharded reads logs on a Redis Cluster: one XREADGROUP per hash tag
// (a voucher's or red packet's logs share theirs, so their slot), all in
// one pipeline, which go-redis sends to every primary at once. A blocking
// XREADGROUP can wait on one slot only, so while nothing comes the read
// looks again every clusterReadPoll until block has passed: new orders
// reach the database that much later, never less surely.
func (l *Logs) readSharded(ctx context.Context, consumer string, logs []string, id string, count int, block time.Duration) ([]domain.LogEntry, error) {
	groups := map[string][]string{}
	var tags []string
	for _, s := range logs {
		t := hashTag(s)
		if _, ok := groups[t]; !ok {
			tags = append(tags, t)
		}
		groups[t] = append(groups[t], s)
	}
	deadline := time.Now().Add(block)
	for {
		pipe := l.rdb.Pipeline()
		reads := make([]*redis.XStreamSliceCmd, len(tags))
		for i, t := range tags {
			reads[i] = pipe.XReadGroup(ctx, l.readArgs(consumer, groups[t], id, count, -1))
		}
		_, _ = pipe.Exec(ctx) // each reply is checked below
		var out []domain.LogEntry
		for _, r := range reads {
			got, err := l.readResult(ctx, r.Val(), r.Err())
			if err != nil {
				// Entries read from other slots wait in the consumer's
				// pending list, which the caller re-reads after a failure.
				return nil, err
			}
			out = append(out, got...)
		}
		left := time.Until(deadline)
		if len(out) > 0 || left <= 0 || len(tags) == 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(left, clusterReadPoll)):
		}
	}
}

// hashTag is what Redis Cluster hashes of key: the part between the first
// "{" and the next "}" when it is not empty, else the whole key. Keys
// with the same tag are in the same slot.
func hashTag(key string) string {
	if _, rest, ok := strings.Cut(key, "{"); ok {
		if tag, _, ok := strings.Cut(rest, "}"); ok && tag != "" {
			return tag
		}
	}
	return key
}

// Claim takes over, for consumer, up to count entries that other
// consumers left pending for minIdle or longer.
func (l *Logs) Claim(ctx context.Context, consumer string, logs []string, minIdle time.Duration, count int) ([]domain.LogEntry, error) {
	var out []domain.LogEntry
	for _, s := range logs {
		start := "0-0"
		for len(out) < count {
			msgs, next, err := l.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
				Stream: s, Group: l.group, Consumer: consumer,
				MinIdle: minIdle, Start: start, Count: int64(count - len(out)),
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
	return out, nil
}

func appendEntries(out []domain.LogEntry, log string, msgs []redis.XMessage) []domain.LogEntry {
	for _, m := range msgs {
		out = append(out, domain.LogEntry{Log: log, ID: m.ID, Values: m.Values})
	}
	return out
}

// isNoGroup recognises Redis's NOGROUP error (a log without its group, or
// no log at all). go-redis has no typed error for it; HasErrorPrefix
// checks that err is a Redis error reply and reads its code.
func isNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// isBusyGroup recognises Redis's BUSYGROUP error: the group exists.
func isBusyGroup(err error) bool { return redis.HasErrorPrefix(err, "BUSYGROUP") }

// EnsureGroups creates missing consumer groups, and the log if it is
// missing, for the logs registered now (for the order log, a voucher's
// preheat creates both; this covers a log Redis lost or that was created
// otherwise). It reads the registry afresh: a writer's own list may
// predate a loss of Redis's data, and creating those logs again would
// leave empty, unregistered logs of vouchers Redis no longer knows.
func (l *Logs) EnsureGroups(ctx context.Context) error {
	logs, err := l.List(ctx)
	if err != nil {
		return err
	}
	for _, s := range logs {
		err := l.rdb.XGroupCreateMkStream(ctx, s, l.group, "0").Err()
		if err != nil && !isBusyGroup(err) {
			return fmt.Errorf("create group on %s: %w", s, err)
		}
	}
	return nil
}

// ackScript acknowledges and deletes entries of one log atomically: scripts/ack.lua.
var ackScript = newScript("ack")

// Ack acknowledges and deletes handled entries, one pipeline for the
// batch, so that a log holds exactly the entries not yet handled
// (reconciliation counts them).
func (l *Logs) Ack(ctx context.Context, batch []domain.LogEntry) error {
	ids := map[string][]string{}
	for _, e := range batch {
		ids[e.Log] = append(ids[e.Log], e.ID)
	}
	pipe := l.rdb.Pipeline()
	for s, list := range ids {
		args := make([]any, 0, 1+len(list))
		args = append(args, l.group)
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
		if err := ackScript.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("ack: load script: %w", err)
		}
		return l.Ack(ctx, batch)
	}
	return nil
}

// Sample reads the lengths, oldest entries and pending counts of logs in
// one pipeline.
func (l *Logs) Sample(ctx context.Context, logs []string) (domain.LogSample, error) {
	pipe := l.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(logs))
	firsts := make([]*redis.XMessageSliceCmd, len(logs))
	pending := make([]*redis.XPendingCmd, len(logs))
	for i, s := range logs {
		lens[i] = pipe.XLen(ctx, s)
		firsts[i] = pipe.XRangeN(ctx, s, "-", "+", 1)
		pending[i] = pipe.XPending(ctx, s, l.group)
	}
	_, _ = pipe.Exec(ctx) // each reply is checked below: a log without its group yet fails alone
	var out domain.LogSample
	now := time.Now()
	oldest := now
	for i := range logs {
		if err := firstErr(lens[i].Err(), firsts[i].Err()); err != nil {
			return domain.LogSample{}, fmt.Errorf("sample %s: %w", logs[i], err)
		}
		out.Entries += lens[i].Val()
		if msgs := firsts[i].Val(); len(msgs) > 0 {
			if t, ok := entryTime(msgs[0].ID); ok && t.Before(oldest) {
				oldest = t
			}
		}
		if pending[i].Err() == nil {
			out.Pending += pending[i].Val().Count
		}
	}
	out.Age = now.Sub(oldest)
	return out, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
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

// Length counts the entries in every registered log: those not yet
// handled.
func (l *Logs) Length(ctx context.Context) (int64, error) {
	logs, err := l.List(ctx)
	if err != nil {
		return 0, err
	}
	pipe := l.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(logs))
	for i, s := range logs {
		lens[i] = pipe.XLen(ctx, s)
	}
	if len(logs) > 0 {
		_, _ = pipe.Exec(ctx) // checked below
	}
	var total int64
	for i, c := range lens {
		if err := c.Err(); err != nil {
			return 0, fmt.Errorf("length of %s: %w", logs[i], err)
		}
		total += c.Val()
	}
	return total, nil
}

// InFlight counts a voucher's orders accepted in Redis but not yet
// committed to the database.
func InFlight(ctx context.Context, rdb redis.UniversalClient, voucherID int64) (int64, error) {
	n, err := rdb.XLen(ctx, LogKey(voucherID)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("order log length of voucher %d: %w", voucherID, err)
	}
	return n, nil
}

// removeDeadConsumerScript deletes a log's idle consumers that hold nothing: scripts/remove_dead_consumer.lua.
var removeDeadConsumerScript = newScript("remove_dead_consumer")

// RemoveDeadConsumers deletes, from every log's group, consumers other
// than self that hold nothing and have not read for idle: names of nodes
// that are gone (or were renamed), which would otherwise pile up in the
// groups forever. Deleting a live consumer by mistake costs nothing: it
// holds no entry, and its next read creates it again. Errors only
// postpone it; it returns how many it deleted.
func (l *Logs) RemoveDeadConsumers(ctx context.Context, self string, logs []string, idle time.Duration) int {
	bound := strconv.FormatInt(idle.Milliseconds(), 10)
	n := 0
	for _, s := range logs {
		removed, err := removeDeadConsumerScript.Run(ctx, l.rdb, []string{s}, self, bound, l.group).Int()
		if err != nil {
			continue
		}
		n += removed
	}
	return n
}
