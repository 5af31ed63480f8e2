package domain

import (
	"strings"
	"time"
	"unicode/utf8"
)

// VoucherType is stored as tb_voucher.type.
type VoucherType int16

// Voucher types (db contract codes).
const (
	VoucherNormal  VoucherType = 0
	VoucherSeckill VoucherType = 1
)

// VoucherStatus is stored as tb_voucher.status.
type VoucherStatus int16

// Voucher statuses (db contract codes).
const (
	StatusActive VoucherStatus = 1
	StatusPaused VoucherStatus = 2
	StatusEnded  VoucherStatus = 3
)

// Valid reports whether s is one of the contract's statuses.
func (s VoucherStatus) Valid() bool { return s >= StatusActive && s <= StatusEnded }

// Limits on voucher input. MaxStock comes from the contract.
const (
	MaxStock        = 100_000_000
	MaxTitleLen     = 200
	MaxTextLen      = 4000
	MaxPerUserLimit = 1000
)

// Voucher is a shop's voucher; Seckill is set for flash-sale vouchers.
type Voucher struct {
	ID          int64
	ShopID      int64
	Title       string
	SubTitle    *string
	Rules       *string
	PayValue    int64
	ActualValue int64
	Type        VoucherType
	Status      VoucherStatus
	Seckill     *Seckill
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Seckill is the flash-sale part of a voucher.
type Seckill struct {
	// InitialStock is the stock at creation plus every restock.
	InitialStock int
	// Stock is the database's count of units not taken by a persisted live
	// order; it trails the live stock in Redis while orders are in flight.
	Stock int
	// Remaining is the live stock in Redis when the voucher was read.
	Remaining    int
	PerUserLimit int
	BeginAt      time.Time
	EndAt        time.Time
}

// NewVoucher is the input of voucher creation.
type NewVoucher struct {
	ShopID       int64
	Title        string
	SubTitle     *string
	Rules        *string
	PayValue     int64
	ActualValue  int64
	Type         VoucherType
	Stock        *int
	BeginAt      *time.Time
	EndAt        *time.Time
	PerUserLimit *int
}

// Validate checks the input and returns the first problem as a
// CodeBadInput error naming the field.
func (n NewVoucher) Validate() error {
	title := strings.TrimSpace(n.Title)
	switch {
	case n.ShopID <= 0:
		return InvalidField("shopId", "must be a positive id")
	case title == "":
		return InvalidField("title", "must not be empty")
	case utf8.RuneCountInString(n.Title) > MaxTitleLen:
		return InvalidField("title", "must be at most %d characters", MaxTitleLen)
	case n.SubTitle != nil && utf8.RuneCountInString(*n.SubTitle) > MaxTextLen:
		return InvalidField("subTitle", "must be at most %d characters", MaxTextLen)
	case n.Rules != nil && utf8.RuneCountInString(*n.Rules) > MaxTextLen:
		return InvalidField("rules", "must be at most %d characters", MaxTextLen)
	case n.PayValue < 0:
		return InvalidField("payValue", "must be >= 0")
	case n.ActualValue < 0:
		return InvalidField("actualValue", "must be >= 0")
	}
	if n.Type == VoucherNormal {
		switch {
		case n.Stock != nil:
			return InvalidField("stock", "only SECKILL vouchers have stock")
		case n.BeginAt != nil || n.EndAt != nil:
			return InvalidField("beginAt", "only SECKILL vouchers have a sale window")
		case n.PerUserLimit != nil && *n.PerUserLimit != 1:
			return InvalidField("perUserLimit", "only SECKILL vouchers have a per-user limit")
		}
		return nil
	}
	if n.Type != VoucherSeckill {
		return InvalidField("type", "unknown voucher type")
	}
	switch {
	case n.Stock == nil:
		return InvalidField("stock", "is required for SECKILL vouchers")
	case *n.Stock < 1 || *n.Stock > MaxStock:
		return InvalidField("stock", "must be between 1 and %d", MaxStock)
	case n.BeginAt == nil:
		return InvalidField("beginAt", "is required for SECKILL vouchers")
	case n.EndAt == nil:
		return InvalidField("endAt", "is required for SECKILL vouchers")
	case !n.BeginAt.Before(*n.EndAt):
		return InvalidField("endAt", "must be after beginAt")
	case n.PerUserLimit != nil && (*n.PerUserLimit < 1 || *n.PerUserLimit > MaxPerUserLimit):
		return InvalidField("perUserLimit", "must be between 1 and %d", MaxPerUserLimit)
	}
	return nil
}

// Limit returns the per-user limit, defaulting to one order per person.
func (n NewVoucher) Limit() int {
	if n.PerUserLimit == nil {
		return 1
	}
	return *n.PerUserLimit
}

// StockLevel is the live stock of a seckill voucher as Redis sees it.
type StockLevel struct {
	VoucherID int64
	// Initial is the stock at creation plus every restock.
	Initial   int
	Remaining int
	At        time.Time
}

// Sold is the number of units taken (orders live or in flight).
func (s StockLevel) Sold() int { return s.Initial - s.Remaining }

// Page asks for up to First items after the cursor id After (0 = start).
type Page struct {
	First int
	After int64
}

// Page bounds.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)
