package persistence

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"flashsale/domain"
)

// redPacketRow is a tb_red_packet row.
type redPacketRow struct {
	bun.BaseModel `bun:"table:tb_red_packet"`

	ID          int64      `bun:"id,pk"`
	CreatorID   int64      `bun:"creator_id,notnull"`
	TotalCents  int64      `bun:"total_cents,notnull"`
	Count       int        `bun:"count,notnull"`
	ExpireTime  time.Time  `bun:"expire_time,notnull"`
	CreateTime  time.Time  `bun:"create_time,notnull"`
	RefundCents *int64     `bun:"refund_cents"`
	RefundCount *int       `bun:"refund_count"`
	RefundTime  *time.Time `bun:"refund_time"`
}

// PacketRow is a tb_red_packet_part row: one packet of a red packet.
type PacketRow struct {
	bun.BaseModel `bun:"table:tb_red_packet_part"`

	RedPacketID int64 `bun:"red_packet_id,pk"`
	Seq         int   `bun:"seq,pk"`
	AmountCents int64 `bun:"amount_cents,notnull"`
}

// GrabRow is a tb_red_packet_grab row: a grabbed packet.
type GrabRow struct {
	bun.BaseModel `bun:"table:tb_red_packet_grab"`

	RedPacketID int64     `bun:"red_packet_id,pk"`
	Seq         int       `bun:"seq,pk"`
	UserID      int64     `bun:"user_id,notnull"`
	AmountCents int64     `bun:"amount_cents,notnull"`
	GrabTime    time.Time `bun:"grab_time,notnull"`
	RequestID   *string   `bun:"request_id"`
}

// RedPacketStore keeps red packets in the database and Redis: a red
// packet and all its packets are committed before any is pushed into
// Redis, so Redis only ever holds packets the database knows.
type RedPacketStore struct {
	db    *bun.DB
	redis *RedPacketRedis
	// ReloadHold overrides ReloadHoldDefault for red packets (tests; the
	// embedded mode, whose Redis dies only with its writer): how long a
	// reload holds grabs (Load), and how long a red packet Redis lacks
	// waits for its refund (Refund). Both wait for grabs a writer may hold
	// from a load Redis lost, so both outlast a writer's retry.
	ReloadHold time.Duration
}

// NewRedPacketStore returns the red packets' store.
func NewRedPacketStore(db *bun.DB, rdb *RedPacketRedis) *RedPacketStore {
	return &RedPacketStore{db: db, redis: rdb}
}

// Create commits the red packet and its packets (amounts[i] is packet i),
// then loads it into Redis; no quota applies (see CreateWithin).
func (s *RedPacketStore) Create(ctx context.Context, rp domain.RedPacket, amounts []int64) error {
	_, err := s.CreateWithin(ctx, rp, amounts, domain.RedPacketQuota{})
	return err
}

// CreateWithin commits the red packet and its packets (amounts[i] is
// packet i) and marks it open for its creator, then loads it into Redis;
// unless the creator has reached a bound of q: q.MaxOpen open red packets
// (openRedPackets), or q.MaxPerDay created within domain.RedPacketDay
// before rp.CreatedAt (createdWithinDay). Then it stores nothing and says
// which (nil when it created the red packet).
//
// The counts and the insert are one transaction that holds the creator's
// lock (creatorLock) from before the counts to the commit, so two creates
// of one creator take turns: the second counts the first's red packet,
// and no two creates at a limit both pass, on any number of nodes.
func (s *RedPacketStore) CreateWithin(ctx context.Context, rp domain.RedPacket, amounts []int64, q domain.RedPacketQuota) (over *domain.RedPacketOverQuota, err error) {
	row := redPacketRow{ID: rp.ID, CreatorID: rp.CreatorID, TotalCents: rp.TotalCents, Count: rp.Count,
		ExpireTime: rp.ExpiresAt.UTC(), CreateTime: rp.CreatedAt.UTC()}
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		over = nil
		if q.MaxOpen > 0 || q.MaxPerDay > 0 {
			if err := creatorLock(ctx, tx, rp.CreatorID); err != nil {
				return err
			}
			var err error
			if over, err = quotaReached(ctx, tx, rp, q); err != nil || over != nil {
				return err // commits the closed red packets' removal
			}
		}
		if _, err := tx.NewInsert().Model(&row).Exec(ctx); err != nil {
			return err
		}
		if err := insertPackets(ctx, tx, rp.ID, amounts); err != nil {
			return err
		}
		_, err := tx.NewInsert().Model(&openRedPacketRow{RedPacketID: rp.ID, CreatorID: rp.CreatorID}).Exec(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create red packet %d: %w", rp.ID, err)
	}
	if over != nil {
		return over, nil
	}
	_, err = s.redis.Load(ctx, RedPacketLoad{ID: rp.ID, ExpiresAt: rp.ExpiresAt, Amounts: amounts})
	return nil, err
}

