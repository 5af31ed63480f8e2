package persistence

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
)

// A voucher's waiting room, under its hash tag (docs/DECISIONS.md, "The
// waiting room"):
//
//	{v<ID>}:qm   hash: the settings (qmOpen and qmEnd, unix ms; qmRate,
//	             admissions a second; qmMax, open tickets at most;
//	             qmPaused; qmExpire, when the keys lapse) and the state
//	             (qmRun, the token the state was written under; qmTokens
//	             and qmLast, the pacer's bucket; qmAdmitted, qmExpired and
//	             qmResets, counters)
//	{v<ID>}:q    zset: the waiting users by their order (an early one's
//	             random number in [0, 1), a later one's arrival in unix µs):
//	             all Redis keeps of a waiting user, about 125 bytes
//	{v<ID>}:qa   zset: admitted users whose ticket is unused and unexpired,
//	             by its expiry (unix ms)
//	{v<ID>}:qx   hash: user -> their ticket's expiry (unix ms)
func roomKey(id int64) string     { return voucherTag(id) + ":qm" }
func lineKey(id int64) string     { return voucherTag(id) + ":q" }
func openKey(id int64) string     { return voucherTag(id) + ":qa" }
func admittedKey(id int64) string { return voucherTag(id) + ":qx" }

// AdmissionsKey is the hash of a voucher's admissions (user -> ticket
// expiry, unix ms): what the fault suite, the load tool and tests read to
// check who was admitted when.
func AdmissionsKey(voucherID int64) string { return admittedKey(voucherID) }

// Fields of a room's hash (the scripts spell them as ${name}).
const (
	qmOpen     = "open"
	qmEnd      = "end"
	qmRate     = "rate"
	qmMax      = "max"
	qmPaused   = "paused"
	qmExpire   = "expire"
	qmRun      = "run"
	qmTokens   = "tokens"
	qmLast     = "last"
	qmAdmitted = "admitted"
	qmExpired  = "expired"
	qmResets   = "resets"
)

var (
	queueSetScript   = newScript("queue_set")
	queueJoinScript  = newScript("queue_join")
	queuePlaceScript = newScript("queue_place")
	queueAdmitScript = newScript("queue_admit")
)

// Queue is the voucher waiting rooms' store in Redis: the line, the
// admissions and the pacer's bucket. Joins and admissions wait for the
// replicas as grabs do (Acks): a place or an admission a failover took
// back would be given twice. So with acknowledgements a room's state is
// kept across a change of Redis server (a promoted replica holds every
// place and admission answered), and without them dropped (see
// queue_join.lua).
type Queue struct {
	rdb  redis.UniversalClient
	Acks Acks
}

// NewQueue returns the rooms' store on rdb.
func NewQueue(rdb redis.UniversalClient) *Queue { return &Queue{rdb: rdb} }

// ErrRoomMissing is a join or an admission of a voucher whose room Redis
// does not hold: never configured there, or lost with its load. The
// caller configures it from the database and asks again.
var ErrRoomMissing = errors.New("the voucher's waiting room is not in redis")

// Configure writes a voucher's room settings, keeping its line and
// counters.
func (q *Queue) Configure(ctx context.Context, voucherID int64, s domain.RoomSettings) error {
	ms := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatInt(t.UnixMilli(), 10)
	}
	n := func(v int) string {
		if v == 0 {
			return ""
		}
		return strconv.Itoa(v)
	}
	paused := ""
	if s.Paused != nil {
		paused = "0"
		if *s.Paused {
			paused = "1"
		}
	}
	res, err := queueSetScript.Run(ctx, q.rdb, []string{roomKey(voucherID)},
		ms(s.Open), ms(s.End), n(s.Rate), n(s.Max), paused, ms(s.Expire)).Int()
	switch {
	case err != nil:
		return fmt.Errorf("configure the waiting room of voucher %d: %w", voucherID, notSent(err))
	case res == 4:
		return fmt.Errorf("configure the waiting room of voucher %d: %w", voucherID, redisEvicts(nil))
	}
	return nil
}

// Join puts user in voucher's line once; joined is false when they had a
// place already (nothing written). reset reports that the room's state
// was stale (another Redis process wrote it) and was dropped first.
// ErrRoomMissing: no room here; domain.ErrRoomClosed: the sale ended.
func (q *Queue) Join(ctx context.Context, voucherID, userID int64) (joined, reset bool, err error) {
	keys := []string{roomKey(voucherID), lineKey(voucherID), openKey(voucherID), admittedKey(voucherID)}
	call := q.Acks.runAcked(ctx, q.rdb, queueJoinScript, keys, userID, earlyOrder(), q.kept())
	raw, err := call.res.Int64Slice()
	if err != nil {
		return false, false, fmt.Errorf("join the waiting room of voucher %d: %w", voucherID, notSent(err))
	}
	if len(raw) != 2 {
		return false, false, fmt.Errorf("join the waiting room of voucher %d: script returned %d values", voucherID, len(raw))
	}
	reset = raw[1] == 1
	switch raw[0] {
	case 2:
		return false, reset, ErrRoomMissing
	case 3:
		return false, reset, domain.ErrRoomClosed
	case 4:
		return false, reset, fmt.Errorf("join the waiting room of voucher %d: %w", voucherID, redisEvicts(nil))
	}
	// The place counts once the replicas asked for hold it.
	if err := call.check(); err != nil {
		return false, reset, fmt.Errorf("join the waiting room of voucher %d: %w", voucherID, err)
	}
	return raw[0] == 0, reset, nil
}

// kept is the scripts' flag that a room's state written on another
// Redis server is kept: its writes were acknowledged by replicas.
func (q *Queue) kept() string {
	if q.Acks.Replicas > 0 {
		return "1"
	}
	return "0"
}

