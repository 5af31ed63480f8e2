package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
)

// Vouchers stores vouchers in tb_voucher and tb_seckill_voucher.
type Vouchers struct {
	db *bun.DB
}

// NewVouchers returns the voucher store over db.
func NewVouchers(db *bun.DB) *Vouchers { return &Vouchers{db: db} }

// Create inserts a voucher (and its seckill row and preheat ledger entry) in
// one transaction. Ids are the next free integer: vouchers are created by
// admins, rarely, so a retry on the rare conflict between two nodes is
// cheaper than a sequence that SQLite and Postgres spell differently.
func (s *Vouchers) Create(ctx context.Context, in domain.NewVoucher, now time.Time) (domain.Voucher, error) {
	now = now.UTC().Truncate(time.Microsecond)
	const attempts = 5
	for i := 0; ; i++ {
		row, err := s.create(ctx, in, now)
		if err == nil {
			return row.toDomain(), nil
		}
		if !isUniqueViolation(err) || i == attempts-1 {
			return domain.Voucher{}, fmt.Errorf("create voucher: %w", err)
		}
	}
}

func (s *Vouchers) create(ctx context.Context, in domain.NewVoucher, now time.Time) (*voucherRow, error) {
	row := &voucherRow{
		ShopID:      in.ShopID,
		Title:       in.Title,
		SubTitle:    in.SubTitle,
		Rules:       in.Rules,
		PayValue:    in.PayValue,
		ActualValue: in.ActualValue,
		Type:        in.Type,
		Status:      domain.StatusActive,
		CreateTime:  now,
		UpdateTime:  now,
	}
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := tx.NewSelect().Table("tb_voucher").ColumnExpr("COALESCE(MAX(id), 0) + 1").Scan(ctx, &row.ID); err != nil {
			return fmt.Errorf("next id: %w", err)
		}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return fmt.Errorf("insert tb_voucher: %w", err)
		}
		if in.Type != domain.VoucherSeckill {
			return nil
		}
		row.Seckill = &seckillRow{
			VoucherID:     row.ID,
			InitialStock:  *in.Stock,
			Stock:         *in.Stock,
			PerUserLimit:  in.Limit(),
			BeginTime:     in.BeginAt.UTC(),
			EndTime:       in.EndAt.UTC(),
			RequireTicket: in.Gate.RequireTicket,
			Challenge:     in.Gate.Challenge,
			Segments:      in.SegmentCount(),
		}
		if room := in.Room.WithDefaults(); room.Enabled {
			row.Seckill.WaitingRoom, row.Seckill.AdmitPerSecond = true, room.AdmitPerSecond
			row.Seckill.MaxActive, row.Seckill.RoomPaused = room.MaxActive, room.Paused
		}
		if _, err := tx.NewInsert().Model(row.Seckill).Exec(ctx); err != nil {
			return fmt.Errorf("insert tb_seckill_voucher: %w", err)
		}
		ledger := &ledgerRow{VoucherID: row.ID, Delta: *in.Stock, Reason: ReasonPreheat, RefID: &row.ID, CreateTime: now}
		if _, err := tx.NewInsert().Model(ledger).Exec(ctx); err != nil {
			return fmt.Errorf("insert tb_stock_ledger: %w", err)
		}
		return nil
	})
	return row, err
}

// Get returns one voucher or a NOT_FOUND error.
func (s *Vouchers) Get(ctx context.Context, id int64) (domain.Voucher, error) {
	return getVoucher(ctx, s.db, id)
}

func getVoucher(ctx context.Context, db bun.IDB, id int64) (domain.Voucher, error) {
	row := new(voucherRow)
	err := db.NewSelect().Model(row).Relation("Seckill").Where("v.id = ?", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return domain.Voucher{}, domain.NotFound("voucher", id)
	}
	if err != nil {
		return domain.Voucher{}, fmt.Errorf("get voucher %d: %w", id, err)
	}
	return row.toDomain(), nil
}

