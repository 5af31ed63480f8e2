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

// redPacketKeep is how long a red packet's state outlives its expiry in
// Redis if no refund removes it first (a cluster down for that long):
// the refund needs only the database.
const redPacketKeep = 24 * time.Hour

// loadRedPacketScript loads a red packet into Redis unless it is there:
// its metadata, its packets not grabbed yet and the users who grabbed,
// and for a reload the Redis time until which it holds new grabs.
// KEYS: meta, packets, users. ARGV: expire ms, keep-until ms, left cents,
// hold ms (0: none), packet count n, n packets "seq:amount", then "user"
// "seq:amount:req" pairs. Returns 1 if it loaded, 0 if the red packet was
// there.
var loadRedPacketScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local n = tonumber(ARGV[5])
for i = 6, 5 + n do
  redis.call('RPUSH', KEYS[2], ARGV[i])
end
for i = 6 + n, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'expire', ARGV[1], 'left', ARGV[3])
if tonumber(ARGV[4]) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'hold', string.format('%.0f', now + tonumber(ARGV[4])))
end
for i = 1, 3 do
  redis.call('PEXPIREAT', KEYS[i], ARGV[2])
end
return 1
`)

// Red-packet grab codes as the script returns them.
var redPacketScriptCodes = []domain.RedPacketCode{
	domain.RedPacketOK, domain.RedPacketEmpty, domain.RedPacketAlreadyGrabbed, domain.RedPacketExpired,
	domain.RedPacketUnavailable,
}

// grabRedPacketScript grabs for a batch of users atomically (seed 004's
// script, batched like the voucher's grabScript). For each grab in order:
// a user who grabbed before hears OK with their packet if it is the same
// request (a retry), else ALREADY_GRABBED; after the expiry (Redis TIME)
// EXPIRED; else a packet is popped (EMPTY if none is left), the user
// recorded with it, the cents left lowered and the packet appended to the
// red packet's order log, in one atomic step; while a reload holds its
// grabs (meta hold), a user without a packet hears UNAVAILABLE (code 4)
// and nothing is popped. No fencing token: the users
// hash makes a grab idempotent per user, so two activations of the
// sequencer can never give one user two packets nor one packet twice.
//
// KEYS: meta, packets, users, log. ARGV: red packet id, then (request id,
// user id) per grab. Returns {state, expire ms, packets left, code1,
// amount1, ...} with state 0 = done, 1 = red packet not in Redis.
var grabRedPacketScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[1], 'expire', 'hold')
local expire = tonumber(m[1] or '')
if not expire then return {1, 0, 0} end
local hold = tonumber(m[2] or '0')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
local out = {0, expire, 0}
for i = 2, #ARGV, 2 do
  local req, user = ARGV[i], ARGV[i + 1]
  local prev = redis.call('HGET', KEYS[3], user)
  if prev then
    local _, amount, preq = string.match(prev, '^(%d+):(%d+):(.*)$')
    if preq == req then out[#out + 1] = 0 else out[#out + 1] = 2 end
    out[#out + 1] = amount
  elseif now >= expire then
    out[#out + 1] = 3
    out[#out + 1] = '0'
  elseif now < hold then
    out[#out + 1] = 4
    out[#out + 1] = '0'
  else
    local p = redis.call('LPOP', KEYS[2])
    if not p then
      out[#out + 1] = 1
      out[#out + 1] = '0'
    else
      local seq, amount = string.match(p, '^(%d+):(%d+)$')
      redis.call('HSET', KEYS[3], user, p .. ':' .. req)
      redis.call('HINCRBY', KEYS[1], 'left', '-' .. amount)
      redis.call('XADD', KEYS[4], '*', '` + EntryRedPacketID + `', ARGV[1], '` + EntryPacketSeq + `', seq,
        '` + EntryUserID + `', user, '` + EntryAmount + `', amount, '` + EntryTime + `', now_s, '` + EntryRequestID + `', req)
      out[#out + 1] = 0
      out[#out + 1] = amount
    end
  end
end
out[3] = redis.call('LLEN', KEYS[2])
return out
`)

// settleRedPacketScript tells whether no grab of a red packet can still
// reach the database, so that its refund may count the grabs there. That
// is when, by Redis's clock:
//   - the red packet has expired (no grab appends to its log any more) and
//     no reload holds its grabs (meta hold: a writer may still hold grabs
//     of the load Redis lost, see RedPacketStore.Load);
//   - or Redis lacks it (lost with Redis's data, or never loaded) and has
//     lacked it for the hold (ARGV[1] ms, from the first call that found
//     it missing, recorded in the settle key): a writer may hold grabs it
//     read from a log Redis lost; it retries, and registers among the
//     holders, within the hold;
//   - and its order log is empty (every grab that Redis still knows of is
//     committed) and no writer claims to hold grabs of it (holders with a
//     score in the future: a writer retrying against a database it cannot
//     reach, see holdGrabsScript).
//
// KEYS: meta, log, settle, holders. ARGV: hold ms, how long the settle key
// lives in ms. Returns 1 if settled, 0 if the refund must wait.
var settleRedPacketScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'expire', 'hold')
local expire = tonumber(m[1] or '')
if expire then
  if now < expire or now < tonumber(m[2] or '0') then return 0 end