// quotaReached counts the creator's red packets against q, under the
// creator's lock, and says which bounds the create would pass (nil: none).
// Both are counted, so that the answer says when the create passes.
func quotaReached(ctx context.Context, tx bun.Tx, rp domain.RedPacket, q domain.RedPacketQuota) (*domain.RedPacketOverQuota, error) {
	var over domain.RedPacketOverQuota
	if q.MaxPerDay > 0 {
		created, err := createdWithinDay(ctx, tx, rp.CreatorID, rp.CreatedAt, q.MaxPerDay)
		if err != nil {
			return nil, err
		}
		if len(created) >= q.MaxPerDay {
			over.DayFreesAt = created[q.MaxPerDay-1].Add(domain.RedPacketDay)
		}
	}
	if q.MaxOpen > 0 {
		expiries, err := openRedPackets(ctx, tx, rp.CreatorID)
		if err != nil {
			return nil, err
		}
		if len(expiries) >= q.MaxOpen {
			over.Open = expiries
		}
	}
	if over.Open == nil && over.DayFreesAt.IsZero() {
		return nil, nil
	}
	return &over, nil
}

// createdWithinDay returns the creation times of the creator's newest red
// packets created after now less domain.RedPacketDay, newest first, at
// most limit of them: with limit found, the last is the one whose leaving
// the window lets one more create pass. One range scan of
// ix_red_packet_creator, at most limit rows; pruning never removes a red
// packet this young (see PruneSettled).
func createdWithinDay(ctx context.Context, tx bun.Tx, creatorID int64, now time.Time, limit int) ([]time.Time, error) {
	var created []time.Time
	err := tx.NewSelect().Model((*redPacketRow)(nil)).Column("create_time").
		Where("creator_id = ?", creatorID).Where("create_time > ?", now.Add(-domain.RedPacketDay).UTC()).
		OrderExpr("create_time DESC").Limit(int64(limit)).Scan(ctx, &created)
	if err != nil {
		return nil, fmt.Errorf("count red packets of creator %d created within a day: %w", creatorID, err)
	}
	return created, nil
}

// insertPackets inserts a new red packet's packets (amounts[i] is packet
// i). On Postgres it is one statement over one array of the amounts, the
// seqs taken from their positions (WITH ORDINALITY): its text is a
// number per packet, which bun writes without reflection. The VALUES form
// has bun format every row's struct: with the garbage it left, 4-5 ms of
// the 10-11 ms of CPU an accepted create of 10,000 packets cost. SQLite
// has no unnest and keeps the VALUES form;
// TestPacketInsertsAgreeAcrossForms holds the two to the same rows.
func insertPackets(ctx context.Context, tx bun.Tx, id int64, amounts []int64) error {
	if IsPostgres(tx) {
		return insertPacketArray(ctx, tx, id, amounts)
	}
	return insertPacketValues(ctx, tx, id, amounts)
}

// insertPacketArray is insertPackets's array form.
func insertPacketArray(ctx context.Context, tx bun.Tx, id int64, amounts []int64) error {
	_, err := tx.NewRaw(`INSERT INTO tb_red_packet_part (red_packet_id, seq, amount_cents)
SELECT ?, (t.n - 1)::int, t.amount FROM unnest(?::bigint[]) WITH ORDINALITY AS t (amount, n)`,
		id, pgdialect.Array(amounts)).Exec(ctx)
	if err != nil {
		return fmt.Errorf("insert %d packets: %w", len(amounts), err)
	}
	return nil
}