// List returns vouchers in id order after page.After, optionally of one
// shop; it fetches one extra row to tell whether a next page exists.
func (s *Vouchers) List(ctx context.Context, shopID *int64, page domain.Page) ([]domain.Voucher, bool, error) {
	var rows []*voucherRow
	q := s.db.NewSelect().Model(&rows).Relation("Seckill").
		Where("v.id > ?", page.After).
		Order("v.id ASC").
		Limit(int64(page.First) + 1)
	if shopID != nil {
		q = q.Where("v.shop_id = ?", *shopID)
	}
	if page.OmitTexts {
		q = q.ExcludeColumn("sub_title", "rules")
	}
	if err := q.Scan(ctx); err != nil {
		return nil, false, fmt.Errorf("list vouchers: %w", err)
	}
	more := len(rows) > page.First
	if more {
		rows = rows[:page.First]
	}
	out := make([]domain.Voucher, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, more, nil
}

// TextSizes returns the byte lengths of the longest texts stored (one
// scan of tb_voucher: the catalog reads it at start and now and then).
func (s *Vouchers) TextSizes(ctx context.Context) (domain.TextSizes, error) {
	var out domain.TextSizes
	err := s.db.NewSelect().TableExpr("tb_voucher").
		ColumnExpr("coalesce(max(octet_length(title)), 0)").
		ColumnExpr("coalesce(max(octet_length(sub_title)), 0)").
		ColumnExpr("coalesce(max(octet_length(rules)), 0)").
		Scan(ctx, &out.Title, &out.SubTitle, &out.Rules)
	if err != nil {
		return out, fmt.Errorf("longest voucher texts: %w", err)
	}
	return out, nil
}

// SetStatus changes a voucher's status and returns the updated voucher.
//
// The new update_time is the later of now and one microsecond past the
// stored one, so it grows with every change whatever the clocks of the
// nodes say: Redis orders the copies of a voucher's metadata by it (see
// Stock.SetStatus), and a node whose clock runs behind must not have its
// pause refused as "older" than a resume made a moment before elsewhere.
func (s *Vouchers) SetStatus(ctx context.Context, id int64, status domain.VoucherStatus, now time.Time) (domain.Voucher, error) {
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var prev time.Time
		var was domain.VoucherStatus
		q := tx.NewSelect().Table("tb_voucher").Column("update_time", "status").Where("id = ?", id)
		if IsPostgres(tx) {
			// NO KEY UPDATE: enough against another status change, and it
			// does not wait for the key-share locks of order inserts.
			q = q.For("NO KEY UPDATE") // SQLite has one writer: its transactions are serial already
		}
		if err := q.Scan(ctx, &prev, &was); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return domain.NotFound("voucher", id)
			}
			return err
		}
		// ENDED is final: orders, refunds and reports count on a sale
		// that ended staying ended.
		if was == domain.StatusEnded && status != domain.StatusEnded {
			return domain.StatusOfEndedVoucher(id)
		}
		next := now.UTC().Truncate(time.Microsecond)
		if floor := prev.UTC().Truncate(time.Microsecond).Add(time.Microsecond); next.Before(floor) {
			next = floor
		}
		_, err := tx.NewUpdate().Table("tb_voucher").
			Set("status = ?", status).
			Set("update_time = ?", next).
			Where("id = ?", id).Exec(ctx)
		return err
	})
	if err != nil {
		if c := domain.ErrorCode(err); c == domain.CodeNotFound || c == domain.CodeBadInput {
			return domain.Voucher{}, err
		}
		return domain.Voucher{}, fmt.Errorf("set voucher %d status: %w", id, err)
	}
	return s.Get(ctx, id)
}

