package persistence

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"
)

var (
	redPacketLogLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "flashsale", Name: "red_packet_log_lag",
		Help: "Grabbed packets in the red-packet order logs, not yet in the database.",
	})
	redPacketWriteErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "flashsale", Name: "red_packet_write_errors_total",
		Help: "Failed attempts of the red-packet writer (each is retried).",
	})
)

func init() { prometheus.MustRegister(redPacketLogLag, redPacketWriteErrors) }

// RedPacketWriter moves grabbed packets from the red packets' order logs
// into tb_red_packet_grab. It is a second family of the LogConsumer (the
// order writer is the first): the consumer reads, claims, retries,
// dead-letters and acknowledges; the writer only inserts a batch with one
// multi-row INSERT ... ON CONFLICT (red_packet_id, seq) DO NOTHING, so a
// replay after a crash is a no-op and every grab lands exactly once.
type RedPacketWriter struct {
	db        *bun.DB
	rdb       redis.UniversalClient
	log       *slog.Logger
	attempt   time.Duration
	consumer  *LogConsumer
	persisted atomic.Int64
}

var (
	_ BatchHandler   = (*RedPacketWriter)(nil)
	_ DeadLetterSink = (*RedPacketWriter)(nil)
)

// redPacketLeasePrefix prefixes the red-packet writer's consumer name in
// the key of its lease: the order writer of the same node uses the same
// name under its own prefix.
const redPacketLeasePrefix = "flashsale:redpacket-consumer:"

// NewRedPacketWriter returns a writer; Run drives it.
func NewRedPacketWriter(db *bun.DB, rdb redis.UniversalClient, log *slog.Logger, opts LogConsumerOptions) *RedPacketWriter {
	opts = opts.withDefaults()
	w := &RedPacketWriter{db: db, rdb: rdb, log: log, attempt: opts.AttemptTimeout}
	w.consumer = NewLogConsumer(rdb, log, LogFamily{
		Name:        "red-packet writer",
		Registry:    redPacketLogsKey,
		Group:       RedPacketLogGroup,
		LeasePrefix: redPacketLeasePrefix,
		Handler:     w,
		DeadLetters: w,
		Prune:       w.prune,
		Lag:         redPacketLogLag,
		Failures:    redPacketWriteErrors,
	}, opts)
	return w
}

// Acquire takes the lease on the writer's consumer name (LogConsumer.Acquire).
func (w *RedPacketWriter) Acquire(ctx context.Context) error { return w.consumer.Acquire(ctx) }

// Run persists grabs until ctx ends.
func (w *RedPacketWriter) Run(ctx context.Context) error { return w.consumer.Run(ctx) }

// WaitDrained waits until every red-packet log is empty, or ctx ends.
func (w *RedPacketWriter) WaitDrained(ctx context.Context) error { return w.consumer.WaitDrained(ctx) }

// Persisted counts the grabs this writer inserted.
func (w *RedPacketWriter) Persisted() int64 { return w.persisted.Load() }

// decodeGrabEntry reads a red-packet order-log entry.
func decodeGrabEntry(v map[string]any) (GrabRow, error) {
	var g GrabRow
	field := func(k string) (int64, error) { return entryInt(v, k) }
	var seq, ms int64
	var err error
	if g.RedPacketID, err = field(EntryRedPacketID); err != nil {
		return g, err
	}
	if seq, err = field(EntryPacketSeq); err != nil {
		return g, err
	}
	if g.UserID, err = field(EntryUserID); err != nil {
		return g, err
	}
	if g.AmountCents, err = field(EntryAmount); err != nil {
		return g, err
	}
	if ms, err = field(EntryTime); err != nil {
		return g, err
	}
	g.Seq, g.GrabTime = int(seq), time.UnixMilli(ms).UTC()
	if r, _ := v[EntryRequestID].(string); r != "" {
		g.RequestID = &r
	}
	return g, nil
}

// Handle inserts a batch of grabs. If the database refuses the batch for
// a constraint (a packet that was never split, a second packet for one
// user, a different amount), it retries grab by grab and refuses only the
// impossible ones, which are dead-lettered, never dropped in silence.
func (w *RedPacketWriter) Handle(ctx context.Context, batch []LogEntry) (map[int]*Refusal, error) {
	refused := map[int]*Refusal{}
	rows := make([]GrabRow, 0, len(batch))
	idx := make([]int, 0, len(batch))
	for i, e := range batch {
		g, err := decodeGrabEntry(e.Values)
		if err != nil {
			refused[i] = refuse(DeadMalformed, err)
			continue
		}
		rows, idx = append(rows, g), append(idx, i)
	}
	err := w.insert(ctx, rows)
	if err == nil || !refusable(err) {
		return refused, err
	}
	w.log.WarnContext(ctx, "database refused a batch of red-packet grabs; retrying them one by one", "grabs", len(rows), "err", err)
	for j := range rows {
		err := w.insert(ctx, rows[j:j+1])
		if refusable(err) {
			refused[idx[j]] = refuse(DeadRefused, fmt.Errorf("red packet %d packet %d for user %d: %w", rows[j].RedPacketID, rows[j].Seq, rows[j].UserID, err))
			continue
		}
		if err != nil {
			return refused, err
		}
	}
	return refused, nil
}