else
  local wait = tonumber(redis.call('GET', KEYS[3]) or '')
  if not wait then
    redis.call('SET', KEYS[3], string.format('%.0f', now + tonumber(ARGV[1])), 'PX', ARGV[2])
    return 0
  end
  if now < wait then return 0 end
end
if redis.call('XLEN', KEYS[2]) > 0 then return 0 end
if redis.call('ZCOUNT', KEYS[4], '(' .. string.format('%.0f', now), '+inf') > 0 then return 0 end
return 1
`)

// holdGrabsScript records that a writer holds grabs of the red packet it
// has not committed, until ARGV[2] ms from now (Redis time), so that the
// refund waits for them (settleRedPacketScript). A writer records it
// before every attempt to commit, also while the database refuses it, and
// removes it once its grabs are committed or refused: a Redis that lost
// the record gets it again within one retry.
// KEYS: holders. ARGV: writer, ms.
var holdGrabsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
`)

// RedPacketRedis is the Redis side of red packets: their load, the grab
// script and the live state.
type RedPacketRedis struct {
	rdb redis.UniversalClient
	// Acks makes a grab batch's answers wait for replicas, as Grabs.Acks.
	Acks Acks
}

// NewRedPacketRedis returns the red packets' Redis store.
func NewRedPacketRedis(rdb redis.UniversalClient) *RedPacketRedis { return &RedPacketRedis{rdb: rdb} }

// RedPacketLoad is what Load puts in Redis: the packets not grabbed yet
// and the users who grabbed one, as the database has them.
type RedPacketLoad struct {
	ID        int64
	ExpiresAt time.Time
	Packets   []PacketRow // not grabbed yet, in the order they are to be handed out
	Grabbed   []GrabRow
	// Hold, for a reload, is how long the red packet holds the grabs of
	// users without a packet (see RedPacketStore.Load); 0 for none.
	Hold time.Duration
}

// Load registers the red packet's order log and loads the red packet into
// Redis unless Redis has it; loaded says whether it did.
func (s *RedPacketRedis) Load(ctx context.Context, l RedPacketLoad) (loaded bool, err error) {
	// The log and its group first, then its registration, as a voucher's
	// preheat does: a writer never lists a log without its group.
	if err := s.rdb.XGroupCreateMkStream(ctx, RedPacketLogKey(l.ID), RedPacketLogGroup, "0").Err(); err != nil && !isBusyGroup(err) {
		return false, fmt.Errorf("create red packet %d log: %w", l.ID, err)
	}
	if err := s.rdb.SAdd(ctx, redPacketLogsKey, RedPacketLogKey(l.ID)).Err(); err != nil {
		return false, fmt.Errorf("register red packet %d log: %w", l.ID, err)
	}
	var left int64
	args := make([]any, 0, 5+len(l.Packets)+2*len(l.Grabbed))
	for _, p := range l.Packets {
		left += p.AmountCents
	}
	args = append(args, l.ExpiresAt.UnixMilli(), l.ExpiresAt.Add(redPacketKeep).UnixMilli(), left, l.Hold.Milliseconds(), len(l.Packets))
	for _, p := range l.Packets {
		args = append(args, strconv.Itoa(p.Seq)+":"+strconv.FormatInt(p.AmountCents, 10))
	}
	for _, g := range l.Grabbed {
		args = append(args, g.UserID, strconv.Itoa(g.Seq)+":"+strconv.FormatInt(g.AmountCents, 10)+":"+deref(g.RequestID))
	}
	n, err := loadRedPacketScript.Run(ctx, s.rdb, []string{redPacketMetaKey(l.ID), redPacketPacketsKey(l.ID), redPacketUsersKey(l.ID)}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("load red packet %d into redis: %w", l.ID, err)
	}
	return n == 1, nil
}