// SetGate changes a seckill voucher's grab gate, only while the voucher is
// paused: a running sale's rules do not change under its buyers, and every
// node has re-read the gate (within its refresh) before the sale resumes.
func (s *Vouchers) SetGate(ctx context.Context, id int64, change domain.GateChange, now time.Time) (domain.Voucher, error) {
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var row struct {
			Status  domain.VoucherStatus `bun:"status"`
			Seckill *int64               `bun:"voucher_id"`
		}
		q := tx.NewSelect().TableExpr("tb_voucher AS v").
			ColumnExpr("v.status, s.voucher_id").
			Join("LEFT JOIN tb_seckill_voucher AS s ON s.voucher_id = v.id").
			Where("v.id = ?", id)
		if IsPostgres(tx) {
			q = q.For("NO KEY UPDATE OF v")
		}
		if err := q.Scan(ctx, &row); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return domain.NotFound("voucher", id)
			}
			return err
		}
		switch {
		case row.Seckill == nil:
			return domain.GateOfNonSeckill(id)
		case row.Status != domain.StatusPaused:
			return domain.GateWhileNotPaused(id)
		}
		upd := tx.NewUpdate().Table("tb_seckill_voucher").Where("voucher_id = ?", id)
		if change.RequireTicket != nil {
			upd = upd.Set("require_ticket = ?", *change.RequireTicket)
		}
		if change.Challenge != nil {
			upd = upd.Set("challenge = ?", *change.Challenge)
		}
		if change.RequireTicket == nil && change.Challenge == nil {
			return nil
		}
		if _, err := upd.Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewUpdate().Table("tb_voucher").Set("update_time = ?", now.UTC().Truncate(time.Microsecond)).
			Where("id = ?", id).Where("update_time < ?", now.UTC().Truncate(time.Microsecond)).Exec(ctx)
		return err
	})
	if err != nil {
		if c := domain.ErrorCode(err); c == domain.CodeNotFound || c == domain.CodeBadInput {
			return domain.Voucher{}, err
		}
		return domain.Voucher{}, fmt.Errorf("set voucher %d gate: %w", id, err)
	}
	return s.Get(ctx, id)
}

// Rooms lists the seckill vouchers with a waiting room whose sale has not
// ended at now (the open rooms a node's pacer runs).
func (s *Vouchers) Rooms(ctx context.Context, now time.Time) ([]domain.Voucher, error) {
	var rows []*voucherRow
	err := s.db.NewSelect().Model(&rows).Relation("Seckill").
		Where("seckill.waiting_room").Where("seckill.end_time > ?", now.UTC()).
		Order("v.id ASC").Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the vouchers with a waiting room: %w", err)
	}
	out := make([]domain.Voucher, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, nil
}

// SetWaitingRoom changes a seckill voucher's waiting-room settings, live:
// the pace, the open tickets allowed, whether it admits. The voucher must
// have a room (domain.RoomOfNoRoom otherwise). The row's update_time does
// not move: the room's settings are not the voucher's Redis metadata, and
// the caller writes them to Redis itself (Queue.Configure).
func (s *Vouchers) SetWaitingRoom(ctx context.Context, id int64, change domain.RoomChange) (domain.Voucher, error) {
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var room *bool
		q := tx.NewSelect().TableExpr("tb_voucher AS v").ColumnExpr("s.waiting_room").
			Join("LEFT JOIN tb_seckill_voucher AS s ON s.voucher_id = v.id").Where("v.id = ?", id)
		if IsPostgres(tx) {
			q = q.For("NO KEY UPDATE OF v")
		}
		if err := q.Scan(ctx, &room); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return domain.NotFound("voucher", id)
			}
			return err
		}
		if room == nil || !*room {
			return domain.RoomOfNoRoom(id)
		}
		upd := tx.NewUpdate().Table("tb_seckill_voucher").Where("voucher_id = ?", id)
		set := false
		if change.AdmitPerSecond != nil {
			upd, set = upd.Set("admit_per_second = ?", *change.AdmitPerSecond), true
		}
		if change.MaxActive != nil {
			upd, set = upd.Set("max_active = ?", *change.MaxActive), true
		}
		if change.Paused != nil {
			upd, set = upd.Set("room_paused = ?", *change.Paused), true
		}
		if !set {
			return nil
		}
		_, err := upd.Exec(ctx)
		return err
	})
	if err != nil {
		if c := domain.ErrorCode(err); c == domain.CodeNotFound || c == domain.CodeBadInput {
			return domain.Voucher{}, err
		}
		return domain.Voucher{}, fmt.Errorf("set voucher %d waiting room: %w", id, err)
	}
	return s.Get(ctx, id)
}

