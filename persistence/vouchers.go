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
			VoucherID:    row.ID,
			InitialStock: *in.Stock,
			Stock:        *in.Stock,
			PerUserLimit: in.Limit(),
			BeginTime:    in.BeginAt.UTC(),
			EndTime:      in.EndAt.UTC(),
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
	row := new(voucherRow)
	err := s.db.NewSelect().Model(row).Relation("Seckill").Where("v.id = ?", id).Scan(ctx)
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

// SetStatus changes a voucher's status and returns the updated voucher.
func (s *Vouchers) SetStatus(ctx context.Context, id int64, status domain.VoucherStatus, now time.Time) (domain.Voucher, error) {
	res, err := s.db.NewUpdate().Table("tb_voucher").
		Set("status = ?", status).
		Set("update_time = ?", now.UTC()).
		Where("id = ?", id).Exec(ctx)
	if err != nil {
		return domain.Voucher{}, fmt.Errorf("set voucher %d status: %w", id, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return domain.Voucher{}, domain.NotFound("voucher", id)
	}
	return s.Get(ctx, id)
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

// LiveOrderCounts returns, per user, the number of live orders of a voucher
// recorded in the database: what Redis's per-user marks are rebuilt from.
func (s *Vouchers) LiveOrderCounts(ctx context.Context, voucherID int64) (map[int64]int, error) {
	var rows []struct {
		UserID int64 `bun:"user_id"`
		N      int   `bun:"n"`
	}
	err := s.db.NewSelect().Table("tb_voucher_order").
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
