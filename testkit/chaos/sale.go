package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// answer is one grab as the client saw it.
type answer struct {
	attempt
	grabAnswer
	// keySent is set when the request carried its request id.
	keySent bool
	// phase: "sale" for the round's own attempts, "probe" for the grabs
	// sent while the nodes sell again after a Redis fault (see probe),
	// "resolve" for retries
	// that settle an outcome the sale left unknown, "verify" for retries
	// of sold grabs after the sale.
	phase string
	// sent is when the request left; took how long its answer took.
	sent time.Time
	took time.Duration
}

// Grab outcomes a client can rely on: the request was decided.
const (
	codeOK           = "OK"
	codeSoldOut      = "SOLD_OUT"
	codeLimitReached = "LIMIT_REACHED"
	codeUnavailable  = "UNAVAILABLE"
)

// decided reports whether the answer settles the grab: sold, or surely
// not sold. UNAVAILABLE and lost replies leave it open (a batch may have
// sold it when its reply was lost); a refused connection settles it (the
// request never arrived).
func (a answer) decided() bool {
	switch a.Code {
	case codeOK, codeSoldOut, codeLimitReached:
		return true
	}
	return errors.Is(a.Err, errNotSent)
}

// label names the answer's kind for a summary: its code, or what kind of
// failure replaced it.
func (a answer) label() string {
	var ge *gqlErrors
	var br *badResponse
	switch {
	case a.Code != "":
		return a.Code
	case errors.Is(a.Err, errNoTicket):
		return "no-ticket"
	case errors.Is(a.Err, errNotSent):
		return "refused"
	case errors.As(a.Err, &ge):
		return "error:" + strings.Join(ge.codes(), ",")
	case errors.As(a.Err, &br):
		return fmt.Sprintf("http-%d", br.status)
	case errors.Is(a.Err, context.DeadlineExceeded) || strings.Contains(fmt.Sprint(a.Err), "Client.Timeout"):
		return "timeout"
	default:
		return "no-reply"
	}
}

// sell runs the round's sale: the attempts at their moments through a
// bounded pool of clients, and the faults at theirs. It returns every
// answer and what went wrong injecting faults.
func (rn *runner) sell(ctx context.Context, p plan, voucherID string) ([]answer, []error) {
	start := time.Now()
	var (
		mu      sync.Mutex
		answers = make([]answer, 0, len(p.attempts))
		errs    []error
		wg      sync.WaitGroup
	)
	var oks atomic.Int64 // OK answers so far, for faults fired at the sell-out
	record := func(ans answer) {
		if ans.Code == codeOK {
			oks.Add(1)
		}
		mu.Lock()
		answers = append(answers, ans)
		mu.Unlock()
	}
	// Redis serves again after a fault (markBack, inside a lane's
	// inject, so the lane's goroutine still counts in wg): probe it.
	rn.onBack = func(b *redisBack) { wg.Go(func() { rn.probe(ctx, p, voucherID, b, record) }) }
	defer func() { rn.onBack = nil }()
	rn.injectFaults(ctx, p, start, &oks, &wg, func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})

	queue := make(chan attempt, len(p.attempts))
	wg.Go(func() {
		defer close(queue)
		for _, a := range p.attempts {
			if !sleepUntil(ctx, start.Add(a.at)) {
				return
			}
			queue <- a
		}
	})
	// Clients that retry do it in goroutines of their own, so that a
	// waiting retry holds no worker; at most rn.workers of them send at
	// once.
	retrying := make(chan struct{}, rn.workers)
	for range rn.workers {
		wg.Go(func() {
			for a := range queue {
				ans := rn.send(ctx, a, voucherID, "sale")
				record(ans)
				if p.retryOpen && leavesOpen(ans) {
					wg.Go(func() { rn.retryOpen(ctx, a, voucherID, retrying, record) })
				}
			}
		})
	}
	wg.Wait()
	return answers, errs
}

// injectFaults runs the round's faults in wg, a goroutine per lane, each
// at its moment from start (or at its count of OKs); fail hears what went
// wrong injecting one.
func (rn *runner) injectFaults(ctx context.Context, p plan, start time.Time, oks *atomic.Int64, wg *sync.WaitGroup, fail func(error)) {
	lanes := map[string][]fault{}
	for _, f := range p.faults {
		lanes[f.lane()] = append(lanes[f.lane()], f)
	}
	for _, fs := range lanes {
		wg.Go(func() {
			for _, f := range fs {
				waitFor(ctx, f, start, oks)
				if err := rn.inject(ctx, f, p.voucher); err != nil {
					fail(fmt.Errorf("%s: %w", f, err))
				}
			}
		})
	}
}

