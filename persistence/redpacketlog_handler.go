package persistence

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/domain"
)

// DeadRedPacketRefunded is the dead-letter reason (beside deadletter.go's)
// of a grab whose red packet was refunded before the grab could be
// committed: a writer that held it longer than every hold the refund
// waits out. The refund paid its cents to the creator.
const DeadRedPacketRefunded = "red_packet_refunded"

// RedPacketLogHandler moves batches of grabbed packets from the red
// packets' order logs into tb_red_packet_grab: the handler of the
// persistence actor's second family (OrderLogHandler's is the first). The actor reads, claims,
// retries, dead-letters and acknowledges; Handle inserts a batch with one
// multi-row INSERT ... ON CONFLICT (red_packet_id, seq) DO NOTHING, so a
// replay after a crash is a no-op and every grab lands exactly once.
type RedPacketLogHandler struct {
	db        *bun.DB
	rdb       redis.UniversalClient
	log       *slog.Logger
	attempt   time.Duration
	persisted atomic.Int64
	// name is the writer's consumer name, its name among the holders of a
	// red packet's grabs (holdGrabsScript); holdFor is how long each of
	// its claims lasts (BatchOptions.Hold).
	name    string
	holdFor time.Duration
}

// NewRedPacketLogHandler returns the handler of the red-packet logs' batches.
func NewRedPacketLogHandler(db *bun.DB, rdb redis.UniversalClient, log *slog.Logger, opts BatchOptions) *RedPacketLogHandler {
	opts = opts.withDefaults()
	return &RedPacketLogHandler{db: db, rdb: rdb, log: log, attempt: opts.AttemptTimeout, name: opts.Consumer, holdFor: opts.Hold}
}

// Persisted counts the grabs this handler inserted.
func (h *RedPacketLogHandler) Persisted() int64 { return h.persisted.Load() }

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
// impossible ones, which are dead-lettered, never dropped in silence; so
// are grabs of a red packet refunded before they could be committed, and
// grabs a reloaded red packet cannot take back (adopt). While it holds
// grabs it has not committed, the writer is among their red packets'
// holders, and their refunds wait (holdGrabs); once the batch is handled
// it leaves them.
func (h *RedPacketLogHandler) Handle(ctx context.Context, batch []domain.LogEntry) (map[int]*domain.Refusal, error) {
	refused := map[int]*domain.Refusal{}
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
	refused, err := h.handle(ctx, rows, idx, refused)
	if err == nil {
		h.releaseGrabs(ctx, rows)
	}
	return refused, err
}

// handle commits rows (the batch's grabs; idx maps them to their entries)
// and adds the refused ones to refused.
func (h *RedPacketLogHandler) handle(ctx context.Context, rows []GrabRow, idx []int, refused map[int]*domain.Refusal) (map[int]*domain.Refusal, error) {
	var err error
	for {
		err = h.insert(ctx, rows)
		var out *refusedGrabs
		if !errors.As(err, &out) {
			if err == nil || !refusable(err) {
				return refused, err
			}
			break
		}
		keepRows, keepIdx := rows[:0:0], idx[:0:0]
		for j, r := range rows {
			if why := out.at[j]; why != nil {
				refused[idx[j]] = why
			} else {
				keepRows, keepIdx = append(keepRows, r), append(keepIdx, idx[j])
			}
		}
		rows, idx = keepRows, keepIdx
	}
	h.log.WarnContext(ctx, "database refused a batch of red-packet grabs; retrying them one by one", "grabs", len(rows))
	for j := range rows {
		err := h.insert(ctx, rows[j:j+1])
		var out *refusedGrabs
		switch {
		case errors.As(err, &out) && out.at[0] != nil:
			refused[idx[j]] = out.at[0]
		case refusable(err):
			refused[idx[j]] = refuse(DeadRefused, fmt.Errorf("red packet %d packet %d for user %d: %w", rows[j].RedPacketID, rows[j].Seq, rows[j].UserID, err))
		case err != nil:
			return refused, err
		}
	}
	return refused, nil
}

// holdGrabs records the writer among the holders of grabs of the red
// packets of rows (holdGrabsScript), before an attempt to commit them: a
// refund waits while a writer holds grabs of its red packet, also when
// the database refuses the writer and Redis lost the log the grabs came
// from (the writer records itself again before its next attempt).
func (h *RedPacketLogHandler) holdGrabs(ctx context.Context, rows []GrabRow) error {
	// EVAL, not EVALSHA: a pipeline cannot fall back on a NOSCRIPT reply,
	// and this runs just after Redis lost its data, scripts included.
	pipe := h.rdb.Pipeline()
	for _, id := range redPacketsOf(rows) {
		holdGrabsScript.Eval(ctx, pipe, []string{redPacketHoldersKey(id)}, h.name, h.holdFor.Milliseconds())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("hold grabs of red packets: %w", err)
	}
	return nil
}

