package persistence

import (
	"time"

	"github.com/uptrace/bun"

	"flashsale/domain"
)

// voucherRow is a tb_voucher row.
type voucherRow struct {
	bun.BaseModel `bun:"table:tb_voucher,alias:v"`

	ID          int64                `bun:"id,pk"`
	ShopID      int64                `bun:"shop_id,notnull"`
	Title       string               `bun:"title,notnull"`
	SubTitle    *string              `bun:"sub_title"`
	Rules       *string              `bun:"rules"`
	PayValue    int64                `bun:"pay_value,notnull"`
	ActualValue int64                `bun:"actual_value,notnull"`
	Type        domain.VoucherType   `bun:"type,notnull"`
	Status      domain.VoucherStatus `bun:"status,notnull"`
	CreateTime  time.Time            `bun:"create_time,notnull"`
	UpdateTime  time.Time            `bun:"update_time,notnull"`

	Seckill *seckillRow `bun:"rel:has-one,join:id=voucher_id"`
}

// seckillRow is a tb_seckill_voucher row.
type seckillRow struct {
	bun.BaseModel `bun:"table:tb_seckill_voucher"`

	VoucherID    int64     `bun:"voucher_id,pk"`
	InitialStock int       `bun:"initial_stock,notnull"`
	Stock        int       `bun:"stock,notnull"`
	PerUserLimit int       `bun:"per_user_limit,notnull"`
	BeginTime    time.Time `bun:"begin_time,notnull"`
	EndTime      time.Time `bun:"end_time,notnull"`
}

// redisLoadRow is a tb_voucher_redis_load row: the life stamp of the load
// of a voucher's stock the stock Redis holds.
type redisLoadRow struct {
	bun.BaseModel `bun:"table:tb_voucher_redis_load"`

	VoucherID int64     `bun:"voucher_id,pk"`
	Life      string    `bun:"life,notnull"`
	LoadTime  time.Time `bun:"load_time,notnull"`
}

// ledgerRow is a tb_stock_ledger row.
type ledgerRow struct {
	bun.BaseModel `bun:"table:tb_stock_ledger"`

	VoucherID  int64     `bun:"voucher_id,notnull"`
	Delta      int       `bun:"delta,notnull"`
	Reason     string    `bun:"reason,notnull"`
	RefID      *int64    `bun:"ref_id"`
	CreateTime time.Time `bun:"create_time,notnull"`
}

// Ledger reasons (db contract).
const (
	ReasonPreheat   = "preheat"
	ReasonSale      = "sale"
	ReasonCancel    = "cancel"
	ReasonTimeout   = "timeout"
	ReasonRestock   = "restock"
	ReasonReconcile = "reconcile"
)

func (r *voucherRow) toDomain() domain.Voucher {
	v := domain.Voucher{
		ID:          r.ID,
		ShopID:      r.ShopID,
		Title:       r.Title,
		SubTitle:    r.SubTitle,
		Rules:       r.Rules,
		PayValue:    r.PayValue,
		ActualValue: r.ActualValue,
		Type:        r.Type,
		Status:      r.Status,
		CreatedAt:   r.CreateTime.UTC(),
		UpdatedAt:   r.UpdateTime.UTC(),
	}
	if r.Seckill != nil && r.Seckill.VoucherID != 0 {
		v.Seckill = &domain.Seckill{
			InitialStock: r.Seckill.InitialStock,
			Stock:        r.Seckill.Stock,
			PerUserLimit: r.Seckill.PerUserLimit,
			BeginAt:      r.Seckill.BeginTime.UTC(),
			EndAt:        r.Seckill.EndTime.UTC(),
		}
	}
	return v
}
