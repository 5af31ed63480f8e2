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

// grabScript sells a whole batch of grabs of one voucher atomically. For
// each grab, in order: a request id seen before answers its first result
// (a retried batch or request never sells twice); otherwise status, the
// time window (Redis TIME), the user's live orders and stock decide (a
// user at their limit hears so even after the sell-out), and a
// sale deducts stock, counts the user's order, remembers the request,
// and appends the order to the voucher's order log, in one atomic step.
// Each order-log entry carries the request id and the load stamp of the
// load it was sold from (orderlog_entry.go names its fields).
// The whole batch is refused if the caller's fencing token is not the
// newest: a stale actor activation can never sell.
//
// Order and user ids stay strings: Lua numbers are doubles, and order ids
// exceed 2^53.
//
// With no grab it only reads: a sequencer confirms its record of the
// sales that way (the tally: request ids sold and the load stamp, see
// domain.SalesTally).
//
// KEYS: meta, stock, users, fence, req, log.
// ARGV: fence, voucher id, then (request id, user id, order id) per grab.
// Returns {state, remaining, status, begin, end, refusal, requests sold,
// load stamp, claim, code1, order1, ...} with state 0 = done, -1 = stale
// fence,
// 1 = voucher not in Redis (then only the first five), and refusal the
// code that status, time window or hold give every new grab (0: none).
var grabScript = redis.NewScript(`
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return {-1, 0, 0, 0, 0}
end
local m = redis.call('HMGET', KEYS[1], 'status', 'begin', 'end', 'limit', 'expire', '` + metaLoadStamp + `', 'hold', '` + metaClaim + `')
local status = tonumber(m[1])
if not status then
  return {1, 0, 0, 0, 0}
end
local begin_ms, end_ms, limit = tonumber(m[2]), tonumber(m[3]), tonumber(m[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The entry's time as a string built from TIME's own strings: a Lua number
-- written back to Redis may be formatted as a float.
local now_s = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
local verdict = 0
if status == 2 then verdict = 4
elseif status == 3 then verdict = 3
elseif m[7] and now < tonumber(m[7]) then verdict = 7 -- a reload holds its sales (Stock.Preheat)
elseif now < begin_ms then verdict = 2
elseif now >= end_ms then verdict = 3
end
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
local slot = '0'
if limit == 1 then slot = '1' end
-- One order-log entry, reused for every sale of the batch; it carries the
-- request id and the load stamp of the load the order is sold from, when
-- there is one.
local entry = ` + luaEntryTemplate("ARGV[2]", "now_s", "slot") + `
if m[6] then
  entry[#entry + 1] = '` + EntryLoadStamp + `'
  entry[#entry + 1] = m[6]
end
local out = {0, 0, status, begin_ms, end_ms, verdict, 0, m[6] or '', m[8] or ''}
local sold = 0
for i = 3, #ARGV, 3 do
  local req, user, oid = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local prev = redis.call('HGET', KEYS[5], req)
  if prev then
    out[#out + 1] = 0
    out[#out + 1] = prev
  elseif verdict ~= 0 then
    out[#out + 1] = verdict
    out[#out + 1] = '0'
  elseif tonumber(redis.call('HGET', KEYS[3], user) or '0') >= limit then
    out[#out + 1] = 6
    out[#out + 1] = '0'
  elseif stock <= 0 then
    out[#out + 1] = 5
    out[#out + 1] = '0'
  else
    stock = stock - 1
    sold = sold + 1
    redis.call('HINCRBY', KEYS[3], user, 1)
    redis.call('HSET', KEYS[5], req, oid)
    entry[2] = oid
    entry[4] = user
    entry[6] = req
    redis.call('XADD', KEYS[6], '*', unpack(entry))
    out[#out + 1] = 0
    out[#out + 1] = oid
  end
end
if sold > 0 then
  redis.call('DECRBY', KEYS[2], sold)
  if m[5] then
    redis.call('PEXPIREAT', KEYS[5], m[5])
  end
end
out[2] = stock
out[7] = redis.call('HLEN', KEYS[5])
return out
`)

// Grabs runs the grab scripts on the stock Redis.
type Grabs struct {
	rdb redis.UniversalClient
	// Acks, when it asks for replicas, makes a batch's answers wait until
	// that many replicas hold its writes; a batch not acknowledged in time
	// fails with ErrNotAcknowledged (undecided).
	Acks Acks
}

// NewGrabs returns the grab store.
func NewGrabs(rdb redis.UniversalClient) *Grabs { return &Grabs{rdb: rdb} }

// claimScript takes a fencing token for a new actor activation, writes
// the activation's claim nonce (ARGV[1]) into the metadata and reads the
// voucher with its tally of sales, but only for a voucher Redis knows:
// unknown ids leave no key behind. KEYS: meta, stock, fence, req, users.
// Returns {fence, status, begin, end, limit, stock, segments, requests
// sold, buyers, load stamp, held}, or {0} for an unknown voucher; a missing
// field is false (nil), never a hole that would cut the list short.
// ARGV[2], if not empty, is the fence the caller holds: the claim is then
// made only while that fence is still the newest, and {-1} answers one
// that was superseded.
var claimScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
if ARGV[2] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return {-1}
end
local f = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], '` + metaClaim + `', ARGV[1])
local m = redis.call('HMGET', KEYS[1], 'status', 'begin', 'end', 'limit', 'segs', '` + metaLoadStamp + `', 'hold')
local held = 0
if m[7] then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) < tonumber(m[7]) then
    held = 1
  end
end
return {f, m[1] or false, m[2] or false, m[3] or false, m[4] or false, redis.call('GET', KEYS[2]) or false, m[5] or false,
  redis.call('HLEN', KEYS[4]), redis.call('HLEN', KEYS[5]), m[6] or '', held}
`)

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
	if fence == -1 {
		return 0, domain.VoucherState{}, true, nil
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
	num := func(v any) int64 {
		s, _ := v.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
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
const grabHead = 9

// Grab runs one batch through the grab script (EVALSHA, falling back to
// EVAL when Redis lost the script), followed by WAIT when Acks asks for
// replicas. A stale fence or a voucher Redis does not know wrote nothing
// and answers without the acknowledgement.
func (g *Grabs) Grab(ctx context.Context, voucherID int64, seg int, fence int64, grabs []domain.Grab) (domain.BatchOutcome, error) {
	args := make([]any, 0, 2+3*len(grabs))
	args = append(args, fence, voucherID)
	for _, gr := range grabs {
		args = append(args, gr.RequestID, gr.UserID, gr.OrderID)
	}
	keys := []string{metaKey(voucherID), stockKey(voucherID), usersKey(voucherID), fenceKey(voucherID, seg), reqKey(voucherID), LogKey(voucherID)}
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
		}
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