// insertPacketValues is insertPackets's VALUES form, in statements of at
// most 2,000 rows (which bounds each statement's text).
func insertPacketValues(ctx context.Context, tx bun.Tx, id int64, amounts []int64) error {
	parts := make([]PacketRow, 0, min(len(amounts), 2000))
	for i := 0; i < len(amounts); i += 2000 {
		parts = parts[:0]
		for j, a := range amounts[i:min(i+2000, len(amounts))] {
			parts = append(parts, PacketRow{RedPacketID: id, Seq: i + j, AmountCents: a})
		}
		if _, err := tx.NewInsert().Model(&parts).Exec(ctx); err != nil {
			return fmt.Errorf("insert %d packets: %w", len(amounts), err)
		}
	}
	return nil
}

// openRedPacketRow is a tb_red_packet_open row: a red packet that counts
// against its creator's quota until it is closed (see openRedPackets).
type openRedPacketRow struct {
	bun.BaseModel `bun:"table:tb_red_packet_open"`

	RedPacketID int64 `bun:"red_packet_id,pk"`
	CreatorID   int64 `bun:"creator_id,notnull"`
}

// creatorLockSpace is the first key of the creators' advisory locks
// (Postgres's two-key form, whose keys never meet the one-key form's,
// such as migrationLockKey): "rpkt" in ASCII.
const creatorLockSpace = 0x72706b74

// creatorLock takes the creator's transaction-scoped advisory lock in
// Postgres, keyed by a 32-bit hash of the creator's id: two creators
// whose hashes meet only take turns. SQLite needs none: its one
// connection runs one transaction at a time.
func creatorLock(ctx context.Context, tx bun.Tx, creatorID int64) error {
	if !IsPostgres(tx) {
		return nil
	}
	if _, err := tx.NewRaw("SELECT pg_advisory_xact_lock(?, hashint8(?))", creatorLockSpace, creatorID).Exec(ctx); err != nil {
		return fmt.Errorf("lock red packets of creator %d: %w", creatorID, err)
	}
	return nil
}

// openRedPackets returns the expiries of the creator's open red packets,
// earliest first. Open means neither refunded nor fully grabbed: fewer
// rows in tb_red_packet_grab than packets. So a red packet past its
// expiry stays open until its refund (its rest belongs to nobody until
// then), and one that Redis emptied stays open until the red-packet
// writer has committed its last grab (milliseconds). Both only ever
// close: a refund is final and a committed grab is never removed. Those
// found closed leave tb_red_packet_open here, so no later create reads
// them again.
//
// Each red packet costs one index lookup while its last packet is not
// grabbed: Redis hands the packets out in order, so a red packet still
// open has its last one left (checked first, with CASE, which both
// databases evaluate lazily). Only one whose last packet is grabbed has
// its grabs counted: fully grabbed, it is closed here once; a packet
// returned to its red packet (a grab the database refused goes to the
// back of the queue) keeps it counted on each create until it is
// taken. A count of 10,000 grabs takes about a millisecond; a probe for
// an unclaimed packet by anti-join was planned as a hash join over
// every packet (about 4 ms each).
func openRedPackets(ctx context.Context, tx bun.Tx, creatorID int64) ([]time.Time, error) {
	var rows []struct {
		ID         int64     `bun:"id"`
		ExpireTime time.Time `bun:"expire_time"`
		Open       int       `bun:"open"`
	}
	err := tx.NewSelect().TableExpr("tb_red_packet_open AS o").
		Join("JOIN tb_red_packet AS r ON r.id = o.red_packet_id").
		ColumnExpr("r.id, r.expire_time").
		ColumnExpr(`CASE
			WHEN r.refund_time IS NOT NULL THEN 0
			WHEN NOT EXISTS (SELECT 1 FROM tb_red_packet_grab AS g WHERE g.red_packet_id = r.id AND g.seq = r.count - 1) THEN 1
			WHEN (SELECT COUNT(*) FROM tb_red_packet_grab AS g WHERE g.red_packet_id = r.id) < r.count THEN 1
			ELSE 0 END AS open`).
		Where("o.creator_id = ?", creatorID).
		OrderExpr("r.expire_time, r.id").
		Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("count open red packets of creator %d: %w", creatorID, err)
	}
	var open []time.Time
	var closed []int64
	for _, r := range rows {
		if r.Open == 0 {
			closed = append(closed, r.ID)
			continue
		}
		open = append(open, r.ExpireTime)
	}
	if len(closed) > 0 {
		if _, err := tx.NewDelete().Model((*openRedPacketRow)(nil)).Where("red_packet_id IN (?)", bun.In(closed)).Exec(ctx); err != nil {
			return nil, fmt.Errorf("close red packets %v: %w", closed, err)
		}
	}
	return open, nil
}

