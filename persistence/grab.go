package persistence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// Grab outcome codes as the script returns them.
var scriptCodes = []domain.SeckillCode{
	domain.SeckillOK, domain.SeckillNotFound, domain.SeckillNotStarted, domain.SeckillEnded,
	domain.SeckillPaused, domain.SeckillSoldOut, domain.SeckillLimitReached, domain.SeckillUnavailable,
}

// grabScript sells a batch of grabs of one voucher: scripts/grab.lua.
var grabScript = newScript("grab")

// Grabs runs the grab scripts on the stock Redis.
type Grabs struct {
	rdb redis.UniversalClient
	// Acks, when it asks for replicas, makes a batch's answers wait until
	// that many replicas hold its writes; a batch not acknowledged in time
	// fails with ErrNotAcknowledged (undecided).
	Acks Acks
	// Shadow, if set, keeps every order a batch answers OK, before the
	// answer is given, until an order writer has read it (SoldShadow).
	Shadow *SoldShadow
}

// NewGrabs returns the grab store.
func NewGrabs(rdb redis.UniversalClient) *Grabs { return &Grabs{rdb: rdb} }

// claimScript fences a new actor activation and reads the voucher: scripts/claim.lua.
var claimScript = newScript("claim")

// Claim takes a new fencing token for an activation of the voucher's actor
// and reads the voucher's state, in one round trip. For a voucher Redis
// does not know it returns fence 0 and a state that is not Found, and
// writes nothing.
func (g *Grabs) Claim(ctx context.Context, voucherID int64, seg int) (int64, domain.VoucherState, error) {
	fence, st, _, err := g.claim(ctx, voucherID, seg, "")
	return fence, st, err
}

// Refence takes a new fencing token for the activation that holds fence,
// only while fence is still the newest (superseded reports that it is
// not, and nothing was written), and reads the voucher's state as Claim
// does. Calls made under the old fence are refused from then on, so a
// call Redis held undecided can no longer sell.
func (g *Grabs) Refence(ctx context.Context, voucherID int64, seg int, fence int64) (int64, domain.VoucherState, bool, error) {
	return g.claim(ctx, voucherID, seg, strconv.FormatInt(fence, 10))
}

func (g *Grabs) claim(ctx context.Context, voucherID int64, seg int, expect string) (int64, domain.VoucherState, bool, error) {
	seen := time.Now()
	keys := []string{metaKey(voucherID), stockKey(voucherID), fenceKey(voucherID, seg), reqKey(voucherID), usersKey(voucherID)}
	claim := strconv.FormatInt(randomID(), 36)
	raw, err := claimScript.Run(ctx, g.rdb, keys, claim, expect).Slice()
	claimScriptDuration.Observe(time.Since(seen).Seconds())
	if err != nil {
		return 0, domain.VoucherState{}, false, fmt.Errorf("claim voucher %d: %w", voucherID, notSent(err))
	}
	fence, _ := raw[0].(int64)
	switch fence {
	case -1:
		return 0, domain.VoucherState{}, true, nil
	case -2:
		return 0, domain.VoucherState{}, false, fmt.Errorf("claim voucher %d: %w", voucherID, redisEvicts(raw[1]))
	}
	if fence == 0 || len(raw) != 11 {
		return 0, domain.VoucherState{}, false, nil
	}
	stock, _ := raw[5].(string)
	st := parseState(append(raw[1:5:5], raw[6]), stock, seen)
	if st.Found {
		requests, _ := raw[7].(int64)
		buyers, _ := raw[8].(int64)
		load, _ := raw[9].(string)
		held, _ := raw[10].(int64)
		st.Tally = domain.SalesTally{Counted: true, Requests: requests, Buyers: buyers, Load: load, Claim: claim, Held: held == 1}
	}
	return fence, st, false, nil
}

// State reads the voucher's state without claiming.
func (g *Grabs) State(ctx context.Context, voucherID int64) (domain.VoucherState, error) {
	seen := time.Now()
	pipe := g.rdb.Pipeline()
	meta := pipe.HMGet(ctx, metaKey(voucherID), "status", "begin", "end", "limit", "segs")
	stock := pipe.Get(ctx, stockKey(voucherID))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return domain.VoucherState{}, fmt.Errorf("read voucher %d state: %w", voucherID, err)
	}
	return parseState(meta.Val(), stock.Val(), seen), nil
}

func parseState(meta []any, stock string, seen time.Time) domain.VoucherState {
	num := intOf
	if len(meta) < 4 || meta[0] == nil {
		return domain.VoucherState{}
	}
	remaining, _ := strconv.Atoi(stock)
	segs := 1
	if len(meta) > 4 {
		segs = max(int(num(meta[4])), 1) // a load from before segments has none
	}
	return domain.VoucherState{
		Found:     true,
		Status:    domain.VoucherStatus(num(meta[0])),
		Begin:     time.UnixMilli(num(meta[1])),
		End:       time.UnixMilli(num(meta[2])),
		Limit:     int(num(meta[3])),
		Segments:  segs,
		Remaining: remaining,
		SeenAt:    seen,
	}
}