// releaseGrabs removes the writer from the holders of its red packets'
// grabs once they are committed or refused. If it fails, the claims lapse
// after holdFor.
func (h *RedPacketLogHandler) releaseGrabs(ctx context.Context, rows []GrabRow) {
	if len(rows) == 0 {
		return
	}
	pipe := h.rdb.Pipeline()
	for _, id := range redPacketsOf(rows) {
		pipe.ZRem(ctx, redPacketHoldersKey(id), h.name)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		h.log.WarnContext(ctx, "red-packet writer could not release its grabs; their refunds wait until the claims lapse",
			"err", err, "lapse", h.holdFor.String())
	}
}

// redPacketsOf lists the red packets of rows, in id order.
func redPacketsOf(rows []GrabRow) []int64 {
	ids := map[int64]bool{}
	for _, r := range rows {
		ids[r.RedPacketID] = true
	}
	return slices.Sorted(maps.Keys(ids))
}

// insert commits rows in one transaction under one attempt's deadline,
// after recording the writer among their red packets' holders
// (holdGrabs), with their red packets' rows locked (shared; a reload or a
// refund locks one exclusively, see RedPacketStore.Load and Refund) and
// the grabs adopted by the red packets Redis holds (adopt). A replayed
// grab (same packet, same user) is skipped; the same packet for another
// user, or a second packet for a user, violates a constraint; grabs of a
// refunded red packet, and those a reloaded red packet could not take
// back, abort the transaction as *refusedGrabs.
func (h *RedPacketLogHandler) insert(ctx context.Context, rows []GrabRow) error {
	if len(rows) == 0 {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, h.attempt)
	defer cancel()
	if err := h.holdGrabs(actx, rows); err != nil {
		return err
	}
	var added []int
	err := h.db.RunInTx(actx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := h.adopt(ctx, tx, rows); err != nil {
			return err
		}
		added = nil
		err := tx.NewInsert().Model(&rows).On("CONFLICT (red_packet_id, seq) DO NOTHING").Returning("seq").Scan(ctx, &added)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if len(added) < len(rows) {
			// Skipped ones must be replays of the same grab, not another
			// user's claim on a packet.
			return h.checkReplays(ctx, tx, rows)
		}
		return nil
	})
	if err != nil {
		return err
	}
	h.persisted.Add(int64(len(added)))
	return nil
}

// adoptGrabsScript puts committed grabs into a reloaded red packet: scripts/adopt_grabs.lua.
var adoptGrabsScript = newScript("adopt_grabs")

// adopt locks the red packets of rows (shared, in id order), refuses the
// grabs of those refunded, and runs adoptGrabsScript for each of the
// others; grabs refused or that cannot be adopted abort the transaction
// as *refusedGrabs. The lock is what makes the refund's check final: a
// refund locks the row exclusively, counts the grabs and records itself,
// so a grab is either counted by it or sees it here.
func (h *RedPacketLogHandler) adopt(ctx context.Context, tx bun.Tx, rows []GrabRow) error {
	byPacket := map[int64][]int{}
	for j, r := range rows {
		byPacket[r.RedPacketID] = append(byPacket[r.RedPacketID], j)
	}
	ids := redPacketsOf(rows)
	var locked []redPacketRow
	q := tx.NewSelect().Model(&locked).Column("id", "refund_time").Where("id IN (?)", bun.In(ids)).Order("id")
	if IsPostgres(tx) {
		q = q.For("SHARE")
	}
	if err := q.Scan(ctx); err != nil {
		return fmt.Errorf("lock red packets %v: %w", ids, err)
	}
	out := &refusedGrabs{at: map[int]*domain.Refusal{}}
	for _, p := range locked {
		if p.RefundTime == nil {
			continue
		}
		for _, j := range byPacket[p.ID] {
			r := rows[j]
			out.at[j] = refuse(DeadRedPacketRefunded, fmt.Errorf("packet %d of red packet %d for user %d came after the red packet "+
				"was refunded at %s", r.Seq, r.RedPacketID, r.UserID, p.RefundTime.UTC().Format(time.RFC3339)))
		}
		delete(byPacket, p.ID)
	}
	for _, id := range ids {
		at, ok := byPacket[id]
		if !ok {
			continue
		}
		args := make([]any, 0, 4*len(at))
		for _, j := range at {
			r := rows[j]
			args = append(args, r.UserID, strconv.Itoa(r.Seq)+":"+strconv.FormatInt(r.AmountCents, 10), deref(r.RequestID), r.AmountCents)
		}
		lost, err := adoptGrabsScript.Run(ctx, h.rdb, []string{redPacketMetaKey(id), redPacketPacketsKey(id), redPacketUsersKey(id)}, args...).Int64Slice()
		if err != nil {
			return fmt.Errorf("adopt grabs of red packet %d: %w", id, err)
		}
		for _, n := range lost {
			if n >= 1 && int(n) <= len(at) {
				r := rows[at[n-1]]
				out.at[at[n-1]] = refuse(DeadLostLoad, fmt.Errorf("packet %d of red packet %d for user %d was handed out by a Redis load "+
					"that was lost, and the reload already gave the packet or the user another one", r.Seq, r.RedPacketID, r.UserID))
			}
		}
	}
	if len(out.at) > 0 {
		return out
	}
	return nil
}

