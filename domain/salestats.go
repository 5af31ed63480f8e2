package domain

import (
	"math/bits"
	"time"
)

// SaleCodes are the answers a sale's figures count grabs by: the grab
// outcomes, and FORBIDDEN for a grab the gate refused (an error to the
// caller, but an answer of the sale all the same). The order is the
// figures' and the console's.
var SaleCodes = [...]string{
	string(SeckillOK), string(SeckillSoldOut), string(SeckillLimitReached), string(SeckillRateLimited),
	string(SeckillUnavailable), "FORBIDDEN", string(SeckillNotStarted), string(SeckillPaused),
	string(SeckillEnded), string(SeckillNotFound),
}

// SaleForbidden is SaleCodes' index of a grab the gate refused.
const SaleForbidden = 5

// SaleCodeIndex is code's index in SaleCodes; an unknown code counts as
// UNAVAILABLE, so every answer is counted once.
func SaleCodeIndex(code SeckillCode) int {
	switch code {
	case SeckillOK:
		return 0
	case SeckillSoldOut:
		return 1
	case SeckillLimitReached:
		return 2
	case SeckillRateLimited:
		return 3
	case SeckillNotStarted:
		return 6
	case SeckillPaused:
		return 7
	case SeckillEnded:
		return 8
	case SeckillNotFound:
		return 9
	}
	return 4
}

// LatencyBuckets is how many buckets a second's latency histogram has:
// four a doubling of microseconds, so a quantile read from it is within
// 19 % of the true one, up to 2^25 µs (33 s), which bounds any grab.
const LatencyBuckets = 100

// LatencyBucket is the histogram bucket of a grab that took d.
func LatencyBucket(d time.Duration) int {
	us := uint64(max(d.Microseconds(), 0))
	if us < 4 {
		return int(us)
	}
	e := bits.Len64(us) - 1 // 2^e <= us < 2^(e+1), e >= 2
	i := 4*(e-1) + int((us>>(e-2))&3)
	return min(i, LatencyBuckets-1)
}

// latencyBounds are bucket i's lower and upper bounds in microseconds.
func latencyBounds(i int) (lo, hi float64) {
	if i < 4 {
		return float64(i), float64(i + 1)
	}
	e := i/4 + 1
	step := uint64(1) << (e - 2)
	l := (4 + uint64(i%4)) * step
	return float64(l), float64(l + step)
}

// SaleSecond is what a sale answered in one second: grabs by answer and
// a histogram of their latency (as their caller waited for them). A node
// counts its own; the cluster's figures are the sum of every node's
// (Add), which a histogram allows and averages do not.
type SaleSecond struct {
	VoucherID int64
	// Second is the unix second the figures are of.
	Second  int64
	Codes   [len(SaleCodes)]int64
	Latency [LatencyBuckets]int64
	// Nodes is how many nodes answered grabs in that second.
	Nodes int64
}

// Add adds o's counts to s.
func (s *SaleSecond) Add(o SaleSecond) {
	for i, n := range o.Codes {
		s.Codes[i] += n
	}
	for i, n := range o.Latency {
		s.Latency[i] += n
	}
	s.Nodes += o.Nodes
}

// Total is the grabs answered in the second.
func (s *SaleSecond) Total() int64 {
	var n int64
	for _, c := range s.Codes {
		n += c
	}
	return n
}

// Quantile is the q-quantile (0 < q <= 1) of the second's grab latency,
// interpolated within its bucket; false when no grab was timed.
func (s *SaleSecond) Quantile(q float64) (time.Duration, bool) {
	var total int64
	for _, n := range s.Latency {
		total += n
	}
	if total == 0 {
		return 0, false
	}
	rank := q * float64(total)
	var seen int64
	for i, n := range s.Latency {
		if n == 0 {
			continue
		}
		if float64(seen+n) >= rank {
			lo, hi := latencyBounds(i)
			within := (rank - float64(seen)) / float64(n)
			return time.Duration((lo + (hi-lo)*within) * float64(time.Microsecond)), true
		}
		seen += n
	}
	_, hi := latencyBounds(LatencyBuckets - 1)
	return time.Duration(hi * float64(time.Microsecond)), true
}

// SaleStats is one second of a voucher's sale as the console charts it:
// the cluster's grabs of the second (Last), the stock now, and the
// writer's lag as orders sold against orders stored.
type SaleStats struct {
	VoucherID int64
	// Last is the latest whole second every node has reported.
	Last SaleSecond
	// Remaining and Sold are the live stock (Redis): Sold counts the
	// orders live or in flight.
	Remaining, Sold int
	// Answered is the grabs answered OK since the voucher's first grab,
	// cluster-wide (a retry of a bought request id counts again).
	Answered int64
	// Stored is the voucher's live orders in the database; Sold - Stored
	// is the order writer's lag.
	Stored int
	// Room is the waiting room's figures; nil for a voucher without one.
	Room *RoomFigures
	At   time.Time
}

// RoomFigures are a waiting room's counts.
type RoomFigures struct {
	// Waiting is the users in the line now.
	Waiting int64
	// Admitted is the users admitted since the room opened.
	Admitted int64
}