// SetSegments changes a seckill voucher's segment count; the sale must be
// paused. update_time grows as in SetStatus, so that Redis takes the new
// metadata over the old.
func (s *Vouchers) SetSegments(ctx context.Context, id int64, segments int, now time.Time) error {
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var prev time.Time
		var status domain.VoucherStatus
		var typ domain.VoucherType
		q := tx.NewSelect().Table("tb_voucher").Column("update_time", "status", "type").Where("id = ?", id)
		if IsPostgres(tx) {
			q = q.For("NO KEY UPDATE")
		}
		if err := q.Scan(ctx, &prev, &status, &typ); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return domain.NotFound("voucher", id)
			}
			return err
		}
		switch {
		case typ != domain.VoucherSeckill:
			return domain.SegmentsOfNonSeckill(id)
		case status != domain.StatusPaused:
			return domain.SegmentsWhileNotPaused(id)
		}
		next := now.UTC().Truncate(time.Microsecond)
		if floor := prev.UTC().Truncate(time.Microsecond).Add(time.Microsecond); next.Before(floor) {
			next = floor
		}
		if _, err := tx.NewUpdate().Table("tb_seckill_voucher").Set("segments = ?", segments).Where("voucher_id = ?", id).Exec(ctx); err != nil {
			return err
		}
		_, err := tx.NewUpdate().Table("tb_voucher").Set("update_time = ?", next).Where("id = ?", id).Exec(ctx)
		return err
	})
	if err != nil {
		if c := domain.ErrorCode(err); c == domain.CodeNotFound || c == domain.CodeBadInput {
			return err
		}
		return fmt.Errorf("set voucher %d segments: %w", id, err)
	}
	return nil
}

// SeckillsEndingAfter lists the seckill vouchers whose sale window ends
// after t: the ones whose stock must be present in Redis.
func (s *Vouchers) SeckillsEndingAfter(ctx context.Context, t time.Time) ([]domain.Voucher, error) {
	var rows []*voucherRow
	err := s.db.NewSelect().Model(&rows).Relation("Seckill").
		Where("v.type = ?", domain.VoucherSeckill).
		Where("seckill.end_time > ?", t.UTC()).
		Order("v.id ASC").
		Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("list live seckill vouchers: %w", err)
	}
	out := make([]domain.Voucher, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, nil
}

// Preload runs load on a consistent snapshot of a seckill voucher and, if
// load wrote the stock, records its load stamp in tb_voucher_redis_load,
// all while holding the voucher's tb_seckill_voucher row. The order writer
// takes the same row before it persists orders, so every order is either
// in the snapshot or persisted after the stamp is recorded, where the
// writer sees that the order's stamp differs and returns it to Redis (see
// OrderLogHandler). It answers NOT_FOUND for an id that is no seckill voucher.
func (s *Vouchers) Preload(ctx context.Context, id int64, load domain.Loader) error {
	return s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		locked, err := lockSeckillRows(ctx, tx, []int64{id})
		if err != nil {
			return err
		}
		v, err := getVoucher(ctx, tx, id)
		if err != nil {
			return err
		}
		if v.Seckill == nil {
			return domain.NotFound("seckill voucher", id)
		}
		stamp := locked[id].stamp
		snap := domain.LoadSnapshot{Voucher: v, Reload: stamp != "", Stale: stamp == DBSalesStamp}
		if snap.Users, err = liveOrderCounts(ctx, tx, id); err != nil {
			return err
		}
		if snap.Requests, err = requestIDs(ctx, tx, id); err != nil {
			return err
		}
		snap.Persisted = func(ctx context.Context, ids []int64) (map[int64]bool, error) { return storedOrders(ctx, tx, ids) }
		stamp, err = load(ctx, snap)
		if err != nil || stamp == "" {
			return err
		}
		_, err = tx.NewInsert().Model(&redisLoadRow{VoucherID: id, Stamp: stamp, LoadTime: time.Now().UTC()}).
			On("CONFLICT (voucher_id) DO UPDATE").Set("life = EXCLUDED.life, load_time = EXCLUDED.load_time").Exec(ctx)
		if err != nil {
			return fmt.Errorf("record redis load of voucher %d: %w", id, err)
		}
		return nil
	})
}

