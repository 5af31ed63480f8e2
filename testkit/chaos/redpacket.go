package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"flashsale/persistence"
)

// Red packets ride along every round: the round's users grab a red packet
// of as many packets as the voucher has stock (more in refund-wipe rounds),
// at the same moments, with the same request ids and through the same
// nodes, under the same faults. It expires after the round, or in
// refund-wipe rounds during it, and must then be refunded.
// After the round the checks below hold them to a red packet's promises:
// the split sums to the total, each packet goes to one user, who was told
// its amount, and what expired is refunded to the creator.

// rpAnswer is one red-packet grab as the client saw it.
type rpAnswer struct {
	attempt
	Code   string // GrabCode; "" when the call got no such answer
	Amount int64
	Err    error
}

// decided reports whether the answer settles the grab (UNAVAILABLE, errors
// and lost replies leave it open: a packet may have been taken).
func (a rpAnswer) decided() bool {
	switch a.Code {
	case "OK", "EMPTY", "ALREADY_GRABBED", "EXPIRED", "NOT_FOUND":
		return true
	}
	return errors.Is(a.Err, errNotSent)
}

const (
	grabRedPacketQuery = `mutation($id: ID!, $r: String) { grabRedPacket(id: $id, requestId: $r) { code amountCents } }`
	createRedPacketOp  = `mutation($in: CreateRedPacketInput!) { createRedPacket(input: $in) { id } }`
)

// grabRedPacket asks for one packet.
func (a *api) grabRedPacket(ctx context.Context, base, token, id, requestID string) rpAnswer {
	vars := map[string]any{"id": id}
	if requestID != "" {
		vars["r"] = requestID
	}
	var out struct {
		GrabRedPacket struct {
			Code        string `json:"code"`
			AmountCents *int64 `json:"amountCents"`
		} `json:"grabRedPacket"`
	}
	if err := a.do(ctx, base, token, grabRedPacketQuery, vars, &out); err != nil {
		return rpAnswer{Err: err}
	}
	ans := rpAnswer{Code: out.GrabRedPacket.Code}
	if out.GrabRedPacket.AmountCents != nil {
		ans.Amount = *out.GrabRedPacket.AmountCents
	}
	return ans
}

// createRedPacket creates the round's red packet, retrying while the
// stores come back from the last round. Each round's has a creator of its
// own, whom no round's clients are: one user may have only a few open red
// packets (the quota), and a round's may outlive it, not fully grabbed.
func (rn *runner) createRedPacket(ctx context.Context, p plan) (id string, err error) {
	expiry := time.Hour
	if p.rpExpiry > 0 {
		expiry = p.rpExpiry
	}
	in := map[string]any{"totalCents": p.rpCount * 37, "count": p.rpCount, "expiresInSeconds": int(expiry / time.Second)}
	creator, err := rn.env.userToken(1<<40 + int64(p.round))
	if err != nil {
		return "", err
	}
	for try := 0; try < 5; try++ {
		var out struct {
			CreateRedPacket struct{ ID string } `json:"createRedPacket"`
		}
		if err = rn.api.do(ctx, rn.env.nodes[p.nodes[0]].Base, creator, createRedPacketOp, map[string]any{"in": in}, &out); err == nil {
			return out.CreateRedPacket.ID, nil
		}
		sleep(ctx, 500*time.Millisecond)
	}
	return "", fmt.Errorf("create red packet: %w", err)
}

// grabRedPackets sends the round's attempts at the red packet, at their
// moments, until the sale is over, then settles the open ones with their
// request ids; the answers come on the returned channel.
func (rn *runner) grabRedPackets(ctx context.Context, p plan, id string) <-chan []rpAnswer {
	done := make(chan []rpAnswer, 1)
	go func() {
		start := time.Now()
		var (
			mu  sync.Mutex
			out []rpAnswer
			wg  sync.WaitGroup
			sem = make(chan struct{}, max(rn.workers/2, 1))
		)
		send := func(a attempt) rpAnswer {
			token, err := rn.env.userToken(a.user)
			if err != nil {
				return rpAnswer{attempt: a, Err: err}
			}
			ans := rn.api.grabRedPacket(ctx, rn.env.nodes[a.node].Base, token, id, a.key)
			ans.attempt = a
			return ans
		}
		for _, a := range p.attempts {
			if !sleepUntil(ctx, start.Add(a.at)) {
				break
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				ans := send(a)
				mu.Lock()
				out = append(out, ans)
				mu.Unlock()
			})
		}
		wg.Wait()
		done <- out
	}()
	return done
}

