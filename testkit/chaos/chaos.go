// Package chaos is the service's seeded fault-injection suite. Each round
// sells a fresh voucher through real service processes, against a real
// redis-server and Postgres of the suite's own, while it kills nodes, kills
// Redis or brings it back empty or from an older copy of its files, kills
// the primary of a Sentinel set or of a Redis Cluster, and makes Postgres
// refuse connections, at random moments; then it checks, from outside (the API's answers and the
// tables), the promises (docs/ARCHITECTURE.md): no oversell, no user over the limit,
// no lost or phantom order, reconciled stock, and safe retries.
//
// Everything random about a round is drawn from (seed, round), so a round
// that fails can be replayed alone (Config.Start); what cannot be replayed
// is the timing of processes, so a replay may need a few tries.
package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// QuietRedis is a go-redis logger that drops what go-redis prints by
// itself (each failed dial): the suite kills Redis on purpose, and its own
// client's errors reach it anyway. Set it with redis.SetLogger once,
// before any client exists.
type QuietRedis struct{}

// Printf implements go-redis's internal.Logging.
func (QuietRedis) Printf(context.Context, string, ...any) {}

// Config is one run.
type Config struct {
	// Seed and the round number determine every round's plan.
	Seed int64
	// Start is the first round's number; Rounds how many run.
	Start, Rounds int
	// Kinds restricts the fault kinds (all when empty). Rounds cycle
	// through the selected kinds, so a replay passes the same list.
	Kinds []string
	// Short makes smaller, quicker sales (the run inside the test suite).
	Short bool
	// Bin is a service binary to run; empty builds this module's.
	Bin string
	// Workers is how many grabs are in flight at most (default 16).
	Workers int
	// Verbose prints each round's plan, and the nodes' logs of a failed
	// round.
	Verbose bool
	// Logs prints the nodes' logs of every round, passed or failed: what
	// a node did in a round slower than it should be.
	Logs bool
	// NodeLogLevel is the nodes' LOG_LEVEL (default warn).
	NodeLogLevel string
	// Out receives the per-round lines and the table; Log the suite's own
	// diagnostics.
	Out io.Writer
	Log *slog.Logger
}

// RoundResult is one round's verdict.
type RoundResult struct {
	Round int
	Kind  string
	Took  time.Duration
	// Violations are the broken promises, "check: detail".
	Violations []string
	// Err is set when the round could not run to its checks at all (the
	// voucher could not be created, the stores could not be read).
	Err error
	// Skipped says why the round did not run, when the service refuses
	// the kind's configuration at start (a REDIS_MODE it does not take): not
	// a pass, and not a broken promise either.
	Skipped string

	plan    plan
	outcome outcome
}

// Failed reports whether the round broke a promise or could not be
// checked.
func (r RoundResult) Failed() bool { return r.Err != nil || len(r.Violations) > 0 }

// Report is a whole run.
type Report struct {
	Seed       int64
	RequestIDs bool // whether seckillVoucher took request ids
	Rounds     []RoundResult
}

// Failed counts the failed rounds.
func (r *Report) Failed() int {
	n := 0
	for _, rr := range r.Rounds {
		if rr.Failed() {
			n++
		}
	}
	return n
}

// runner carries a run's shared pieces.
type runner struct {
	cfg        Config
	seed       int64
	kinds      []kind
	log        *slog.Logger
	env        *env
	api        *api
	workers    int
	requestIDs bool
	// dead follows the dead letters of the round that runs.
	dead *deadLetters
	// tickets holds the grab tickets of the round that runs.
	tickets *ticketBook
	// breakerOpened: a Redis stall of the round that runs saw the node's
	// breaker open before Redis resumed.
	breakerOpened atomic.Bool
	// back is when Redis served again after the round's last Redis fault,
	// and how soon after it the nodes must sell again (nil: no such fault).
	back atomic.Pointer[redisBack]
	// onBack, set by sell for its round, is told each time markBack is.
	onBack func(*redisBack)
	// probes counts the round's probes (see probe).
	probes atomic.Int64
}

// redisBack is the end of a Redis fault: when Redis served again (a
// restart, a promotion, the flush done, the policy back to noeviction),
// and the bound within which grabs must sell again (availabilityBound).
type redisBack struct {
	at    time.Time
	bound time.Duration
}

// markBack records that Redis serves again after a fault of kind what.
// A short run (the test suite's, beside the other packages' tests on a
// shared machine) allows shortRunSlack times the bound.
func (rn *runner) markBack(what faultKind) {
	if bound, ok := availabilityBound[what]; ok {
		if rn.cfg.Short {
			bound *= shortRunSlack
		}
		b := &redisBack{at: time.Now(), bound: bound}
		rn.back.Store(b)
		if rn.onBack != nil {
			rn.onBack(b)
		}
	}
}