// Grab runs one batch of grabs through the grab script.
func (s *RedPacketRedis) Grab(ctx context.Context, id int64, grabs []domain.RedPacketGrab) (domain.RedPacketBatch, error) {
	args := make([]any, 0, 1+2*len(grabs))
	args = append(args, id)
	for _, g := range grabs {
		args = append(args, g.RequestID, g.UserID)
	}
	seen := time.Now()
	keys := []string{redPacketMetaKey(id), redPacketPacketsKey(id), redPacketUsersKey(id), RedPacketLogKey(id)}
	call := s.Acks.runAcked(ctx, s.rdb, grabRedPacketScript, keys, args...)
	raw, err := call.res.Slice()
	redPacketScriptDuration.Observe(time.Since(seen).Seconds())
	if err != nil {
		return domain.RedPacketBatch{}, fmt.Errorf("grab batch of red packet %d: %w", id, err)
	}
	if len(raw) < 3 {
		return domain.RedPacketBatch{}, fmt.Errorf("grab batch of red packet %d: script returned %d values", id, len(raw))
	}
	if state, _ := raw[0].(int64); state == 1 {
		res := make([]domain.RedPacketResult, len(grabs))
		for i := range res {
			res[i].Code = domain.RedPacketNotFoundCode
		}
		return domain.RedPacketBatch{Results: res}, nil
	}
	if len(raw) != 3+2*len(grabs) {
		return domain.RedPacketBatch{}, fmt.Errorf("grab batch of red packet %d: script returned %d values for %d grabs", id, len(raw), len(grabs))
	}
	// A packet handed out counts once the replicas asked for hold it.
	if err := call.check(); err != nil {
		return domain.RedPacketBatch{}, fmt.Errorf("grab batch of red packet %d: %w", id, err)
	}
	expire, _ := raw[1].(int64)
	left, _ := raw[2].(int64)
	out := domain.RedPacketBatch{
		State:   domain.RedPacketState{Found: true, ExpiresAt: time.UnixMilli(expire), Left: int(left)},
		Results: make([]domain.RedPacketResult, len(grabs)),
	}
	for i := range grabs {
		code, _ := raw[3+2*i].(int64)
		if code < 0 || int(code) >= len(redPacketScriptCodes) {
			return domain.RedPacketBatch{}, fmt.Errorf("grab batch of red packet %d: unknown code %d", id, code)
		}
		amount, _ := raw[4+2*i].(string)
		out.Results[i].Code = redPacketScriptCodes[code]
		out.Results[i].AmountCents, _ = strconv.ParseInt(amount, 10, 64)
	}
	return out, nil
}

// State reads what a sequencer caches about a red packet.
func (s *RedPacketRedis) State(ctx context.Context, id int64) (domain.RedPacketState, error) {
	st, _, err := s.live(ctx, id)
	return st, err
}

// Live reads the red packet's packets and cents left; found is false when
// Redis does not have it.
func (s *RedPacketRedis) Live(ctx context.Context, id int64) (count int, cents int64, found bool, err error) {
	st, cents, err := s.live(ctx, id)
	return st.Left, cents, st.Found, err
}

func (s *RedPacketRedis) live(ctx context.Context, id int64) (domain.RedPacketState, int64, error) {
	pipe := s.rdb.Pipeline()
	meta := pipe.HMGet(ctx, redPacketMetaKey(id), "expire", "left")
	n := pipe.LLen(ctx, redPacketPacketsKey(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return domain.RedPacketState{}, 0, fmt.Errorf("read red packet %d: %w", id, err)
	}
	v := meta.Val()
	exp, _ := v[0].(string)
	ms, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return domain.RedPacketState{}, 0, nil
	}
	left, _ := v[1].(string)
	cents, _ := strconv.ParseInt(left, 10, 64)
	return domain.RedPacketState{Found: true, ExpiresAt: time.UnixMilli(ms), Left: int(n.Val())}, cents, nil
}

// Settled tells whether no grab of the red packet can still reach the
// database (settleRedPacketScript); a red packet Redis lacks is settled
// only hold after the first call found it missing.
func (s *RedPacketRedis) Settled(ctx context.Context, id int64, hold time.Duration) (bool, error) {
	keys := []string{redPacketMetaKey(id), RedPacketLogKey(id), redPacketSettleKey(id), redPacketHoldersKey(id)}
	// The settle key outlives the hold by a minute: a refund delayed longer
	// (the database down) finds it gone and waits one hold more, which is
	// safe; a key that outlived its refund would only take room.
	n, err := settleRedPacketScript.Run(ctx, s.rdb, keys, hold.Milliseconds(), (hold + time.Minute).Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("settle red packet %d in redis: %w", id, err)
	}
	return n == 1, nil
}

// Forget removes a refunded red packet's state from Redis (its log stays
// until the writer prunes it). A grab then finds the red packet missing,
// and its sequencer learns from the database that it is over.
func (s *RedPacketRedis) Forget(ctx context.Context, id int64) error {
	if err := s.rdb.Del(ctx, redPacketMetaKey(id), redPacketPacketsKey(id), redPacketUsersKey(id), redPacketReturnedKey(id),
		redPacketSettleKey(id), redPacketHoldersKey(id)).Err(); err != nil {
		return fmt.Errorf("remove red packet %d from redis: %w", id, err)
	}
	return nil
}