// settleRedPackets asks again, with the same request id, for every user
// whose grabs the sale left open and never decided, until the service
// decides.
func (rn *runner) settleRedPackets(ctx context.Context, id string, answers []rpAnswer) []rpAnswer {
	decided := map[int64]bool{}
	open := map[int64]attempt{}
	for _, a := range answers {
		if a.decided() {
			decided[a.user] = true
		} else {
			open[a.user] = a.attempt
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Users side by side, a few at a time: after a failover each may wait
	// out a rebuild, and one after another they would add up.
	var (
		mu  sync.Mutex
		out []rpAnswer
		wg  sync.WaitGroup
		sem = make(chan struct{}, max(rn.workers/2, 1))
	)
	for user, a := range open {
		if decided[user] {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for try := 0; try < 8 && ctx.Err() == nil; try++ {
				token, err := rn.env.userToken(user)
				if err != nil {
					break
				}
				ans := rn.api.grabRedPacket(ctx, rn.env.nodes[a.node].Base, token, id, a.key)
				ans.attempt = a
				mu.Lock()
				out = append(out, ans)
				mu.Unlock()
				if ans.decided() && !errors.Is(ans.Err, errNotSent) {
					break
				}
				sleep(ctx, 200*time.Millisecond)
			}
		})
	}
	wg.Wait()
	return out
}

// rpState is the red packet in the stores once the round drained.
type rpState struct {
	count int
	total int64
	// refundCents and refundCount are what the refund handed back; nil
	// until it is refunded.
	refundCents, refundCount *int64
	parts                    map[int]int64 // seq -> amount (tb_red_packet_part)
	grabs                    map[int64]rpGrab
	redisLeft                *int64 // packets left in Redis; nil when Redis lost the red packet
	redisCents               *int64
	logLeft                  int64
}

type rpGrab struct {
	seq    int
	amount int64
}

// drainRedPacket waits until the red packet's order log is empty, its
// grabs in the database have not moved for a while, notBefore has passed
// (an order writer retries after a Postgres outage) and, with wantRefund,
// it is refunded (a minute at most), then reads the stores.
func (rn *runner) drainRedPacket(ctx context.Context, id string, wantRefund bool, notBefore time.Time) (rpState, error) {
	var st rpState
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return st, fmt.Errorf("red packet id %q: %w", id, err)
	}
	tag := fmt.Sprintf("{rp%d}", n)
	deadline := time.Now().Add(time.Minute)
	last, since := int64(-1), time.Time{}
	for time.Now().Before(deadline) && sleep(ctx, 250*time.Millisecond) {
		xlen, err := rn.env.store.XLen(ctx, tag+":log").Result()
		var rows int64
		var refunded bool
		if err == nil {
			err = rn.env.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM tb_red_packet_grab WHERE red_packet_id = $1),
				(SELECT refund_time IS NOT NULL FROM tb_red_packet WHERE id = $1)`, n).Scan(&rows, &refunded)
		}
		st.logLeft = xlen
		switch {
		case err != nil || xlen > 0 || (wantRefund && !refunded):
			since = time.Time{}
		case rows != last || since.IsZero():
			last, since = rows, time.Now()
		case time.Since(since) >= 1500*time.Millisecond && time.Now().After(notBefore):
			return rn.readRedPacket(ctx, n, tag, st)
		}
	}
	st, err = rn.readRedPacket(ctx, n, tag, st)
	if err == nil && st.logLeft == 0 {
		st.logLeft = -1 // not drained: rows still moving
	}
	return st, err
}

func (rn *runner) readRedPacket(ctx context.Context, id int64, tag string, st rpState) (rpState, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := rn.env.db.QueryRowContext(ctx, `SELECT count, total_cents, refund_cents, refund_count FROM tb_red_packet WHERE id = $1`, id).
		Scan(&st.count, &st.total, &st.refundCents, &st.refundCount)
	if err != nil {
		return st, fmt.Errorf("read red packet: %w", err)
	}
	st.parts, st.grabs = map[int]int64{}, map[int64]rpGrab{}
	rows, err := rn.env.db.QueryContext(ctx, `SELECT seq, amount_cents FROM tb_red_packet_part WHERE red_packet_id = $1`, id)
	if err != nil {
		return st, fmt.Errorf("read packets: %w", err)
	}
	for rows.Next() {
		var seq int
		var amount int64
		if err := rows.Scan(&seq, &amount); err != nil {
			rows.Close()
			return st, err
		}
		st.parts[seq] = amount
	}
	rows.Close()
	rows, err = rn.env.db.QueryContext(ctx, `SELECT user_id, seq, amount_cents FROM tb_red_packet_grab WHERE red_packet_id = $1`, id)
	if err != nil {
		return st, fmt.Errorf("read grabs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var user int64
		var g rpGrab
		if err := rows.Scan(&user, &g.seq, &g.amount); err != nil {
			return st, err
		}
		st.grabs[user] = g
	}
	// Redis's copy counts only when it is a load verified on the running
	// server (its meta run = the server's token): the grab script never
	// sells from any other, and the service loads it again from the
	// database first (persistence/scripts/grab_red_packet.lua). A copy
	// that a restart from an older file left, and no grab has touched
	// since, holds packets the database has as grabbed by design.
	if n, err := rn.env.store.Exists(ctx, tag+":meta").Result(); err == nil && n == 1 && rn.verifiedOnServer(ctx, tag+":meta") {
		left, err1 := rn.env.store.LLen(ctx, tag+":packets").Result()
		cents, err2 := rn.env.store.HGet(ctx, tag+":meta", "left").Int64()
		if err1 == nil && err2 == nil {
			st.redisLeft, st.redisCents = &left, &cents
		}
	}
	return st, rows.Err()
}

// verifiedOnServer reports whether the load under meta was verified on the
// Redis server running now: its "run" field is the token the scripts
// verify a load under (persistence.ReadRunID: the server's run id, with
// its evictions), read as the grab script reads it.
func (rn *runner) verifiedOnServer(ctx context.Context, meta string) bool {
	run, err := rn.env.store.HGet(ctx, meta, "run").Result()
	if err != nil {
		return false
	}
	token, err := persistence.ReadRunID(ctx, rn.env.store)
	return err != nil || run == token
}

// judgeRedPacket checks the red packet's promises:
//   - split: its packets sum to the total, each at least 1 cent;
//   - drained: its order log emptied into the database;
//   - grabs: each grab in the database is one of its packets, with that
//     packet's amount, and no packet twice;
//   - conserved: packets in the database + packets in Redis = count, and
//     the same for cents (when Redis still has it);
//   - refund: no more packets grabbed than it has; once refunded, the
//     grabbed and the refunded packets, and cents, make the red packet
//     (wiped rounds included: money paid twice is never excused); and
//     with wantRefund (it expired during the round) it was refunded;
//   - answers (when Redis kept everything): a user told OK got one packet,
//     the same amount on every answer, and it is in the database; a user
//     whose every answer was a decided no (EMPTY, EXPIRED, NOT_FOUND) has
//     none.
func judgeRedPacket(o *outcome, durable, wantRefund bool, answers []rpAnswer, st rpState) {
	var sum int64
	for seq, a := range st.parts {
		if a < 1 {
			o.add("redpacket-split", "packet %d holds %d cents", seq, a)
		}
		sum += a
	}
	if len(st.parts) != st.count || sum != st.total {
		o.add("redpacket-split", "%d packets summing to %d, want %d summing to %d", len(st.parts), sum, st.count, st.total)
	}
	if st.logLeft != 0 {
		o.add("redpacket-drained", "order log not drained (%d entries left)", st.logLeft)
	}
	taken := map[int]int64{}
	var grabbed int64
	for user, g := range st.grabs {
		if amount, ok := st.parts[g.seq]; !ok || amount != g.amount {
			o.add("redpacket-grabs", "user %d holds packet %d of %d cents, which the split does not have", user, g.seq, g.amount)
		}
		if other, dup := taken[g.seq]; dup {
			o.add("redpacket-grabs", "packet %d held by users %d and %d", g.seq, other, user)
		}
		taken[g.seq] = user
		grabbed += g.amount
	}
	if st.redisLeft != nil && (int(*st.redisLeft)+len(st.grabs) != st.count || *st.redisCents+grabbed != st.total) {
		o.add("redpacket-conserved", "database %d packets / %d cents + redis %d / %d != %d / %d",
			len(st.grabs), grabbed, *st.redisLeft, *st.redisCents, st.count, st.total)
	}
	if len(st.grabs) > st.count {
		o.add("redpacket-refund", "%d packets grabbed of a red packet of %d", len(st.grabs), st.count)
	}
	switch {
	case st.refundCents != nil && st.refundCount != nil:
		if grabbed+*st.refundCents != st.total || int64(len(st.grabs))+*st.refundCount != int64(st.count) {
			o.add("redpacket-refund", "grabbed %d packets / %d cents + refunded %d / %d != the red packet's %d / %d",
				len(st.grabs), grabbed, *st.refundCount, *st.refundCents, st.count, st.total)
		}
	case wantRefund:
		o.add("redpacket-refund", "not refunded a minute after the round (it expired during it)")
	}
	if !durable {
		return // Redis lost grabs it had answered: only the stores' own promises hold
	}
	won := map[int64]int64{}
	no := map[int64]bool{}
	yes := map[int64]bool{}
	for _, a := range answers {
		switch a.Code {
		case "OK", "ALREADY_GRABBED":
			yes[a.user] = true
			if prev, ok := won[a.user]; ok && prev != a.Amount {
				o.add("redpacket-answers", "user %d told %d cents and %d cents", a.user, prev, a.Amount)
			}
			won[a.user] = a.Amount
		case "EMPTY", "EXPIRED", "NOT_FOUND":
			no[a.user] = true
		default:
			yes[a.user] = yes[a.user] || !a.decided() // may have taken one
		}
	}
	for user, amount := range won {
		if g, ok := st.grabs[user]; !ok || g.amount != amount {
			o.add("redpacket-lost", "user %d told %d cents, database holds %+v", user, amount, g)
		}
	}
	for user := range st.grabs {
		if no[user] && !yes[user] {
			o.add("redpacket-phantom", "user %d holds a packet but was only ever told no", user)
		}
	}
}