// shortRunSlack widens the availability bounds of a short run.
const shortRunSlack = 3

// Run runs cfg.Rounds rounds and prints each and then the table to
// cfg.Out. It returns an error only when the run could not start; failed
// rounds are in the report. Every process it started is gone when it
// returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	ks, err := selectKinds(cfg.Kinds)
	if err != nil {
		return nil, err
	}
	if cfg.Rounds <= 0 {
		return nil, errors.New("rounds must be positive")
	}
	if cfg.Start < 0 {
		return nil, errors.New("start must not be negative")
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	log := cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	rn := &runner{cfg: cfg, seed: cfg.Seed, kinds: ks, log: log, workers: cmp.Or(cfg.Workers, 16)}
	rn.api = newAPI(rn.workers)
	defer rn.api.close()

	t0 := time.Now()
	rn.env, err = newEnv(ctx, log, cfg.Bin, cfg.NodeLogLevel)
	if err != nil {
		return nil, fmt.Errorf("set up stores and nodes: %w", err)
	}
	defer rn.env.close()
	if rn.requestIDs, err = rn.api.supportsRequestID(ctx, rn.env.nodes[0].Base, rn.env.admin); err != nil {
		return nil, err
	}
	rep := &Report{Seed: cfg.Seed, RequestIDs: rn.requestIDs}
	fmt.Fprintf(cfg.Out, "chaos: seed %d, rounds %d..%d, %d nodes, request ids %s, set up in %.1fs\n",
		cfg.Seed, cfg.Start, cfg.Start+cfg.Rounds-1, nodeCount, yesNo(rn.requestIDs), time.Since(t0).Seconds())
	for k := cfg.Start; k < cfg.Start+cfg.Rounds && ctx.Err() == nil; k++ {
		res := rn.round(ctx, k)
		if ctx.Err() != nil && res.Failed() {
			break // interrupted: not the service's fault
		}
		rep.Rounds = append(rep.Rounds, res)
		rn.print(res)
	}
	writeTable(cfg.Out, rep)
	return rep, ctx.Err()
}

