package domain

import (
	"math/rand/v2"
	"time"
)

// Red packets: a sum split up front into random packets, one per person,
// grabbed like a seckill voucher (a sequencer per red packet, one Redis
// script call per batch, an order log written to the database in batches)
// and refunded to its creator when it expires.

// Limits of createRedPacket. RedPacketMaxCount keeps an accepted create
// within a request's budget (a few milliseconds of the service's CPU, under
// a megabyte): every packet is written to Postgres and Redis up front,
// and 5,000 of them cost 2.9-3.8 ms of CPU where 10,000 cost 4.3-7.0 ms
// (docs/BENCHMARKS.md, "What a createRedPacket costs").
const (
	RedPacketMaxCount      = 5_000
	RedPacketMaxCents      = 100_000_000
	RedPacketMinExpiry     = time.Second
	RedPacketMaxExpiry     = 7 * 24 * time.Hour
	RedPacketDefaultExpiry = 24 * time.Hour
)

// NewRedPacket is a createRedPacket request, checked by Check.
type NewRedPacket struct {
	CreatorID  int64
	TotalCents int64
	Count      int
	Expiry     time.Duration
}

// Check validates the request: a CodeBadInput error names the field.
func (n NewRedPacket) Check() error {
	switch {
	case n.Count < 1 || n.Count > RedPacketMaxCount:
		return InvalidField("count", "must be 1 .. %d, got %d", RedPacketMaxCount, n.Count)
	case n.TotalCents < int64(n.Count) || n.TotalCents > RedPacketMaxCents:
		return InvalidField("totalCents", "must be count (%d) .. %d cents, got %d: every packet holds at least 1 cent", n.Count, RedPacketMaxCents, n.TotalCents)
	case n.Expiry < RedPacketMinExpiry || n.Expiry > RedPacketMaxExpiry:
		return InvalidField("expiresInSeconds", "must be 1 .. %d seconds, got %d", int(RedPacketMaxExpiry/time.Second), int64(n.Expiry/time.Second))
	}
	return nil
}

// RedPacket is a red packet as its readers see it. Remaining* are live
// (Redis) while it runs; after its refund they are what was refunded.
type RedPacket struct {
	ID             int64
	CreatorID      int64
	TotalCents     int64
	Count          int
	RemainingCount int
	RemainingCents int64
	ExpiresAt      time.Time
	CreatedAt      time.Time
	// Refunded is set once the unclaimed rest went back to the creator.
	Refunded *time.Time
}

// RedPacketQuota bounds the red packets of one creator; 0 is no bound.
type RedPacketQuota struct {
	// MaxOpen is how many open red packets (neither refunded nor fully
	// grabbed) the creator may have at once.
	MaxOpen int
	// MaxPerDay is how many red packets the creator may create within
	// RedPacketDay (a rolling day, not a calendar day).
	MaxPerDay int
}

// RedPacketDay is the window of RedPacketQuota.MaxPerDay.
const RedPacketDay = 24 * time.Hour

// RedPacketOverQuota is why a create was refused: each field is set for
// the bound that was reached.
type RedPacketOverQuota struct {
	// Open are the expiries of the creator's open red packets, earliest
	// first, when MaxOpen of them are open.
	Open []time.Time
	// DayFreesAt, when MaxPerDay red packets were created within
	// RedPacketDay, is when the one whose leaving the window lets the
	// next create pass leaves it.
	DayFreesAt time.Time
}

// RedPacketNotFound reports an unknown red packet.
func RedPacketNotFound(id int64) *Error { return NotFound("red packet", id) }

// RedPacketCode is a grab's outcome (the contract's GrabCode).
type RedPacketCode string

// The outcomes of grabRedPacket.
const (
	RedPacketOK             RedPacketCode = "OK"
	RedPacketEmpty          RedPacketCode = "EMPTY"
	RedPacketAlreadyGrabbed RedPacketCode = "ALREADY_GRABBED"
	RedPacketExpired        RedPacketCode = "EXPIRED"
	RedPacketNotFoundCode   RedPacketCode = "NOT_FOUND"
	RedPacketUnavailable    RedPacketCode = "UNAVAILABLE"
)

// Message is the human text of a code.
func (c RedPacketCode) Message() string {
	switch c {
	case RedPacketOK:
		return "you grabbed a packet"
	case RedPacketEmpty:
		return "every packet has been grabbed"
	case RedPacketAlreadyGrabbed:
		return "you already grabbed a packet of this red packet"
	case RedPacketExpired:
		return "the red packet has expired"
	case RedPacketNotFoundCode:
		return "no such red packet"
	}
	return "the service is busy; try again"
}

// RedPacketGrab is one grab as the sequencer hands it to the store: the
// request id recognises a retry of the same grab.
type RedPacketGrab struct {
	RequestID string
	UserID    int64
}

// RedPacketResult is a grab's answer. AmountCents is set for OK (and for
// ALREADY_GRABBED: what the user got the first time).
type RedPacketResult struct {
	Code        RedPacketCode
	AmountCents int64
}

// RedPacketState is what a sequencer may cache about a red packet to
// answer EMPTY, EXPIRED and NOT_FOUND from memory.
type RedPacketState struct {
	Found     bool
	ExpiresAt time.Time
	Left      int // packets not grabbed yet
}

// RedPacketBatch is the store's answer to a batch of grabs: one result per
// grab, in order, and the state the batch left.
type RedPacketBatch struct {
	State   RedPacketState
	Results []RedPacketResult
}

// SplitRedPacket splits total cents into count packets by the "double
// average" rule: each packet but the last is drawn uniformly from 1 ..
// 2 × (what is left ÷ packets left), so no packet exceeds twice the mean
// of what remains and every packet that follows still gets at least 1
// cent; the last takes the rest. Every position has the same expected
// amount (total ÷ count); later positions vary more. See docs/DECISIONS.md.
// It needs 1 <= count <= total.
func SplitRedPacket(total int64, count int, rnd *rand.Rand) []int64 {
	out := make([]int64, count)
	left := total
	for i := range count - 1 {
		packets := int64(count - i)
		hi := min(2*left/packets, left-(packets-1))
		out[i] = 1 + rnd.Int64N(hi)
		left -= out[i]
	}
	out[count-1] = left
	return out
}