// refusedGrabs aborts a red-packet handler's transaction that holds grabs
// the database must not take: their red packet is refunded, or they were
// sold from a Redis load that was lost and the reloaded red packet can no
// longer take them back. at holds their refusals by position in the rows
// tried.
type refusedGrabs struct{ at map[int]*domain.Refusal }

func (r *refusedGrabs) Error() string {
	return fmt.Sprintf("%d red-packet grabs refused before their commit", len(r.at))
}

// checkReplays verifies that every row is in the database as written
// (a replay), and reports a constraint violation otherwise.
func (h *RedPacketLogHandler) checkReplays(ctx context.Context, db bun.IDB, rows []GrabRow) error {
	for _, r := range rows {
		var have GrabRow
		err := db.NewSelect().Model(&have).Where("red_packet_id = ? AND seq = ?", r.RedPacketID, r.Seq).Scan(ctx)
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

// returnPacketScript puts a refused grab's packet back: scripts/return_packet.lua.
var returnPacketScript = newScript("return_packet")

// returnPacket gives a refused grab's packet back to the red packet when
// no grab in the database holds it. Redis handed it to a user the database
// already knew with another packet (a grab the writer still held when
// Redis lost its data, loaded again without it): the packet belongs to
// nobody and must not vanish with the refused grab (found by the fault
// suite, seed 407107706, round 7). A packet the database holds for
// another user stays with that user.
func (h *RedPacketLogHandler) returnPacket(ctx context.Context, entryID string, g GrabRow) error {
	held, err := h.db.NewSelect().Model((*GrabRow)(nil)).Where("red_packet_id = ? AND seq = ?", g.RedPacketID, g.Seq).Exists(ctx)
	if err != nil || held {
		return err
	}
	id := g.RedPacketID
	keys := []string{redPacketMetaKey(id), redPacketPacketsKey(id), redPacketReturnedKey(id)}
	packet := strconv.Itoa(g.Seq) + ":" + strconv.FormatInt(g.AmountCents, 10)
	n, err := returnPacketScript.Run(ctx, h.rdb, keys, entryID, packet, g.AmountCents).Int()
	if err != nil {
		return fmt.Errorf("return packet %d of red packet %d: %w", g.Seq, g.RedPacketID, err)
	}
	if n == 1 {
		h.log.WarnContext(ctx, "a refused grab's packet went back to its red packet", "red_packet", g.RedPacketID, "packet", g.Seq)
	}
	return nil
}

// DeadLetter records refused red-packet grabs in tb_order_dead_letter.
func (h *RedPacketLogHandler) DeadLetter(ctx context.Context, dead []domain.DeadEntry) error {
	rows := make([]deadLetterRow, 0, len(dead))
	now := time.Now().UTC()
	for _, d := range dead {
		raw, _ := json.Marshal(d.Entry.Values)
		row := deadLetterRow{Key: d.Entry.Log + "/" + d.Entry.ID, Reason: d.Why.Reason, Detail: d.Why.Err.Error(), Entry: string(raw), CreateTime: now}
		if g, err := decodeGrabEntry(d.Entry.Values); err == nil {
			row.UserID, row.RequestID = &g.UserID, g.RequestID
		}
		rows = append(rows, row)
		h.log.ErrorContext(ctx, "red-packet grab refused by the database, dead-lettered",
			"log", d.Entry.Log, "entry", d.Entry.ID, "reason", row.Reason, "detail", row.Detail)
	}
	if err := insertDeadLetters(ctx, h.db, rows); err != nil {
		return err
	}
	for _, d := range dead {
		if d.Why.Reason == DeadLostLoad || d.Why.Reason == DeadRedPacketRefunded {
			// Its packet was never taken from the load Redis holds, or its
			// red packet is refunded: its cents went to the creator.
			continue
		}
		if g, err := decodeGrabEntry(d.Entry.Values); err == nil {
			if err := h.returnPacket(ctx, d.Entry.Log+"/"+d.Entry.ID, g); err != nil {
				return err
			}
		}
	}
	return nil
}

// Prune drops from the registry the logs of red packets that are
// refunded or pruned (the database has no row of theirs that is not
// refunded), gone from Redis and hold no entry. Nothing appends to them
// again: a refunded red packet is never loaded, nor one the database
// lacks; and a log is registered only after its red packet's row is
// committed.
func (h *RedPacketLogHandler) Prune(ctx context.Context, logs []string) int {
	n := 0
	for _, s := range logs {
		id, ok := redPacketIDFromLog(s)
		if !ok {
			continue
		}
		if there, err := h.rdb.Exists(ctx, redPacketMetaKey(id)).Result(); err != nil || there != 0 {
			continue
		}
		if l, err := h.rdb.XLen(ctx, s).Result(); err != nil || l > 0 {
			continue
		}
		open, err := h.db.NewSelect().Model((*redPacketRow)(nil)).Where("id = ? AND refund_time IS NULL", id).Exists(ctx)
		if err != nil || open {
			continue
		}
		if err := h.rdb.SRem(ctx, redPacketLogsKey, s).Err(); err == nil {
			_ = h.rdb.Del(ctx, s).Err()
			n++
		}
	}
	return n
}
