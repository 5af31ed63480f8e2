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
	Segments     int       `bun:"segments,notnull"`
	// RequireTicket and Challenge are the voucher's grab gate against bots.
	RequireTicket bool                 `bun:"require_ticket,notnull"`
	Challenge     domain.ChallengeKind `bun:"challenge,notnull"`
	// The voucher's waiting room (domain.WaitingRoom).
	WaitingRoom    bool `bun:"waiting_room,notnull"`
	AdmitPerSecond int  `bun:"admit_per_second,notnull"`
	MaxActive      int  `bun:"max_active,notnull"`
	RoomPaused     bool `bun:"room_paused,notnull"`
}

// redisLoadRow is a tb_voucher_redis_load row: the load stamp of the load
// of a voucher's stock the stock Redis holds (column "life", its wire name).
type redisLoadRow struct {
	bun.BaseModel `bun:"table:tb_voucher_redis_load"`

	VoucherID int64     `bun:"voucher_id,pk"`
	Stamp     string    `bun:"life,notnull"`
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

// orderRow is a tb_voucher_order row.
type orderRow struct {
	bun.BaseModel `bun:"table:tb_voucher_order"`

	ID         int64              `bun:"id,pk"`
	UserID     int64              `bun:"user_id,notnull"`
	VoucherID  int64              `bun:"voucher_id,notnull"`
	Status     domain.OrderStatus `bun:"status,notnull"`
	Slot       *int               `bun:"slot"`
	CreateTime time.Time          `bun:"create_time,notnull"`
	PayTime    *time.Time         `bun:"pay_time"`
	RequestID  *string            `bun:"request_id"`
	CancelTime *time.Time         `bun:"cancel_time"`
	UpdateTime time.Time          `bun:"update_time,notnull"`
	// CancelReason is domain.CancelByOwner or domain.CancelTimeout for a
	// cancelled order.
	CancelReason *string `bun:"cancel_reason"`
}

// voucherUserRow is a tb_voucher_user row: a user's live orders of a
// voucher, never above the voucher's limit (a CHECK).
type voucherUserRow struct {
	bun.BaseModel `bun:"table:tb_voucher_user"`

	VoucherID    int64 `bun:"voucher_id,pk"`
	UserID       int64 `bun:"user_id,pk"`
	Live         int   `bun:"live,notnull"`
	PerUserLimit int   `bun:"per_user_limit,notnull"`
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
			Segments:     max(r.Seckill.Segments, 1),
			Gate:         domain.Gate{RequireTicket: r.Seckill.RequireTicket, Challenge: r.Seckill.Challenge},
			Room: domain.WaitingRoom{Enabled: r.Seckill.WaitingRoom, AdmitPerSecond: r.Seckill.AdmitPerSecond,
				MaxActive: r.Seckill.MaxActive, Paused: r.Seckill.RoomPaused},
		}
	}
	return v
}