// probeEvery is how often probe sends a grab.
const probeEvery = 100 * time.Millisecond

// probe asks for one grab every probeEvery from the moment Redis serves
// again after a fault that availabilityBound bounds (b), by a user of its
// own and with one request id, as a client does that was told
// UNAVAILABLE, through the round's nodes in turn, until an answer decides
// it or three times b's bound has passed. The sale's own attempts may
// have ended, or be waiting out a retry, by then: the probe makes the
// first OK after the fault measure the nodes, not when the clients
// happened to ask, and makes a node that still refuses past the bound
// meet judgeAvailability. Its answers are the sale's (recorded, checked,
// settled like any other).
func (rn *runner) probe(ctx context.Context, p plan, voucherID string, b *redisBack, record func(answer)) {
	until := b.at.Add(3 * b.bound)
	n := rn.probes.Add(1) // the round's n-th probe
	a := attempt{user: userBase(p.round) + probeUsers + n, key: fmt.Sprintf("chaos-%d-probe-%d", p.round, n)}
	for i := 0; time.Now().Before(until); i++ {
		a.node = p.nodes[i%len(p.nodes)]
		ans := rn.send(ctx, a, voucherID, "probe")
		record(ans)
		if ans.decided() && !errors.Is(ans.Err, errNotSent) {
			return
		}
		if !sleep(ctx, probeEvery) {
			return
		}
	}
}

// leavesOpen reports whether a client that got ans asks again with the same
// request id: its grab may or may not have sold.
func leavesOpen(ans answer) bool {
	return !ans.decided() || errors.Is(ans.Err, errNotSent)
}

// retryOpen asks again for a's grab, with its request id, after each of
// its waits, until an answer decides it: what the API tells a client to
// do after UNAVAILABLE.
func (rn *runner) retryOpen(ctx context.Context, a attempt, voucherID string, sem chan struct{}, record func(answer)) {
	for _, d := range a.retryAfter {
		if !sleep(ctx, d) {
			return
		}
		sem <- struct{}{}
		ans := rn.send(ctx, a, voucherID, "retry")
		<-sem
		record(ans)
		if !leavesOpen(ans) {
			return
		}
	}
}

// send makes one grab of attempt a.
func (rn *runner) send(ctx context.Context, a attempt, voucherID, phase string) answer {
	ans := answer{attempt: a, phase: phase, keySent: rn.requestIDs}
	token, err := rn.env.userToken(a.user)
	if err != nil {
		ans.Err = err
		return ans
	}
	key := ""
	if rn.requestIDs {
		key = a.key
	}
	base := rn.env.nodes[a.node].Base
	ticket, err := rn.tickets.get(a.user, func(pow bool) (string, time.Time, error) { return rn.api.ticket(ctx, base, token, voucherID, pow) })
	if err != nil {
		// The grab was never sent: nothing can have happened. (%v: the
		// ticket request's own GraphQL error, UNAVAILABLE while a store
		// is down, is no answer to a grab.)
		ans.Err = fmt.Errorf("%w: %w: %v", errNotSent, errNoTicket, err)
		return ans
	}
	ans.sent = time.Now()
	ans.grabAnswer = rn.api.grab(ctx, base, token, voucherID, key, ticket)
	ans.took = time.Since(ans.sent)
	return ans
}

