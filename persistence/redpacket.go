package persistence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// The Redis keys of a red packet share the hash tag {rp<ID>}, as a
// voucher's share {v<ID>}, so that one script reaches all of them:
//
//	{rp<ID>}:meta     hash: expire (unix ms), left (cents not grabbed yet),
//	                  hold (Redis ms until which a reload holds the grabs
//	                  of users without a packet; see RedPacketStore.Load)
//	{rp<ID>}:packets  list: the packets not grabbed yet, "seq:amount"
//	{rp<ID>}:users    hash: user id -> "seq:amount:request id" of their packet
//	{rp<ID>}:log      stream: the red packet's order log, read by the
//	                  red-packet writer's group
//	{rp<ID>}:returned set: the refused log entries whose packet went back
//	                  (see returnPacketScript)
//	{rp<ID>}:holders  sorted set: red-packet writers that hold grabs of the
//	                  red packet they have not committed, scored with the
//	                  Redis ms until which the claim holds (see
//	                  holdGrabsScript)
//	{rp<ID>}:settle   string: the Redis ms before which the refund of a red
//	                  packet Redis lacks waits (see settleRedPacketScript)
//
// The registry redPacketLogsKey lists the logs the red-packet writer reads.
func redPacketTag(id int64) string { return "{rp" + strconv.FormatInt(id, 10) + "}" }

func redPacketKeys(id int64) []string {
	t := redPacketTag(id)
	return []string{t + ":meta", t + ":packets", t + ":users", t + ":log"}
}

// redPacketHoldersKey is the key of the writers that hold grabs of a red
// packet.
func redPacketHoldersKey(id int64) string { return redPacketTag(id) + ":holders" }

// RedPacketLogKey is the key of a red packet's order log.
func RedPacketLogKey(id int64) string { return redPacketTag(id) + ":log" }

// redPacketIDFromLog is the red packet whose order log key s is.
func redPacketIDFromLog(s string) (int64, bool) {
	var id int64
	if _, err := fmt.Sscanf(s, "{rp%d}:log", &id); err != nil {
		return 0, false
	}
	return id, true
}

const (
	// redPacketLogsKey is the registry of red-packet order logs.
	redPacketLogsKey = "flashsale:redpacket-logs"
	// RedPacketLogGroup is the consumer group of every red-packet log.
	RedPacketLogGroup = "persist"
)

// More fields of an order-log entry, for a grabbed packet; the user,
// request and time fields are the voucher order's (orderlog_entry.go).
const (
	EntryRedPacketID = "p" // red packet id
	EntryPacketSeq   = "q" // which packet (its seq)
	EntryAmount      = "a" // its amount, in cents
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
	// Amounts, for a red packet just created, stand for Packets: packet i
	// holds Amounts[i] (a PacketRow per packet would be 24 bytes each of
	// garbage).
	Amounts []int64
	Grabbed []GrabRow
	// Hold, for a reload, is how long the red packet holds the grabs of
	// users without a packet (see RedPacketStore.Load); 0 for none.
	Hold time.Duration
}

