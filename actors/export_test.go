package actors

import (
	"time"

	"github.com/cespare/xxhash/v2"
	dto "github.com/prometheus/client_model/go"

	"flashsale/domain"
)

// Views of a router's state for the tests, so that they wait for a state
// instead of sleeping for it. Compiled into tests only.

// Queued reports how many grabs of the voucher this node holds unanswered
// (0 when it runs no actor for it).
func Queued(r *Router, voucherID int64) int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var n int64
	for key, ref := range r.vouchers {
		if key.voucher == voucherID {
			n += ref.queued.Load()
		}
	}
	return n
}

// Closing reports whether Close has begun (it takes no new grabs and holds
// its own copy of the actors it waits for).
func Closing(r *Router) bool { return r.closed.Load() }

// Hosted lists the segments (voucher, segment) this node runs an
// activation of.
func Hosted(r *Router) [][2]int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out [][2]int64
	for key := range r.vouchers {
		out = append(out, [2]int64{key.voucher, int64(key.seg)})
	}
	return out
}

// GrabOn grabs through this node's own activation of the segment, whatever
// the placement says: a test's way to force two members to host one
// segment.
func GrabOn(r *Router, req domain.GrabRequest, seg int) domain.GrabResult {
	msg := &grabMsg{user: req.UserID, req: r.requestID(req), reply: make(chan domain.GrabResult, 1), deadline: time.Now().Add(r.opts.GrabTimeout)}
	if !r.send(segKey{voucher: req.VoucherID, seg: seg}, msg) {
		return domain.GrabResult{Code: domain.SeckillUnavailable}
	}
	return <-msg.reply
}

// ProtoactorLogger is the logger protoactor-go is given.
var ProtoactorLogger = protoactorLogger

// Owner is the member that hosts a segment among members.
func Owner(members []string, voucher int64, seg int) string {
	ms := make([]placed, len(members))
	for i, a := range members {
		ms[i] = placed{addr: a, seed: xxhash.Sum64String(a)}
	}
	return owner(ms, xxhash.Sum64String(segKey{voucher, seg}.identity()))
}

// SaleMemoryDrops is how many records of the sales activations of this
// process gave up.
func SaleMemoryDrops() float64 {
	var m dto.Metric
	if err := saleMemoryDrops.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// ProtoactorLoggerAt is ProtoactorLogger on a given clock.
var ProtoactorLoggerAt = newProtoactorLogger
