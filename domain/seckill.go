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

// GrabRequest is one user's attempt at one voucher.
type GrabRequest struct {
	VoucherID int64
	UserID    int64
	// ClientIP feeds the per-IP rate limit; empty skips it.
	ClientIP string
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