// Get reads a red packet; Remaining* come from Redis while it has the red
// packet, else from the database (what was not grabbed, or refunded).
func (s *RedPacketStore) Get(ctx context.Context, id int64) (domain.RedPacket, error) {
	var row redPacketRow
	if err := s.db.NewSelect().Model(&row).Where("id = ?", id).Scan(ctx); errors.Is(err, sql.ErrNoRows) {
		return domain.RedPacket{}, domain.RedPacketNotFound(id)
	} else if err != nil {
		return domain.RedPacket{}, fmt.Errorf("read red packet %d: %w", id, err)
	}
	rp := domain.RedPacket{ID: row.ID, CreatorID: row.CreatorID, TotalCents: row.TotalCents, Count: row.Count,
		ExpiresAt: row.ExpireTime, CreatedAt: row.CreateTime, Refunded: row.RefundTime}
	if row.RefundTime == nil {
		n, cents, found, err := s.redis.Live(ctx, id)
		if err == nil && found {
			rp.RemainingCount, rp.RemainingCents = n, cents
			return rp, nil
		}
	}
	n, cents, err := s.grabbed(ctx, s.db, id)
	if err != nil {
		return domain.RedPacket{}, err
	}
	rp.RemainingCount, rp.RemainingCents = row.Count-n, row.TotalCents-cents
	return rp, nil
}

// grabbed counts a red packet's persisted grabs and their cents.
func (s *RedPacketStore) grabbed(ctx context.Context, db bun.IDB, id int64) (int, int64, error) {
	var sum struct {
		N     int   `bun:"n"`
		Cents int64 `bun:"cents"`
	}
	err := db.NewSelect().TableExpr("tb_red_packet_grab").
		ColumnExpr("COUNT(*) AS n, COALESCE(SUM(amount_cents), 0) AS cents").
		Where("red_packet_id = ?", id).Scan(ctx, &sum)
	if err != nil {
		return 0, 0, fmt.Errorf("count grabs of red packet %d: %w", id, err)
	}
	return sum.N, sum.Cents, nil
}

