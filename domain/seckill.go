package domain

import "time"

// SeckillCode is the business outcome of one grab. Outcomes are data,
// never errors: the contract's SeckillCode values.
type SeckillCode string

// The contract's grab outcomes.
const (
	SeckillOK           SeckillCode = "OK"
	SeckillNotFound     SeckillCode = "NOT_FOUND"
	SeckillNotStarted   SeckillCode = "NOT_STARTED"
	SeckillEnded        SeckillCode = "ENDED"
	SeckillPaused       SeckillCode = "PAUSED"
	SeckillSoldOut      SeckillCode = "SOLD_OUT"
	SeckillLimitReached SeckillCode = "LIMIT_REACHED"
	SeckillUnavailable  SeckillCode = "UNAVAILABLE"
	// SeckillRateLimited is not a contract outcome: the GraphQL layer turns
	// it into a RATE_LIMITED error carrying retryAfterMs.
	SeckillRateLimited SeckillCode = "RATE_LIMITED"
)

// Valid reports whether c is one of the codes above (a reply from another
// cluster member is checked with it).
func (c SeckillCode) Valid() bool {
	switch c {
	case SeckillOK, SeckillNotFound, SeckillNotStarted, SeckillEnded, SeckillPaused,
		SeckillSoldOut, SeckillLimitReached, SeckillUnavailable, SeckillRateLimited:
		return true
	}
	return false
}

// GrabRequest is one user's attempt at one voucher.
type GrabRequest struct {
	VoucherID int64
	UserID    int64
	// ClientIP feeds the per-IP rate limit; empty skips it.
	ClientIP string
	// RequestID is the client's idempotency key (empty: none). The same
	// user and key get the first sale again, so a client that was told
	// UNAVAILABLE, or lost the reply, can retry without buying twice.
	RequestID string
}

// MaxRequestIDLen bounds a client's idempotency key: it is stored with
// every sale until the sale ends, and in the order log.
const MaxRequestIDLen = 64

// CheckRequestID checks a client's idempotency key: 1 to MaxRequestIDLen
// printable ASCII characters, so that it is safe in a Redis key, a log
// line and a database column, and two keys that look alike are alike.
func CheckRequestID(key string) error {
	if key == "" || len(key) > MaxRequestIDLen {
		return InvalidField("requestId", "must be 1 to %d characters long", MaxRequestIDLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return InvalidField("requestId", "must hold printable ASCII characters only (byte %d is 0x%02X)", i, c)
		}
	}
	return nil
}

// GrabResult is the answer to one grab. OrderID is set when Code is OK: the
// order is then in the durable order log and will reach the database.
type GrabResult struct {
	Code    SeckillCode
	OrderID int64
	// RetryAfter is set with SeckillRateLimited.
	RetryAfter time.Duration
}

// Message is a short human sentence for the code.
func (c SeckillCode) Message() string {
	switch c {
	case SeckillOK:
		return "grabbed: the order is placed, pay before the deadline"
	case SeckillNotFound:
		return "no such seckill voucher"
	case SeckillNotStarted:
		return "the sale has not started yet"
	case SeckillEnded:
		return "the sale has ended"
	case SeckillPaused:
		return "the sale is paused"
	case SeckillSoldOut:
		return "sold out"
	case SeckillLimitReached:
		return "you already hold the most orders allowed for this voucher"
	default:
		return "the service is busy; try again shortly"
	}
}