// inject carries out one fault on the round's voucher and undoes it after
// its time.
func (rn *runner) inject(ctx context.Context, f fault, voucher int64) error {
	rn.log.Debug("fault", "fault", f.String())
	switch f.what {
	case faultNodeKill:
		rn.env.nodes[f.node].Kill()
		sleep(ctx, f.down)
		sctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		defer cancel()
		return rn.env.startNode(sctx, f.node)
	case faultRedisKill, faultRedisWipe:
		rn.env.redis.Kill()
		if f.what == faultRedisWipe {
			if err := rn.env.redis.Wipe(); err != nil {
				return err
			}
		}
		sleep(ctx, f.down)
		if err := rn.env.redis.Start(); err != nil {
			return err
		}
		rn.markBack(f.what)
		return nil
	case faultRedisStall:
		return rn.stall(ctx, f)
	case faultPrimaryKill, faultClusterPrimaryKill:
		if err := rn.env.killPrimary(ctx, voucher); err != nil {
			return err
		}
		if f.what == faultPrimaryKill {
			rn.markBack(f.what) // killPrimary waited for the promotion
		}
		sleep(ctx, f.down)
		if err := rn.env.rejoinPrimary(ctx); err != nil {
			return err
		}
		if f.what == faultClusterPrimaryKill {
			// The promoted primary's only replica was the one killed: with
			// REDIS_ACK_REPLICAS=1 its shard acknowledges writes again only
			// once that node follows it.
			rn.markBack(f.what)
		}
		return nil
	case faultRedisRollback:
		return rn.rollback(ctx, f)
	case faultRedisFlush:
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := rn.env.rdb.FlushAll(fctx).Err(); err != nil {
			return fmt.Errorf("flush redis: %w", err)
		}
		rn.markBack(f.what)
		return nil
	case faultClusterMigrate:
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := rn.env.migrateSlot(mctx, voucher, f.node); err != nil {
			return err
		}
		rn.markBack(f.what)
		return nil
	case faultRedisEvict:
		policy := func(p string) error {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if err := rn.env.rdb.ConfigSet(pctx, "maxmemory-policy", p).Err(); err != nil {
				return fmt.Errorf("set maxmemory-policy %s: %w", p, err)
			}
			return nil
		}
		if err := policy("allkeys-lru"); err != nil {
			return err
		}
		sleep(ctx, f.down)
		if err := policy("noeviction"); err != nil {
			return err
		}
		rn.markBack(f.what)
		return nil
	case faultPGOutage, faultRedisCut:
		proxy := rn.env.proxy
		if f.what == faultRedisCut {
			proxy = rn.env.redisProxy
		}
		proxy.Down()
		sleep(ctx, f.down)
		proxy.Up()
		return nil
	}
	return fmt.Errorf("unknown fault %d", f.what)
}

// rollback copies Redis's files, lets the sale go on for f.down, then
// kills Redis and starts it from the copy.
func (rn *runner) rollback(ctx context.Context, f fault) error {
	snap, err := os.MkdirTemp(rn.env.dir, "snapshot-")
	if err != nil {
		return fmt.Errorf("snapshot dir: %w", err)
	}
	defer os.RemoveAll(snap)
	if err := rn.env.redis.SaveSnapshot(ctx, snap); err != nil {
		return err
	}
	sleep(ctx, f.down)
	if err := rn.env.redis.RestartFromSnapshot(snap); err != nil {
		return err
	}
	rn.markBack(f.what)
	return nil
}

// stall stops Redis for f.down and resumes it, but not before the node's
// breaker has opened (three failed calls, each up to its deadline: the
// fallback sells only then), waiting up to 3 s more for that; with f.blip
// Postgres refuses connections around the resume. Whether the breaker
// opened is a figure of the round (rn.breakerOpened), not a verdict: a
// stall that met no grab opens nothing.
func (rn *runner) stall(ctx context.Context, f fault) error {
	if err := rn.env.stallRedis(ctx); err != nil {
		return err
	}
	sleep(ctx, f.down-f.blipLead)
	if f.blip > 0 {
		rn.env.proxy.Down()
		sleep(ctx, f.blipLead)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		state, err := rn.env.metric(ctx, f.node, `flashsale_breaker_state{store="redis"}`)
		if err == nil && state > 0 {
			rn.breakerOpened.Store(true)
			break
		}
		if time.Now().After(deadline) || !sleep(ctx, 50*time.Millisecond) {
			break
		}
	}
	err := rn.env.resumeRedis()
	if f.blip > 0 {
		sleep(ctx, f.blip-f.blipLead)
		rn.env.proxy.Up()
	}
	return err
}