// Load loads a red packet Redis does not have (lost with its data, or a
// node died between the commit and the push) from the database: its
// packets not grabbed yet and the users who grabbed. It returns what a
// sequencer may cache: not Found for an unknown id; for a red packet past
// its expiry (or refunded) its expiry and nothing left, without loading
// it (the refund settles it from the database, once no grab of it can
// still arrive: see Refund).
//
// A reload holds the grabs of users without a packet for ReloadHold
// (UNAVAILABLE, see grabRedPacketScript): a red-packet writer may hold
// grabs it read before Redis lost its data and has not committed yet
// (the database down meanwhile); within the hold it commits them and
// puts them into the reloaded red packet (adoptGrabsScript), before
// another user can be handed the same packet or their user a second one.
// The red packet's row is locked while the database is read and Redis
// loaded, and a writer locks it (shared) around its commit and adoption:
// a grab is either in the rows a load reads or adopted after the load.
func (s *RedPacketStore) Load(ctx context.Context, id int64) (domain.RedPacketState, error) {
	var st domain.RedPacketState
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var row redPacketRow
		q := tx.NewSelect().Model(&row).Where("id = ?", id)
		if IsPostgres(tx) {
			q = q.For("UPDATE")
		}
		if err := q.Scan(ctx); errors.Is(err, sql.ErrNoRows) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read red packet %d: %w", id, err)
		}
		st = domain.RedPacketState{Found: true, ExpiresAt: row.ExpireTime}
		if row.RefundTime != nil || !time.Now().Before(row.ExpireTime) {
			return nil
		}
		l := RedPacketLoad{ID: id, ExpiresAt: row.ExpireTime, Hold: cmp.Or(s.ReloadHold, ReloadHoldDefault)}
		if err := tx.NewSelect().Model(&l.Grabbed).Where("red_packet_id = ?", id).Scan(ctx); err != nil {
			return fmt.Errorf("read grabs of red packet %d: %w", id, err)
		}
		err := tx.NewSelect().Model(&l.Packets).Where("red_packet_id = ?", id).
			Where("seq NOT IN (SELECT seq FROM tb_red_packet_grab WHERE red_packet_id = ?)", id).
			Order("seq").Scan(ctx)
		if err != nil {
			return fmt.Errorf("read packets of red packet %d: %w", id, err)
		}
		if _, err := s.redis.Load(ctx, l); err != nil {
			return err
		}
		// What Redis holds now (a grab may already have taken a packet, or
		// another node loaded it first).
		st, err = s.redis.State(ctx, id)
		return err
	})
	if err != nil {
		return domain.RedPacketState{}, err
	}
	return st, nil
}

// Due lists up to limit red packets expired before cutoff and not yet
// refunded, oldest first.
func (s *RedPacketStore) Due(ctx context.Context, cutoff time.Time, limit int) ([]int64, error) {
	var ids []int64
	err := s.db.NewSelect().Model((*redPacketRow)(nil)).Column("id").
		Where("refund_time IS NULL").Where("expire_time <= ?", cutoff.UTC()).
		Order("expire_time").Limit(int64(limit)).Scan(ctx, &ids)
	if err != nil {
		return nil, fmt.Errorf("list red packets due for refund: %w", err)
	}
	return ids, nil
}

// Refund refunds an expired red packet's unclaimed packets to its
// creator, once, when no grab of it can still reach the database (Redis
// says so: RedPacketRedis.Settled, which waits out ReloadHold for a red
// packet Redis lacks, and for every writer that holds grabs of it). In one
// transaction it locks the red packet's row (FOR UPDATE), counts the grabs
// in the table and records the refund (total less those), so a writer's
// commit is either counted or comes after the refund, and then finds the
// red packet refunded under the same lock and is refused (see
// RedPacketLogHandler.adopt): grabbed + refunded = total, whatever the order.
// The same transaction takes it off its creator's open red packets (the
// quota, see CreateWithin). A second run, on any node, changes nothing.
// Then it removes the red packet's Redis state. done is false while
// grabs may still arrive; refunded tells whether this call recorded the
// refund (false when it was refunded before), and cents what it refunded.
func (s *RedPacketStore) Refund(ctx context.Context, id int64, now time.Time) (done, refunded bool, cents int64, err error) {
	settled, err := s.redis.Settled(ctx, id, cmp.Or(s.ReloadHold, ReloadHoldDefault))
	if err != nil {
		return false, false, 0, err
	}
	if !settled {
		// Another run may have refunded it and removed its Redis state
		// since Due listed it: then it is done, not waiting.
		done, err := s.db.NewSelect().Model((*redPacketRow)(nil)).Where("id = ? AND refund_time IS NOT NULL", id).Exists(ctx)
		if err != nil {
			return false, false, 0, fmt.Errorf("read refund of red packet %d: %w", id, err)
		}
		return done, false, 0, nil
	}
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		refunded, cents = false, 0
		var row redPacketRow
		q := tx.NewSelect().Model(&row).Where("id = ?", id)
		if IsPostgres(tx) {
			q = q.For("UPDATE")
		}
		if err := q.Scan(ctx); err != nil {
			return fmt.Errorf("lock red packet %d: %w", id, err)
		}
		if row.RefundTime != nil {
			return nil
		}
		n, grabbed, err := s.grabbed(ctx, tx, id)
		if err != nil {
			return err
		}
		res, err := tx.NewUpdate().Model((*redPacketRow)(nil)).
			Set("refund_cents = ?", row.TotalCents-grabbed).
			Set("refund_count = ?", row.Count-n).
			Set("refund_time = ?", now.UTC()).
			Where("id = ?", id).Where("refund_time IS NULL").Exec(ctx)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err == nil && k == 1 {
			refunded, cents = true, row.TotalCents-grabbed
		}
		// Refunded, it no longer counts against its creator's quota.
		if _, err := tx.NewDelete().Model((*openRedPacketRow)(nil)).Where("red_packet_id = ?", id).Exec(ctx); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return false, false, 0, fmt.Errorf("refund red packet %d: %w", id, err)
	}
	if err := s.redis.Forget(ctx, id); err != nil {
		return true, refunded, cents, err // refunded; the keys expire on their own (redPacketKeep)
	}
	return true, refunded, cents, nil
}