// round runs round k to its verdict.
func (rn *runner) round(ctx context.Context, k int) (res RoundResult) {
	t0 := time.Now()
	p := newPlan(rn.seed, k, rn.kinds, rn.cfg.Short)
	res = RoundResult{Round: k, Kind: p.kind, plan: p}
	defer func() { res.Took = time.Since(t0) }()
	// Every wait below has its own bound; this one catches what they miss.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	hctx, hcancel := context.WithTimeout(ctx, 45*time.Second)
	err := rn.env.heal(hctx)
	hcancel()
	if err != nil {
		res.Err = fmt.Errorf("before the round: %w", err)
		return res
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
	err = rn.env.use(pctx, profileOf(p))
	pcancel()
	if errors.Is(err, errNotRunnable) {
		res.Skipped = err.Error()
		return res
	}
	if err != nil {
		res.Err = fmt.Errorf("before the round: %w", err)
		return res
	}
	rn.breakerOpened.Store(false)
	rn.back.Store(nil)
	rn.probes.Store(0)
	tripsBefore := rn.breakerTrips(ctx)
	fallbackOK := rn.fallbackSales(ctx, p)
	now := time.Now()
	spec := voucherSpec{Stock: p.stock, Limit: p.limit, Begin: now.Add(-time.Minute), End: now.Add(10 * time.Minute), RequireTicket: p.tickets, POW: p.pow}
	if p.room != nil {
		// The room opens roomLead after this second (the API takes whole
		// seconds), and the sale begins roomReleaseBefore later.
		spec.Begin = now.Truncate(time.Second).Add(roomLead + roomReleaseBefore)
		spec.Room, spec.AdmitPerSecond, spec.MaxActive = true, p.room.rate, p.room.maxActive
	}
	var id string
	for try := 0; try < 5; try++ {
		if id, err = rn.api.createVoucher(ctx, rn.env.nodes[p.nodes[0]].Base, rn.env.admin, spec); err == nil {
			break
		}
		sleep(ctx, 500*time.Millisecond)
	}
	if err != nil {
		res.Err = err
		return res
	}
	if p.voucher, err = strconv.ParseInt(id, 10, 64); err != nil {
		res.Err = fmt.Errorf("voucher id %q: %w", id, err)
		return res
	}
	res.plan = p
	rn.dead = newDeadLetters(rn.env.db, p.voucher)
	rn.tickets = newTicketBook(p.tickets || p.room != nil, p.pow) // a room's admissions are its tickets
	rpID, err := rn.createRedPacket(ctx, p)
	if err != nil {
		res.Err = err
		return res
	}

	saleStart := time.Now()
	rpGrabs := rn.grabRedPackets(ctx, p, rpID) // the same users, moments and faults
	var (
		answers   []answer
		faultErrs []error
		room      *roomRun
	)
	if p.room != nil {
		answers, room, faultErrs = rn.sellQueue(ctx, p, id, spec.Begin)
	} else {
		answers, faultErrs = rn.sell(ctx, p, id)
	}
	rpAnswers := <-rpGrabs
	rn.log.Debug("sale over", "round", k, "took", time.Since(saleStart))
	hctx, hcancel = context.WithTimeout(ctx, 45*time.Second)
	healErr := rn.env.heal(hctx)
	hcancel()
	rn.log.Debug("healed", "round", k, "since the sale's start", time.Since(saleStart))
	answers = append(answers, rn.settle(ctx, p, id, answers)...)
	rn.log.Debug("grabs settled", "round", k, "since the sale's start", time.Since(saleStart))
	rpAnswers = append(rpAnswers, rn.settleRedPackets(ctx, rpID, rpAnswers)...)
	rn.log.Debug("settled", "round", k, "since the sale's start", time.Since(saleStart))
	drained, left := rn.drain(ctx, p, saleStart, p.voucher)
	rn.log.Debug("drained", "round", k, "since the sale's start", time.Since(saleStart))
	fallbackOK = rn.fallbackSales(ctx, p) - fallbackOK
	var okIDs []int64
	for _, a := range answers {
		if n, err := strconv.ParseInt(a.OrderID, 10, 64); a.Code == codeOK && err == nil {
			okIDs = append(okIDs, n)
		}
	}
	st, err := rn.collect(ctx, p.voucher, okIDs)
	if err != nil {
		res.Err = err
		return res
	}
	st.drained, st.logLeft = drained, left
	st.breakerTrips = rn.breakerTrips(ctx) - tripsBefore
	res.outcome = judge(p, answers, st, rn.requestIDs)
	if room != nil {
		rs, err := rn.readRoom(ctx, p.voucher)
		if err != nil {
			res.Err = err
			return res
		}
		judgeQueue(&res.outcome, p, room, rs, answers, st)
	}
	if b := rn.back.Load(); b != nil && p.onlyRedisFaults() {
		judgeAvailability(&res.outcome, answers, b.at, b.bound)
	}
	res.outcome.fallbackOK, res.outcome.breakerOpened = fallbackOK, rn.breakerOpened.Load()
	rpState, err := rn.drainRedPacket(ctx, rpID, p.rpExpiry > 0, pgRetried(p, saleStart))
	if err != nil {
		res.Err = err
		return res
	}
	judgeRedPacket(&res.outcome, p.durable(), p.rpExpiry > 0, rpAnswers, rpState)
	res.outcome.rpOK = len(rpState.grabs)
	if rpState.refundCents != nil {
		res.outcome.rpRefund = *rpState.refundCents
	}
	for _, err := range faultErrs {
		res.outcome.add("fault", "%v", err)
	}
	if healErr != nil {
		res.outcome.add("fault", "after the sale: %v", healErr)
	}
	for _, v := range res.outcome.violations {
		res.Violations = append(res.Violations, v.check+": "+v.detail)
	}
	return res
}

// replay is the command that runs round k alone.
func (rn *runner) replay(k int) string {
	cmd := fmt.Sprintf("go run ./cmd/chaos -seed %d -start %d -rounds 1", rn.seed, k)
	if len(rn.cfg.Kinds) > 0 {
		cmd += " -kinds " + strings.Join(rn.cfg.Kinds, ",")
	}
	if rn.cfg.Short {
		cmd += " -short"
	}
	return cmd
}

// print writes a round's line, and for a failed round what failed and
// how to replay it.
func (rn *runner) print(r RoundResult) {
	w := rn.cfg.Out
	o := r.outcome
	if r.Skipped != "" {
		fmt.Fprintf(w, "round %4d  %-22s skip %5.1fs  %s\n", r.Round, r.Kind, r.Took.Seconds(), r.Skipped)
		return
	}
	verdict := "ok"
	if r.Failed() {
		verdict = "FAIL"
	}
	tickets := ""
	if r.plan.tickets {
		tickets = ", tickets"
	}
	if r.plan.pow {
		tickets += " + proof of work"
	}
	extra := ""
	if r.plan.fallback {
		opened := "opened"
		if !o.breakerOpened {
			opened = "never seen open"
		}
		extra = fmt.Sprintf("; fallback answered %d OK, breaker %s", o.fallbackOK, opened)
	}
	if r.plan.rpExpiry > 0 {
		extra += fmt.Sprintf(", %d cents refunded", o.rpRefund)
	}
	if f := o.room; f != nil {
		extra += fmt.Sprintf("; room: %d joined (%d early, %d unsure), %d admitted, %d resets, %d bad grabs, %d failed calls", f.joined, f.early, f.unsure, f.admitted, f.resets, f.bad, f.errors)
	}
	if o.firstOK >= 0 && o.measured {
		extra += fmt.Sprintf("; first OK %.2fs after redis served again", o.firstOK.Seconds())
	}
	fmt.Fprintf(w, "round %4d  %-22s %-4s %5.1fs  stock %3d limit %d: %3d OK, %3d sold, %d lost, %d open, %d dead%s; red packet: %d grabbed%s\n",
		r.Round, r.Kind, verdict, r.Took.Seconds(), r.plan.stock, r.plan.limit, o.okAnswers, o.sold, o.lost, o.unsettled, o.dead, tickets, o.rpOK, extra)
	if rn.cfg.Verbose || r.Failed() {
		fmt.Fprintf(w, "      plan: %s\n", r.plan)
		fmt.Fprintf(w, "      answers: %s; slowest %.2fs\n", summary(o.answers), o.maxTook.Seconds())
		if o.room != nil && len(o.room.failed) > 0 {
			fmt.Fprintf(w, "      waiting room calls failed: %s\n", summary(o.room.failed))
		}
		if o.dead > 0 {
			fmt.Fprintf(w, "      dead letters: %s\n", summary(o.deadReasons))
		}
		if o.lastUnavail > 0 {
			fmt.Fprintf(w, "      last UNAVAILABLE sent %.1fs after redis served again\n", o.lastUnavail.Seconds())
		}
		if !o.backAt.IsZero() {
			ps := make([]string, len(o.probes))
			for i, a := range o.probes {
				if a.sent.IsZero() {
					ps[i] = fmt.Sprintf("node %d %s", a.node, a.label()) // never sent
					continue
				}
				ps[i] = fmt.Sprintf("+%.2fs node %d %s in %.2fs", a.sent.Sub(o.backAt).Seconds(), a.node, a.label(), a.took.Seconds())
			}
			fmt.Fprintf(w, "      redis served again at %s; probes: %s\n", o.backAt.UTC().Format("15:04:05.000"), strings.Join(ps, ", "))
		}
	}
	if r.Err != nil {
		fmt.Fprintf(w, "      could not check: %v\n", r.Err)
	}
	const most = 12
	for i, v := range r.Violations {
		if i == most {
			fmt.Fprintf(w, "      … and %d more\n", len(r.Violations)-most)
			break
		}
		fmt.Fprintf(w, "      %s\n", v)
	}
	if r.Failed() || rn.cfg.Logs {
		fmt.Fprintf(w, "      replay: %s\n", rn.replay(r.Round))
		if rn.cfg.Verbose || rn.cfg.Logs {
			for i, n := range rn.env.nodes {
				fmt.Fprintf(w, "      node %d log (end):\n%s\n", i, indent(lastLines(n.Output(), logLines(rn.cfg)), "        "))
			}
		}
	}
}

func summary(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no (the schema has no requestId)"
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// fallbackSales reads how many grabs the database fallback has answered OK
// on the fallback profile's node since it started (0 on other rounds, or
// when the node cannot tell).
func (rn *runner) fallbackSales(ctx context.Context, p plan) int {
	if !p.fallback {
		return 0
	}
	n, err := rn.env.metric(ctx, 0, `flashsale_fallback_grab_total{code="OK"}`)
	if err != nil {
		rn.log.Warn("fallback sales not read", "err", err)
	}
	return int(n)
}

// breakerTrips sums the times the nodes' Redis breakers opened
// (flashsale_breaker_trips_total), over the nodes that answer.
func (rn *runner) breakerTrips(ctx context.Context) int {
	n := 0
	for i := range rn.env.nodes {
		if v, err := rn.env.metric(ctx, i, `flashsale_breaker_trips_total{store="redis"}`); err == nil {
			n += int(v)
		}
	}
	return n
}

// logLines is how much of each node's log a round prints: the end of a
// failed round's, or with Logs as much as a round's outage takes.
func logLines(cfg Config) int {
	if cfg.Logs {
		return 2000
	}
	return 30
}