// Load registers the red packet's order log and loads the red packet into
// Redis unless Redis has it; loaded says whether it did.
//
// The packets and the users who grabbed go in as one RPUSH and one HSET,
// queued in one MULTI with the load script (given none of either, it only
// writes the metadata and the expiries), under a WATCH of the metadata
// key. The script's own loop makes a Redis call per packet: about 0.9 µs
// of Redis's one thread per packet, 9 ms for 10,000 during which no grab
// runs, against about 0.2 µs in one RPUSH. The WATCH keeps the script's
// "unless Redis has it": a load that lands between the check and the
// EXEC (a grab's reload of a red packet just committed) aborts this one,
// which then finds it there.
func (s *RedPacketRedis) Load(ctx context.Context, l RedPacketLoad) (loaded bool, err error) {
	// The log and its group first, then its registration, as a voucher's
	// preheat does: a writer never lists a log without its group.
	if err := s.rdb.XGroupCreateMkStream(ctx, RedPacketLogKey(l.ID), RedPacketLogGroup, "0").Err(); err != nil && !isBusyGroup(err) {
		return false, fmt.Errorf("create red packet %d log: %w", l.ID, err)
	}
	if err := s.rdb.SAdd(ctx, redPacketLogsKey, RedPacketLogKey(l.ID)).Err(); err != nil {
		return false, fmt.Errorf("register red packet %d log: %w", l.ID, err)
	}
	keys := redPacketKeys(l.ID)[:3]
	var left int64
	var rpush []any
	if l.Amounts != nil {
		for _, a := range l.Amounts {
			left += a
		}
		rpush = rpushPackets(keys[1], len(l.Amounts), func(i int) (int, int64) { return i, l.Amounts[i] })
	} else {
		for _, p := range l.Packets {
			left += p.AmountCents
		}
		rpush = rpushPackets(keys[1], len(l.Packets), func(i int) (int, int64) { return l.Packets[i].Seq, l.Packets[i].AmountCents })
	}
	users := make([]any, 0, 2*len(l.Grabbed))
	for _, g := range l.Grabbed {
		users = append(users, g.UserID, strconv.Itoa(g.Seq)+":"+strconv.FormatInt(g.AmountCents, 10)+":"+deref(g.RequestID))
	}
	load := func(tx *redis.Tx) error {
		n, err := tx.Exists(ctx, keys[0]).Result()
		if err != nil || n == 1 {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			if rpush != nil {
				pipe.Do(ctx, rpush...)
			}
			if len(users) > 0 {
				pipe.HSet(ctx, keys[2], users...)
			}
			// EVAL, not EVALSHA: a NOSCRIPT inside MULTI cannot be retried.
			loadRedPacketScript.Eval(ctx, pipe, keys, l.ExpiresAt.UnixMilli(), l.ExpiresAt.Add(redPacketKeep).UnixMilli(), left, l.Hold.Milliseconds(), 0)
			return nil
		})
		if err == nil {
			loaded = true
		}
		return err
	}
	// An abort means the metadata changed under the WATCH: the next
	// attempt finds the red packet there (or, deleted again since, loads it).
	for range 3 {
		loaded = false
		if err = s.rdb.Watch(ctx, load, keys[0]); !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		return false, fmt.Errorf("load red packet %d into redis: %w", l.ID, err)
	}
	return loaded, nil
}

// rpushPackets is the RPUSH of n packets (packet(i) is the i-th's seq and
// amount) onto key as the grab script pops them, "seq:amount"; nil for
// none. Each is cut from one string and passed by pointer (go-redis
// writes a *string as the string), and the command is built whole for
// Do: boxing each string into an interface would allocate once per
// packet, and RPush would copy the arguments once more.
func rpushPackets(key string, n int, packet func(i int) (seq int, amount int64)) []any {
	if n == 0 {
		return nil
	}
	size := 0
	for i := range n {
		seq, amount := packet(i)
		size += digits(int64(seq)) + 1 + digits(amount)
	}
	var b strings.Builder
	b.Grow(size)
	entries := make([]string, n)
	cmd := make([]any, 2, 2+n)
	cmd[0], cmd[1] = "rpush", key
	var num [20]byte
	for i := range n {
		seq, amount := packet(i)
		start := b.Len()
		b.Write(strconv.AppendInt(num[:0], int64(seq), 10))
		b.WriteByte(':')
		b.Write(strconv.AppendInt(num[:0], amount, 10))
		// The builder never changes what it wrote: the entry stays as is.
		entries[i] = b.String()[start:]
		cmd = append(cmd, &entries[i])
	}
	return cmd
}

// digits is the length of n in decimal.
func digits(n int64) int {
	d := 1
	if n < 0 {
		d, n = 2, -n
	}
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// Grab runs one batch of grabs through the grab script.
func (s *RedPacketRedis) Grab(ctx context.Context, id int64, grabs []domain.RedPacketGrab) (domain.RedPacketBatch, error) {
	args := make([]any, 0, 1+2*len(grabs))
	args = append(args, id)
	for _, g := range grabs {
		args = append(args, g.RequestID, g.UserID)
	}
	seen := time.Now()
	call := s.Acks.runAcked(ctx, s.rdb, grabRedPacketScript, redPacketKeys(id), args...)
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
	keys := redPacketKeys(id)
	pipe := s.rdb.Pipeline()
	meta := pipe.HMGet(ctx, keys[0], "expire", "left")
	n := pipe.LLen(ctx, keys[1])
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
	t := redPacketTag(id)
	keys := []string{t + ":meta", t + ":log", t + ":settle", redPacketHoldersKey(id)}
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
	t := redPacketTag(id)
	if err := s.rdb.Del(ctx, t+":meta", t+":packets", t+":users", t+":returned", t+":settle", redPacketHoldersKey(id)).Err(); err != nil {
		return fmt.Errorf("remove red packet %d from redis: %w", id, err)
	}
	return nil
}
