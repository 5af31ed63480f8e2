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

// loadRedPacketScript loads a red packet into Redis unless it is there: scripts/load_red_packet.lua.
var loadRedPacketScript = newScript("load_red_packet")

// Red-packet grab codes as the script returns them.
var redPacketScriptCodes = []domain.RedPacketCode{
	domain.RedPacketOK, domain.RedPacketEmpty, domain.RedPacketAlreadyGrabbed, domain.RedPacketExpired,
	domain.RedPacketUnavailable,
}

// grabRedPacketScript grabs packets for a batch of users: scripts/grab_red_packet.lua.
var grabRedPacketScript = newScript("grab_red_packet")

// settleRedPacketScript tells whether a red packet's refund may count its grabs: scripts/settle_red_packet.lua.
var settleRedPacketScript = newScript("settle_red_packet")

// holdGrabsScript records a writer among the holders of a red packet: scripts/hold_grabs.lua.
var holdGrabsScript = newScript("hold_grabs")

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
