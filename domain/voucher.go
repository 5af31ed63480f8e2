package domain

import (
	"cmp"
	"math"
	"strings"
	"time"
	"unicode"
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

// Limits on voucher input. MaxStock comes from the contract; MaxValue is
// the largest GraphQL Int (32-bit signed): the schema's Int fields cannot
// give back a larger amount, so none is accepted.
const (
	MaxStock        = 100_000_000
	MaxTitleLen     = 200
	MaxTextLen      = 4000
	MaxPerUserLimit = 1000
	// MaxSegments bounds a seckill voucher's segments: each is one actor
	// identity, so a hot voucher's grabs spread over members.
	MaxSegments = 64
	MaxValue    = math.MaxInt32
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
	// Segments is how many actor identities share the voucher's grabs
	// (1..MaxSegments): a user's grabs go to segment hash(user) mod
	// Segments. All segments sell from the one stock counter.
	Segments int
	// Gate is what a grab needs besides a token, against bots and
	// scalpers.
	Gate Gate
	// Room is the voucher's waiting room: with one, a grab needs the
	// ticket of the user's admission from its line.
	Room WaitingRoom
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
	Segments     *int
	// Gate is SECKILL only; the zero value is an open sale.
	Gate Gate
	// Room is SECKILL only; zero pace and open tickets take the defaults.
	Room WaitingRoom
}

// Validate checks the input and returns the first problem as a
// CodeBadInput error naming the field.
func (n NewVoucher) Validate() error {
	if n.ShopID <= 0 {
		return InvalidField("shopId", "must be a positive id")
	}
	if strings.TrimSpace(n.Title) == "" {
		return InvalidField("title", "must not be empty")
	}
	if err := checkText("title", n.Title, MaxTitleLen, false); err != nil {
		return err
	}
	if n.SubTitle != nil {
		if err := checkText("subTitle", *n.SubTitle, MaxTextLen, true); err != nil {
			return err
		}
	}
	if n.Rules != nil {
		if err := checkText("rules", *n.Rules, MaxTextLen, true); err != nil {
			return err
		}
	}
	switch {
	case n.PayValue < 0 || n.PayValue > MaxValue:
		return InvalidField("payValue", "must be between 0 and %d", MaxValue)
	case n.ActualValue < 0 || n.ActualValue > MaxValue:
		return InvalidField("actualValue", "must be between 0 and %d", MaxValue)
	}
	if n.Type == VoucherNormal {
		switch {
		case n.Stock != nil:
			return InvalidField("stock", "only SECKILL vouchers have stock")
		case n.BeginAt != nil || n.EndAt != nil:
			return InvalidField("beginAt", "only SECKILL vouchers have a sale window")
		case n.PerUserLimit != nil && *n.PerUserLimit != 1:
			return InvalidField("perUserLimit", "only SECKILL vouchers have a per-user limit")
		case n.Segments != nil && *n.Segments != 1:
			return InvalidField("segments", "only SECKILL vouchers have segments")
		case n.Gate != Gate{}:
			return InvalidField("requireTicket", "only SECKILL vouchers have a grab gate")
		case n.Room != WaitingRoom{}:
			return InvalidField("waitingRoom", "only SECKILL vouchers have a waiting room")
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
		// Not bounded by the stock: a restock can make a larger limit mean something.
		return InvalidField("perUserLimit", "must be between 1 and %d", MaxPerUserLimit)
	case n.Segments != nil && !ValidSegments(*n.Segments):
		return InvalidField("segments", "must be between 1 and %d", MaxSegments)
	case !n.Gate.Challenge.Valid():
		return InvalidField("challenge", "unknown challenge kind")
	}
	return n.Room.validate()
}

// validate checks a room's settings as given at creation: a pace or a
// number of open tickets only with a room, and within their bounds (0:
// the default).
func (r WaitingRoom) validate() error {
	switch {
	case !r.Enabled && (r.AdmitPerSecond != 0 || r.MaxActive != 0 || r.Paused):
		return InvalidField("waitingRoom", "admitPerSecond, maxActive and a paused room need waitingRoom: true")
	case r.AdmitPerSecond < 0 || r.AdmitPerSecond > AdmitPerSecondMax:
		return InvalidField("admitPerSecond", "must be between 1 and %d", AdmitPerSecondMax)
	case r.MaxActive < 0 || r.MaxActive > MaxActiveMax:
		return InvalidField("maxActive", "must be between 1 and %d", MaxActiveMax)
	}
	return nil
}

// WithDefaults is the room with a zero pace and a zero number of open
// tickets set to their defaults (a room that is not enabled stays zero).
func (r WaitingRoom) WithDefaults() WaitingRoom {
	if r.Enabled {
		r.AdmitPerSecond = cmp.Or(r.AdmitPerSecond, AdmitPerSecondDefault)
		r.MaxActive = cmp.Or(r.MaxActive, MaxActiveDefault)
	}
	return r
}

// Validate checks a change of a room's settings.
func (c RoomChange) Validate() error {
	switch {
	case c.AdmitPerSecond != nil && (*c.AdmitPerSecond < 1 || *c.AdmitPerSecond > AdmitPerSecondMax):
		return InvalidField("admitPerSecond", "must be between 1 and %d", AdmitPerSecondMax)
	case c.MaxActive != nil && (*c.MaxActive < 1 || *c.MaxActive > MaxActiveMax):
		return InvalidField("maxActive", "must be between 1 and %d", MaxActiveMax)
	}
	return nil
}

// RoomOfNoRoom answers a room change of a voucher that has no room.
func RoomOfNoRoom(id int64) *Error {
	return InvalidField("voucherId", "voucher %d has no waiting room (it is set at creation: waitingRoom: true)", id)
}

// ValidSegments reports whether n is an allowed segment count.
func ValidSegments(n int) bool { return n >= 1 && n <= MaxSegments }

// SegmentCount returns the segment count, defaulting to one.
func (n NewVoucher) SegmentCount() int {
	if n.Segments == nil {
		return 1
	}
	return *n.Segments
}

// checkText rejects what Postgres cannot store in a text column (NUL,
// invalid UTF-8) and control characters that only garble a page or a log
// line; multiline texts may hold newlines and tabs.
func checkText(field, s string, maxLen int, multiline bool) error {
	if !utf8.ValidString(s) {
		return InvalidField(field, "must be valid UTF-8")
	}
	if utf8.RuneCountInString(s) > maxLen {
		return InvalidField(field, "must be at most %d characters", maxLen)
	}
	for _, r := range s {
		if unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\t')) {
			if multiline {
				return InvalidField(field, "must not contain control characters (U+%04X) other than newline and tab", r)
			}
			return InvalidField(field, "must not contain control characters (U+%04X)", r)
		}
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
	// OmitTexts leaves a voucher's subTitle and rules out of a list (nil):
	// the caller selected neither, and a page of long texts is most of
	// what reading it costs.
	OmitTexts bool
}

// TextSizes are the byte lengths of the longest title, subTitle and rules
// stored: what one voucher's texts may add to an answer, known before it
// is read (see the request cost in graph.Complexity).
type TextSizes struct {
	Title, SubTitle, Rules int
}

// Raise returns the longest of s and the texts of v.
func (s TextSizes) Raise(v NewVoucher) TextSizes {
	s.Title = max(s.Title, len(v.Title))
	if v.SubTitle != nil {
		s.SubTitle = max(s.SubTitle, len(*v.SubTitle))
	}
	if v.Rules != nil {
		s.Rules = max(s.Rules, len(*v.Rules))
	}
	return s
}

// Page bounds.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// StatusOfEndedVoucher answers a pause or resume of a sale that ended.
func StatusOfEndedVoucher(id int64) *Error {
	return InvalidField("status", "voucher %d has ended; an ended sale cannot be paused or resumed", id)
}

// GateOfNonSeckill answers a gate change of a voucher that is no seckill.
func GateOfNonSeckill(id int64) *Error {
	return InvalidField("id", "voucher %d is not a SECKILL voucher: it has no grab gate", id)
}

// GateWhileNotPaused answers a gate change of a sale that is not paused.
func GateWhileNotPaused(id int64) *Error {
	return InvalidField("id", "voucher %d is not PAUSED: pause it (setVoucherStatus) before changing its grab gate", id)
}

// SegmentsOfNonSeckill answers a segment change of a voucher that is no
// seckill.
func SegmentsOfNonSeckill(id int64) *Error {
	return InvalidField("voucherId", "voucher %d is not a SECKILL voucher; only those have segments", id)
}

// SegmentsWhileNotPaused answers a segment change of a sale that is not
// paused.
func SegmentsWhileNotPaused(id int64) *Error {
	return InvalidField("segments", "voucher %d is not PAUSED; pause the sale before changing its segments", id)
}

// ErrLiveStockUnavailable is what a client hears when live stock cannot
// be read from Redis in time: safe to retry.
var ErrLiveStockUnavailable = Errorf(CodeUnavailable, "live stock is unavailable; retry later")