// insert commits rows under one attempt's deadline. A replayed grab (same
// packet, same user) is skipped; the same packet for another user, or a
// second packet for a user, violates a constraint.
func (w *RedPacketWriter) insert(ctx context.Context, rows []GrabRow) error {
	if len(rows) == 0 {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, w.attempt)
	defer cancel()
	var added []int
	err := w.db.NewInsert().Model(&rows).On("CONFLICT (red_packet_id, seq) DO NOTHING").Returning("seq").Scan(actx, &added)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if len(added) < len(rows) {
		// Skipped ones must be replays of the same grab, not another
		// user's claim on a packet.
		if err := w.checkReplays(actx, rows); err != nil {
			return err
		}
	}
	w.persisted.Add(int64(len(added)))
	return nil
}

// checkReplays verifies that every row is in the database as written
// (a replay), and reports a constraint violation otherwise.
func (w *RedPacketWriter) checkReplays(ctx context.Context, rows []GrabRow) error {
	for _, r := range rows {
		var have GrabRow
		err := w.db.NewSelect().Model(&have).Where("red_packet_id = ? AND seq = ?", r.RedPacketID, r.Seq).Scan(ctx)
		if err != nil {
			return fmt.Errorf("check grab of red packet %d packet %d: %w", r.RedPacketID, r.Seq, err)
		}
		if have.UserID != r.UserID || have.AmountCents != r.AmountCents {
			return &packetTaken{row: r, owner: have.UserID}
		}
	}
	return nil
}

// packetTaken is a grab of a packet the database holds for another user
// (or with another amount): Redis handed one packet out twice.
type packetTaken struct {
	row   GrabRow
	owner int64
}

func (p *packetTaken) Error() string {
	return fmt.Sprintf("packet %d of red packet %d already belongs to user %d", p.row.Seq, p.row.RedPacketID, p.owner)
}

// refusable tells whether err proves a grab impossible (rather than the
// database being unavailable).
func refusable(err error) bool {
	var taken *packetTaken
	return isConstraintViolation(err) || errors.As(err, &taken)
}

// DeadLetter records refused red-packet grabs in tb_order_dead_letter.
func (w *RedPacketWriter) DeadLetter(ctx context.Context, dead []DeadEntry) error {
	rows := make([]deadLetterRow, 0, len(dead))
	now := time.Now().UTC()
	for _, d := range dead {
		raw, _ := json.Marshal(d.Entry.Values)
		row := deadLetterRow{Key: d.Entry.Log + "/" + d.Entry.ID, Reason: d.Why.Reason, Detail: d.Why.Err.Error(), Entry: string(raw), CreateTime: now}
		if g, err := decodeGrabEntry(d.Entry.Values); err == nil {
			row.UserID, row.RequestID = &g.UserID, g.RequestID
		}
		rows = append(rows, row)
		w.log.ErrorContext(ctx, "red-packet grab refused by the database, dead-lettered",
			"log", d.Entry.Log, "entry", d.Entry.ID, "reason", row.Reason, "detail", row.Detail)
	}
	return insertDeadLetters(ctx, w.db, rows)
}

// prune drops from the registry the logs of red packets that are
// refunded (the database says so), gone from Redis and hold no entry.
// Nothing appends to them again: a refunded red packet is never loaded.
func (w *RedPacketWriter) prune(ctx context.Context, logs []string) int {
	n := 0
	for _, s := range logs {
		id, ok := redPacketIDFromLog(s)
		if !ok {
			continue
		}
		if there, err := w.rdb.Exists(ctx, redPacketKeys(id)[0]).Result(); err != nil || there != 0 {
			continue
		}
		if l, err := w.rdb.XLen(ctx, s).Result(); err != nil || l > 0 {
			continue
		}
		refunded, err := w.db.NewSelect().Model((*redPacketRow)(nil)).Where("id = ? AND refund_time IS NOT NULL", id).Exists(ctx)
		if err != nil || !refunded {
			continue
		}
		if err := w.rdb.SRem(ctx, redPacketLogsKey, s).Err(); err == nil {
			_ = w.rdb.Del(ctx, s).Err()
			n++
		}
	}
	return n
}