// settledBefore is the one condition of a red packet PruneSettled may
// delete, on tb_red_packet's columns: refunded (refund_time set, which is
// final: Refund records it once no grab can still arrive, and a writer
// refuses every grab of a refunded red packet, see adopt) before the
// cutoff (its one argument). Every statement of a prune repeats it, so a
// red packet that is not settled loses no row, whatever was listed.
const settledBefore = "refund_time IS NOT NULL AND refund_time < ?"

// PruneSettled deletes, in one transaction, red packets settled before
// cutoff (settledBefore) with their packets, their grabs and their quota
// row: whole red packets, the earliest refunded first, until their
// packets reach maxPackets (always at least one red packet). It returns
// how many red packets it deleted; 0 when none is due. On Postgres the
// red packets are locked first (SKIP LOCKED: one another prune holds is
// left to it). Dead letters of their grabs stay: they are the record of
// what was refused.
//
// The cutoff must be at least domain.RedPacketDay ago: the daily quota
// counts the red packets created within it (CreateWithin), and a red
// packet is refunded after it was created.
func (s *RedPacketStore) PruneSettled(ctx context.Context, cutoff time.Time, maxPackets int) (int, error) {
	cutoff = cutoff.UTC()
	var ids []int64
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		ids = nil
		var due []struct {
			ID    int64 `bun:"id"`
			Count int   `bun:"count"`
		}
		q := tx.NewSelect().Model((*redPacketRow)(nil)).Column("id", "count").
			Where(settledBefore, cutoff).OrderExpr("refund_time, id").Limit(int64(min(maxPackets, pruneListMax)))
		if IsPostgres(tx) {
			q = q.For("UPDATE SKIP LOCKED")
		}
		if err := q.Scan(ctx, &due); err != nil {
			return fmt.Errorf("list settled red packets: %w", err)
		}
		packets := 0
		for _, d := range due {
			if len(ids) > 0 && packets+d.Count > maxPackets {
				break
			}
			ids, packets = append(ids, d.ID), packets+d.Count
		}
		if len(ids) == 0 {
			return nil
		}
		// Children first (their keys reference tb_red_packet), each
		// limited to the settled red packets among ids.
		settled := tx.NewSelect().Model((*redPacketRow)(nil)).Column("id").Where("id IN (?)", bun.In(ids)).Where(settledBefore, cutoff)
		for _, child := range []any{(*GrabRow)(nil), (*PacketRow)(nil), (*openRedPacketRow)(nil)} {
			if _, err := tx.NewDelete().Model(child).Where("red_packet_id IN (?)", settled).Exec(ctx); err != nil {
				return fmt.Errorf("prune rows of settled red packets: %w", err)
			}
		}
		res, err := tx.NewDelete().Model((*redPacketRow)(nil)).Where("id IN (?)", bun.In(ids)).Where(settledBefore, cutoff).Exec(ctx)
		if err != nil {
			return fmt.Errorf("prune settled red packets: %w", err)
		}
		if n, err := res.RowsAffected(); err == nil && int(n) != len(ids) {
			return fmt.Errorf("prune settled red packets: %d of %d listed were deleted", n, len(ids))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(ids), nil
}

// pruneListMax bounds the red packets one prune lists (each has at least
// one packet, so maxPackets bounds them too).
const pruneListMax = 1000