// earlyOrder is an early joiner's place among the early ones: a uniform
// number in [0, 1) of 53 random bits (a float64's mantissa), drawn here
// rather than by Lua's seeded math.random.
func earlyOrder() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	f := float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53)
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Place reads voucher's room and userID's place in it (userID 0: the
// room alone). With acknowledgements an admission is shown only once the
// replicas asked for hold it: the admission script's answer waits for
// them, but a read between its run and their acknowledgement would show
// an admission a failover may still take back, and its ticket with it (a
// ticket for a place the new primary never admitted, and the place
// admitted a second time). So a read that finds an admission reads again,
// rewriting the admission as it is, and waits for the replicas to
// acknowledge that write, which follows the admission's. (Redis 7.0 moves
// a connection's WAIT offset to the stream's end after any script, the
// read alone included; the rewrite does not count on it.)
func (q *Queue) Place(ctx context.Context, voucherID, userID int64) (domain.RoomView, error) {
	v, err := q.place(ctx, voucherID, userID, false)
	if err != nil || v.Expiry.IsZero() || q.Acks.Replicas <= 0 {
		return v, err
	}
	return q.place(ctx, voucherID, userID, true)
}

// place runs the place script once; acked rewrites the admission it finds
// and waits for the replicas.
func (q *Queue) place(ctx context.Context, voucherID, userID int64, acked bool) (domain.RoomView, error) {
	user := ""
	if userID != 0 {
		user = strconv.FormatInt(userID, 10)
	}
	keys := []string{roomKey(voucherID), lineKey(voucherID), admittedKey(voucherID), stockKey(voucherID)}
	call := ackedScript{}
	if acked {
		call = q.Acks.runAcked(ctx, q.rdb, queuePlaceScript, keys, user, q.kept(), "1")
	} else {
		call.res = queuePlaceScript.Run(ctx, q.rdb, keys, user, q.kept(), "0")
	}
	raw, err := call.res.Slice()
	if err != nil {
		return domain.RoomView{}, fmt.Errorf("read the waiting room of voucher %d: %w", voucherID, notSent(err))
	}
	if n, _ := raw[0].(int64); n != 1 {
		return domain.RoomView{}, nil
	}
	if len(raw) != 13 {
		return domain.RoomView{}, fmt.Errorf("read the waiting room of voucher %d: script returned %d values", voucherID, len(raw))
	}
	v := domain.RoomView{
		Found: true, Now: msTime(raw[1]), Open: msTime(raw[2]), End: msTime(raw[3]),
		Waiting: int(intOf(raw[4])), Admitted: intOf(raw[5]), Stock: -1,
		Joined: intOf(raw[7]) == 1, Rank: int(intOf(raw[8])), Expiry: msTime(raw[9]),
		Rate: int(intOf(raw[10])), Max: int(intOf(raw[11])), Paused: fmt.Sprint(raw[12]) == "1",
	}
	if s, _ := raw[6].(string); s != "" {
		v.Stock = int(intOf(s))
	}
	if acked && !v.Expiry.IsZero() {
		if err := call.check(); err != nil {
			return domain.RoomView{}, fmt.Errorf("read the admission of user %d to voucher %d: %w", userID, voucherID, err)
		}
	}
	return v, nil
}

// intOf reads a script's integer reply or a number Redis stored as text.
func intOf(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// msTime reads unix ms from a script's reply; ” or nil is the zero time.
func msTime(v any) time.Time {
	if s, ok := v.(string); ok && s == "" || v == nil {
		return time.Time{}
	}
	return time.UnixMilli(intOf(v))
}

// Admit runs voucher's pacer once: expired tickets free their slots, and
// the head of the line is admitted with tickets valid for ttl, at most
// most users. ErrRoomMissing: no room here.
func (q *Queue) Admit(ctx context.Context, voucherID int64, ttl time.Duration, most int) (domain.Admission, error) {
	keys := []string{roomKey(voucherID), lineKey(voucherID), openKey(voucherID), admittedKey(voucherID), stockKey(voucherID)}
	call := q.Acks.runAcked(ctx, q.rdb, queueAdmitScript, keys, ttl.Milliseconds(), most, q.kept())
	raw, err := call.res.Slice()
	if err != nil {
		return domain.Admission{}, fmt.Errorf("admit from the waiting room of voucher %d: %w", voucherID, notSent(err))
	}
	switch code := intOf(raw[0]); {
	case code == 2:
		return domain.Admission{}, ErrRoomMissing
	case code == 4:
		return domain.Admission{}, fmt.Errorf("admit from the waiting room of voucher %d: %w", voucherID, redisEvicts(nil))
	case len(raw) < 5 || len(raw)%2 != 1:
		return domain.Admission{}, fmt.Errorf("admit from the waiting room of voucher %d: script returned %d values", voucherID, len(raw))
	}
	a := domain.Admission{Found: true, Now: msTime(raw[3]), Expired: int(intOf(raw[1])), Reset: intOf(raw[2]) == 1, Waiting: int(intOf(raw[4]))}
	for i := 5; i < len(raw); i += 2 {
		u := domain.AdmittedUser{UserID: intOf(raw[i])}
		// An early one's order is below 1; a later one's is when they
		// joined.
		if order, err := strconv.ParseFloat(fmt.Sprint(raw[i+1]), 64); err == nil && order >= 1 {
			u.JoinedAt = time.UnixMicro(int64(order))
		}
		a.Users = append(a.Users, u)
	}
	// The admissions count once the replicas asked for hold them: a
	// failover that took them back would admit the same places again.
	if err := call.check(); err != nil {
		return a, fmt.Errorf("admit from the waiting room of voucher %d: %w", voucherID, err)
	}
	return a, nil
}