// grabHead is how many values the grab script returns before the first
// grab's.
const grabHead = 12

// Grab runs one batch through the grab script (EVALSHA, falling back to
// EVAL when Redis lost the script), followed by WAIT when Acks asks for
// replicas. A stale fence or a voucher Redis does not know wrote nothing
// and answers without the acknowledgement; a Redis whose maxmemory-policy
// evicts keys wrote nothing and fails the batch (redisEvicts).
func (g *Grabs) Grab(ctx context.Context, voucherID int64, seg int, fence int64, grabs []domain.Grab) (domain.BatchOutcome, error) {
	args := make([]any, 0, 2+3*len(grabs))
	args = append(args, fence, voucherID)
	for _, gr := range grabs {
		args = append(args, gr.RequestID, gr.UserID, gr.OrderID)
	}
	keys := []string{metaKey(voucherID), stockKey(voucherID), usersKey(voucherID), fenceKey(voucherID, seg), reqKey(voucherID), LogKey(voucherID), openKey(voucherID)}
	seen := time.Now()
	call := g.Acks.runAcked(ctx, g.rdb, grabScript, keys, args...)
	raw, err := call.res.Slice()
	grabScriptDuration.Observe(time.Since(seen).Seconds())
	if err != nil {
		return domain.BatchOutcome{}, fmt.Errorf("grab batch of voucher %d: %w", voucherID, notSent(err))
	}
	if len(raw) < 5 {
		return domain.BatchOutcome{}, fmt.Errorf("grab batch of voucher %d: script returned %d values", voucherID, len(raw))
	}
	head := make([]int64, 5)
	for i := range head {
		head[i], _ = raw[i].(int64)
	}
	switch {
	case head[0] == -1:
		return domain.BatchOutcome{Stale: true}, nil
	case head[0] == 1:
		return domain.BatchOutcome{Results: fill(len(grabs), domain.SeckillNotFound)}, nil
	case head[0] == 2:
		return domain.BatchOutcome{}, fmt.Errorf("grab batch of voucher %d: %w", voucherID, redisEvicts(raw[5]))
	case len(raw) != grabHead+2*len(grabs):
		return domain.BatchOutcome{}, fmt.Errorf("grab batch of voucher %d: script returned %d values for %d grabs", voucherID, len(raw), len(grabs))
	}
	refusal, _ := raw[5].(int64)
	requests, _ := raw[6].(int64)
	load, _ := raw[7].(string)
	claim, _ := raw[8].(string)
	if refusal < 0 || int(refusal) >= len(scriptCodes) {
		return domain.BatchOutcome{}, fmt.Errorf("grab batch of voucher %d: unknown refusal %d", voucherID, refusal)
	}
	out := domain.BatchOutcome{
		State: domain.VoucherState{
			Found: true, Status: domain.VoucherStatus(head[2]),
			Begin: time.UnixMilli(head[3]), End: time.UnixMilli(head[4]), Remaining: int(head[1]),
			SeenAt: seen,
			Tally:  domain.SalesTally{Counted: true, Requests: requests, Load: load, Claim: claim},
		},
		Results: make([]domain.GrabResult, len(grabs)),
	}
	if refusal != 0 {
		out.Refusal = scriptCodes[refusal]
	}
	// The script ran: its sales, and its answers to request ids sold
	// before, count only once the replicas asked for hold them.
	if err := call.check(); err != nil {
		return domain.BatchOutcome{}, fmt.Errorf("grab batch of voucher %d: %w", voucherID, err)
	}
	var sold []domain.Grab // only kept for a shadow: no allocation otherwise
	for i := range grabs {
		code, _ := raw[grabHead+2*i].(int64)
		if code < 0 || int(code) >= len(scriptCodes) {
			return domain.BatchOutcome{}, fmt.Errorf("grab batch of voucher %d: unknown code %d", voucherID, code)
		}
		out.Results[i].Code = scriptCodes[code]
		if code == 0 {
			s, _ := raw[grabHead+1+2*i].(string)
			if out.Results[i].OrderID, err = strconv.ParseInt(s, 10, 64); err != nil {
				return domain.BatchOutcome{}, fmt.Errorf("grab batch of voucher %d: bad order id %q", voucherID, s)
			}
			if g.Shadow != nil {
				sold = append(sold, domain.Grab{RequestID: grabs[i].RequestID, UserID: grabs[i].UserID, OrderID: out.Results[i].OrderID})
			}
		}
	}
	if len(sold) > 0 {
		pos, _ := raw[9].(string)
		at, _ := raw[10].(string)
		slot, _ := raw[11].(string)
		g.Shadow.Add(voucherID, shadowBatch{stamp: load, load: load, entry: pos, at: at, slot: slot, orders: sold})
	}
	return out, nil
}

func fill(n int, code domain.SeckillCode) []domain.GrabResult {
	out := make([]domain.GrabResult, n)
	for i := range out {
		out[i].Code = code
	}
	return out
}