// requestIDs maps the request ids of a voucher's orders to their ids.
func requestIDs(ctx context.Context, db bun.IDB, voucherID int64) (map[string]int64, error) {
	var rows []struct {
		RequestID string `bun:"request_id"`
		ID        int64  `bun:"id"`
	}
	err := db.NewSelect().Table("tb_voucher_order").Column("request_id", "id").
		Where("voucher_id = ?", voucherID).Where("request_id IS NOT NULL").Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("read request ids of voucher %d: %w", voucherID, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.RequestID] = r.ID
	}
	return out, nil
}

// lockedVoucher is what the order writer needs of a voucher whose row it
// holds: the load stamp of its current Redis load ("" if none is
// recorded) and its per-user limit.
type lockedVoucher struct {
	stamp string
	limit int
}

// lockSeckillRows takes the tb_seckill_voucher rows of the vouchers, in id
// order (so that two transactions never wait for each other in a cycle),
// and then reads the load stamp of each voucher's current Redis load. The
// stamp is read by a statement of its own, after the lock is held: under
// READ COMMITTED a statement sees what was committed when it began, and
// one that waited for a reload's lock would return the stamp from before
// that reload. SQLite has one writer, so its transactions are serial
// already and need no row lock.
func lockSeckillRows(ctx context.Context, tx bun.Tx, ids []int64) (map[int64]lockedVoucher, error) {
	var locked []struct {
		VoucherID    int64 `bun:"voucher_id"`
		PerUserLimit int   `bun:"per_user_limit"`
	}
	q := tx.NewSelect().Table("tb_seckill_voucher").Column("voucher_id", "per_user_limit").
		Where("voucher_id IN (?)", bun.In(ids)).Order("voucher_id")
	if IsPostgres(tx) {
		q = q.For("UPDATE")
	}
	if err := q.Scan(ctx, &locked); err != nil {
		return nil, fmt.Errorf("lock seckill vouchers %v: %w", ids, err)
	}
	var rows []redisLoadRow
	if err := tx.NewSelect().Model(&rows).Where("voucher_id IN (?)", bun.In(ids)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("read redis loads of vouchers %v: %w", ids, err)
	}
	out := make(map[int64]lockedVoucher, len(ids))
	for _, l := range locked {
		out[l.VoucherID] = lockedVoucher{limit: l.PerUserLimit}
	}
	for _, r := range rows {
		lv := out[r.VoucherID]
		lv.stamp = r.Stamp
		out[r.VoucherID] = lv
	}
	return out, nil
}

// liveOrderCounts returns, per user, the number of live orders of a
// voucher recorded in the database: what Redis's per-user marks are
// rebuilt from.
func liveOrderCounts(ctx context.Context, db bun.IDB, voucherID int64) (map[int64]int, error) {
	var rows []struct {
		UserID int64 `bun:"user_id"`
		N      int   `bun:"n"`
	}
	err := db.NewSelect().Table("tb_voucher_order").
		ColumnExpr("user_id, COUNT(*) AS n").
		Where("voucher_id = ?", voucherID).
		Where("status NOT IN (?)", bun.In(domain.DeadOrderStatuses)).
		Group("user_id").
		Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("count live orders of voucher %d: %w", voucherID, err)
	}
	out := make(map[int64]int, len(rows))
	for _, r := range rows {
		out[r.UserID] = r.N
	}
	return out, nil
}

// storedOrders reports which of the order ids the database holds: orders
// of an order log that are already persisted (committed, not yet
// acknowledged) must not be counted as in flight.
func storedOrders(ctx context.Context, db bun.IDB, ids []int64) (map[int64]bool, error) {
	out := make(map[int64]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var stored []int64
	if err := db.NewSelect().Table("tb_voucher_order").Column("id").Where("id IN (?)", bun.In(ids)).Scan(ctx, &stored); err != nil {
		return nil, fmt.Errorf("look up %d orders of the order log: %w", len(ids), err)
	}
	for _, o := range stored {
		out[o] = true
	}
	return out, nil
}