// settle asks again, with the same request id, for every grab whose
// outcome the sale left open, until the service decides it; and asks
// again for some sold grabs, which must come back with the same order.
// Without request ids in the schema there is nothing to ask: open
// outcomes stay open.
func (rn *runner) settle(ctx context.Context, p plan, voucherID string, answers []answer) []answer {
	if !rn.requestIDs {
		return nil
	}
	type key struct {
		user int64
		key  string
	}
	open := map[key]attempt{}
	decided := map[key]bool{}
	var sold []attempt
	for _, a := range answers {
		k := key{a.user, a.key}
		if a.decided() {
			decided[k] = true
			if a.Code == codeOK {
				sold = append(sold, a.attempt)
			}
		} else {
			open[k] = a.attempt
		}
	}
	// Every sold request that was also left open once is asked again: its
	// first attempt may have sold too, somewhere the answer did not say
	// (a script that ran after its caller gave up), and must not have
	// become a second order.
	var wasOpen []attempt
	seen := map[key]bool{}
	sold = slices.DeleteFunc(sold, func(a attempt) bool {
		k := key{a.user, a.key}
		if _, ok := open[k]; !ok {
			return false
		}
		if !seen[k] {
			seen[k] = true
			wasOpen = append(wasOpen, a)
		}
		return true
	})
	var todo []attempt
	for k, a := range open {
		if !decided[k] {
			todo = append(todo, a)
		}
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].key < todo[j].key })
	// Up to 20 sold grabs, drawn from the round's seed so that a replay
	// asks about the same ones when it sells the same.
	sort.Slice(sold, func(i, j int) bool { return sold[i].key < sold[j].key })
	r := rand.New(rand.NewPCG(uint64(rn.seed), uint64(p.round)<<1|1))
	r.Shuffle(len(sold), func(i, j int) { sold[i], sold[j] = sold[j], sold[i] })
	sold = append(sold[:min(len(sold), 20)], wasOpen...)

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var (
		mu  sync.Mutex
		out []answer
		wg  sync.WaitGroup
		sem = make(chan struct{}, rn.workers)
	)
	ask := func(a attempt, phase string) {
		defer func() { <-sem }()
		backoff := 100 * time.Millisecond
		for try := 0; try < 8 && ctx.Err() == nil; try++ {
			ans := rn.send(ctx, a, voucherID, phase)
			mu.Lock()
			out = append(out, ans)
			mu.Unlock()
			if ans.decided() && !errors.Is(ans.Err, errNotSent) {
				return
			}
			sleep(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
		}
	}
	for _, a := range todo {
		sem <- struct{}{}
		wg.Go(func() { ask(a, "resolve") })
	}
	for _, a := range sold {
		sem <- struct{}{}
		wg.Go(func() { ask(a, "verify") })
	}
	wg.Wait()
	return out
}

// waitFor waits until f's moment, or until the sale has answered f.atOKs
// OKs if that comes first (polled: a few ms late is still in the
// sell-out's batches).
func waitFor(ctx context.Context, f fault, start time.Time, oks *atomic.Int64) {
	if f.atOKs <= 0 {
		sleepUntil(ctx, start.Add(f.at))
		return
	}
	for time.Since(start) < f.at && oks.Load() < int64(f.atOKs) {
		if !sleep(ctx, time.Millisecond) {
			return
		}
	}
}

// sleepUntil waits until t or ctx's end; false if ctx ended.
func sleepUntil(ctx context.Context, t time.Time) bool {
	return sleep(ctx, time.Until(t))
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ticketBook keeps each user's grab ticket for the round's voucher, when
// it requires one: asked for (after solving a challenge, when pow) before
// the user's first grab, as a client does, and again when it is about to
// expire.
type ticketBook struct {
	needed bool
	pow    bool
	mu     sync.Mutex
	byUser map[int64]bookedTicket
}

type bookedTicket struct {
	ticket  string
	expires time.Time
}

func newTicketBook(needed, pow bool) *ticketBook {
	return &ticketBook{needed: needed, pow: pow, byUser: map[int64]bookedTicket{}}
}

// get returns the user's ticket ("" when the voucher needs none), asking
// for one with fetch when it has none valid for the next ten seconds.
func (b *ticketBook) get(user int64, fetch func(pow bool) (string, time.Time, error)) (string, error) {
	if b == nil || !b.needed {
		return "", nil
	}
	b.mu.Lock()
	t, ok := b.byUser[user]
	b.mu.Unlock()
	if ok && time.Until(t.expires) > 10*time.Second {
		return t.ticket, nil
	}
	ticket, expires, err := fetch(b.pow)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	b.byUser[user] = bookedTicket{ticket: ticket, expires: expires}
	b.mu.Unlock()
	return ticket, nil
}
