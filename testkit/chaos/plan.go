package chaos

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// faultKind is one thing the suite breaks.
type faultKind int

const (
	// faultNodeKill kills a service node with SIGKILL and starts it again.
	faultNodeKill faultKind = iota
	// faultRedisKill kills redis-server with SIGKILL; it comes back with
	// everything it acknowledged (appendfsync always): nothing may be lost.
	faultRedisKill
	// faultRedisWipe kills redis-server and brings it back empty: orders
	// accepted and not yet persisted may be lost, nothing else may happen.
	faultRedisWipe
	// faultPGOutage makes the proxy in front of Postgres cut every
	// connection and refuse new ones.
	faultPGOutage
	// faultRedisCut makes the proxy in front of Redis cut every connection
	// and refuse new ones, Redis itself untouched: a script already sent
	// runs, and its reply is lost.
	faultRedisCut
	// faultRedisStall stops redis-server with SIGSTOP and resumes it with
	// SIGCONT: its sockets stay open, the scripts sent meanwhile wait in
	// them unexecuted and run when it resumes, after the callers gave up
	// on them. Optionally Postgres refuses connections around the resume
	// (fault.blip).
	faultRedisStall
	// faultRedisFlush makes Redis lose its keys (FLUSHALL) while it keeps
	// running and its connections stay open: the data loss of a wipe
	// without the crash.
	faultRedisFlush
	// faultPrimaryKill kills the Sentinel set's primary with SIGKILL; the
	// sentinels promote a replica, and after down the killed node comes
	// back as a replica of it.
	faultPrimaryKill
	// faultRedisRollback copies Redis's files at the fault's moment, and
	// after down kills Redis and starts it from that copy: Redis goes back
	// in time with its keys present, as after a crash with an everysec
	// append-only file or a restart from an older RDB file.
	faultRedisRollback
	// faultClusterPrimaryKill kills the Redis Cluster primary that serves
	// the round's voucher with SIGKILL; its replica is promoted, and after
	// down the killed node rejoins as a replica.
	faultClusterPrimaryKill
	// faultRedisEvict switches Redis's maxmemory-policy to allkeys-lru for
	// down, then back to noeviction: nothing may be sold meanwhile (a key
	// evicted could be a request id or an order log), and the sale goes
	// on once it is back.
	faultRedisEvict
	// faultClusterMigrate moves the hash slot of the round's voucher to
	// another Redis Cluster primary mid-sale (MIGRATE of every key, then
	// SETSLOT NODE on every primary), as an operator's resharding does:
	// nothing is lost, and the nodes must follow the slot at once.
	faultClusterMigrate
)

func (k faultKind) String() string {
	return [...]string{"node-kill", "redis-kill", "redis-wipe", "pg-outage", "redis-cut", "redis-stall", "redis-flush",
		"primary-kill", "redis-rollback", "cluster-primary-kill", "redis-evict", "cluster-migrate"}[k]
}

// fault is one fault of a round, at a moment of the sale.
type fault struct {
	what faultKind
	at   time.Duration // from the start of the sale
	down time.Duration // how long the broken thing stays broken
	node int           // faultNodeKill: which node
	// atOKs, when positive, fires the fault as soon as the sale has
	// answered that many OKs, if that comes before at: the last units'
	// batches are then in flight, where a lost reply or a crash matters
	// most (a sold grab answered SOLD_OUT shows only when the reply of the
	// batch that sold the last unit is lost).
	atOKs int
	// blip, for faultRedisStall: Postgres refuses connections for blip,
	// from blipLead before Redis resumes (0: Postgres stays up).
	blip, blipLead time.Duration
}

// lane is what a fault breaks; faults of one lane run one after another
// (a Redis that is down cannot be killed again), lanes run side by side.
func (f fault) lane() string {
	if f.what == faultNodeKill {
		return fmt.Sprintf("node%d", f.node)
	}
	switch f.what {
	case faultPGOutage:
		return "postgres"
	case faultRedisCut:
		return "redis-network"
	}
	return "redis"
}

func (f fault) String() string {
	s := fmt.Sprintf("%s@%.2fs/%.2fs", f.what, f.at.Seconds(), f.down.Seconds())
	if f.atOKs > 0 {
		s += fmt.Sprintf("(or at %d OKs)", f.atOKs)
	}
	if f.what == faultNodeKill {
		s += fmt.Sprintf("(node %d)", f.node)
	}
	if f.blip > 0 {
		s += fmt.Sprintf("+pg-outage(%.2fs before the resume, for %.2fs)", f.blipLead.Seconds(), f.blip.Seconds())
	}
	return s
}

// pgBack is when Postgres accepts connections again after f, from the
// start of the sale (zero when f leaves Postgres alone). Planned moments:
// a fault fired at a count of OKs comes earlier, never later.
func (f fault) pgBack() time.Duration {
	switch {
	case f.what == faultPGOutage:
		return f.at + f.down
	case f.blip > 0:
		return f.at + f.down - f.blipLead + f.blip
	}
	return 0
}

// pgDown is how long f makes Postgres refuse connections.
func (f fault) pgDown() time.Duration {
	if f.what == faultPGOutage {
		return f.down
	}
	return f.blip
}

// attempt is one grab a user sends.
type attempt struct {
	at    time.Duration // from the start of the sale
	user  int64
	key   string // request id; sent only if the schema has requestId
	retry bool   // key was used by an earlier attempt of the same user
	node  int
	// retryAfter, in the rounds whose clients retry (plan.retryOpen): the
	// waits before asking again with the same key while the answers leave
	// the grab open (UNAVAILABLE, a lost reply), as the API tells clients
	// to.
	retryAfter []time.Duration
}

// plan is everything random about a round, drawn from (seed, round) alone,
// so that one round can be replayed without the others.
type plan struct {
	round    int
	kind     string
	stock    int
	limit    int
	users    int
	window   time.Duration // the sale's attempts are spread over it
	nodes    []int         // the nodes the traffic goes to
	attempts []attempt
	faults   []fault
	// voucher is the voucher the round sells, once created.
	voucher int64
	// tickets: the voucher requires a grab ticket, which each client asks
	// for (seckillTicket) before its first grab; pow: and a ticket a
	// solved proof-of-work challenge.
	tickets, pow bool
	// fallback: the round runs on the fallback profile (one node with the
	// database fallback on, segment leases on a Redis of their own).
	fallback bool
	// topology is the Redis the nodes sell from (kind.topology).
	topology string
	// retryOpen: clients ask again with the same request id after an
	// answer that left their grab open (attempt.retryAfter).
	retryOpen bool
	// rpCount is how many packets the round's red packet holds (the stock
	// by default); rpExpiry, when set, is how long after its creation it
	// expires (an hour otherwise, past the round), and the round checks
	// that it is refunded.
	rpCount  int
	rpExpiry time.Duration
	// room, in queue rounds: the sale goes through a waiting room, and
	// the voucher's grabs are the room's (sellQueue), not attempts.
	room *roomPlan
}

// durable reports whether Redis keeps everything in this round: no fault
// wipes it or takes it back in time, so no accepted order may be lost. A
// failover with REDIS_ACK_REPLICAS loses nothing: only what a replica
// holds is answered OK.
func (p plan) durable() bool {
	return !slices.ContainsFunc(p.faults, func(f fault) bool {
		return f.what == faultRedisWipe || f.what == faultRedisFlush || f.what == faultRedisRollback
	})
}

// ordersKept reports whether no voucher order answered OK may be lost in
// this round: Redis keeps everything (durable), or it loses data while
// every node that answered OK lives on and the database stays up, so
// each node still holds its copy of the orders no writer had read
// (persistence.SoldShadow) and hands it back to the reloaded stock. Red
// packets have no such copy: durable says for them.
func (p plan) ordersKept() bool {
	return p.durable() || !slices.ContainsFunc(p.faults, func(f fault) bool {
		return f.what == faultNodeKill || f.what == faultPGOutage
	})
}

// onlyRedisFaults reports whether every fault of the round is one of
// Redis alone that availabilityBound bounds: then nothing else may keep
// the nodes from selling once Redis serves again.
func (p plan) onlyRedisFaults() bool {
	return !slices.ContainsFunc(p.faults, func(f fault) bool {
		_, ok := availabilityBound[f.what]
		return !ok
	})
}

func (p plan) String() string {
	fs := make([]string, len(p.faults))
	for i, f := range p.faults {
		fs[i] = f.String()
	}
	s := fmt.Sprintf("stock %d, perUserLimit %d, %d users, %d attempts over %.1fs on nodes %v, tickets %s, proof of work %s, faults [%s]",
		p.stock, p.limit, p.users, len(p.attempts), p.window.Seconds(), p.nodes, onOff(p.tickets), onOff(p.pow), strings.Join(fs, " "))
	if p.fallback {
		s += ", database fallback on, one node"
	}
	if p.topology != topologySingle {
		s += ", Redis " + p.topology
	}
	if p.retryOpen {
		s += ", clients retry open grabs"
	}
	if p.room != nil {
		s += ", " + p.room.String()
	}
	s += fmt.Sprintf(", red packet of %d", p.rpCount)
	if p.rpExpiry > 0 {
		s += fmt.Sprintf(" expiring after %.0fs", p.rpExpiry.Seconds())
	}
	return s
}

func onOff(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// kind is a fault scenario: which nodes sell and what breaks when.
type kind struct {
	name string
	// faults draws the round's nodes and faults; p.window is the sale's
	// length. It may set the plan's other knobs (red packet, retries).
	faults func(r *rand.Rand, p *plan, short bool) (nodes []int, faults []fault)
	// fallback runs the kind's rounds on the fallback profile.
	fallback bool
	// topology is the Redis the kind's rounds sell from: single (the
	// default), sentinel or cluster.
	topology string
	// moments draws the moments of the round's n attempts, once its
	// faults are drawn (defaultMoments when nil).
	moments func(r *rand.Rand, p *plan, n int) []time.Duration
}

// kinds are the scenarios, in the order rounds cycle through them (round
// k runs kinds[k mod len]), so that every kind gets its share of a run.
var kinds = []kind{
	{name: "none", faults: func(r *rand.Rand, _ *plan, _ bool) ([]int, []fault) {
		return []int{r.IntN(nodeCount)}, nil
	}},
	{name: "two-nodes", faults: func(*rand.Rand, *plan, bool) ([]int, []fault) {
		return allNodes(), nil
	}},
	{name: "node-kill", faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		w := p.window
		nodes := someNodes(r)
		var fs []fault
		for _, n := range nodes[:1+r.IntN(len(nodes))] {
			fs = append(fs, fault{what: faultNodeKill, node: n, at: faultMoment(r, w), down: between(r, 0, 1500*time.Millisecond)})
		}
		return nodes, fs
	}},
	{name: "redis-kill", faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		w := p.window
		var fs []fault
		for range 1 + r.IntN(2) {
			fs = append(fs, fault{what: faultRedisKill, at: faultMoment(r, w), down: between(r, 100*time.Millisecond, 1500*time.Millisecond)})
		}
		return someNodes(r), fs
	}},
	{name: "redis-empty", faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		w := p.window
		return someNodes(r), []fault{{what: faultRedisWipe, at: faultMoment(r, w), down: between(r, 100*time.Millisecond, time.Second)}}
	}},
	// Replies lost on the way back from Redis: a grab whose script sold
	// must not be answered SOLD_OUT for want of its reply.
	{name: "redis-cut", faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		w := p.window
		var fs []fault
		at := faultMoment(r, w)
		for range 1 + r.IntN(3) {
			f := fault{what: faultRedisCut, at: at, down: between(r, 20*time.Millisecond, 300*time.Millisecond)}
			fs = append(fs, f)
			at = f.at + f.down + between(r, 50*time.Millisecond, 500*time.Millisecond)
		}
		return someNodes(r), fs
	}},
	{name: "pg-outage", faults: func(r *rand.Rand, p *plan, short bool) ([]int, []fault) {
		w := p.window
		return someNodes(r), []fault{{what: faultPGOutage, at: faultMoment(r, w), down: outage(r, short)}}
	}},
	// Redis loses its data while the order writer holds orders that
	// Postgres refuses to take: those orders must still count against the
	// stock and each user's perUserLimit once Redis is reloaded.
	{name: "pg-outage+redis-empty", faults: func(r *rand.Rand, p *plan, short bool) ([]int, []fault) {
		w := p.window
		pg := fault{what: faultPGOutage, at: between(r, w/20, w*2/5), down: outage(r, short) + time.Second}
		wipe := fault{what: faultRedisWipe, at: pg.at + between(r, 300*time.Millisecond, pg.down-500*time.Millisecond), down: between(r, 100*time.Millisecond, 500*time.Millisecond)}
		return someNodes(r), []fault{pg, wipe}
	}},
	// Two losses of Redis's data within one second, while both nodes
	// allocate order ids: no order id may be handed out twice.
	{name: "redis-empty-twice", faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		w := p.window
		first := fault{what: faultRedisWipe, at: faultMoment(r, w), down: between(r, 50*time.Millisecond, 200*time.Millisecond)}
		second := fault{what: faultRedisWipe, at: first.at + first.down + between(r, 150*time.Millisecond, 600*time.Millisecond), down: between(r, 50*time.Millisecond, 200*time.Millisecond)}
		return allNodes(), []fault{first, second}
	}},
	{name: "mixed", faults: func(r *rand.Rand, p *plan, short bool) ([]int, []fault) {
		w := p.window
		var fs []fault
		killed := map[int]bool{}
		for range 2 + r.IntN(3) {
			f := fault{what: faultKind(r.IntN(5)), at: faultMoment(r, w)}
			switch f.what {
			case faultNodeKill:
				f.node, f.down = r.IntN(nodeCount), between(r, 0, 1500*time.Millisecond)
				if killed[f.node] {
					continue
				}
				killed[f.node] = true
			case faultPGOutage:
				f.down = outage(r, short)
			default:
				f.down = between(r, 50*time.Millisecond, time.Second)
			}
			fs = append(fs, f)
		}
		return allNodes(), fs
	}},
	// A red packet expires while Postgres refuses connections and a grab
	// of it answered OK waits in a red-packet writer; then Redis loses its
	// data (killed and started empty, or its keys flushed) and Postgres
	// comes back: the refund job may no longer see the held grab in
	// Redis, and must not pay out what that grab will.
	{name: "refund-wipe", faults: func(r *rand.Rand, p *plan, short bool) ([]int, []fault) {
		secs := 3 + r.IntN(4)
		if short {
			secs = 3 + r.IntN(2)
		}
		p.rpExpiry = time.Duration(secs) * time.Second
		// More packets than users: packets are left at the expiry, so
		// there is something to refund, and grabs keep being answered
		// OK while Postgres refuses.
		p.rpCount = p.users + 1 + r.IntN(p.users)
		pg := fault{what: faultPGOutage, at: between(r, max(300*time.Millisecond, p.rpExpiry-2500*time.Millisecond), p.rpExpiry-500*time.Millisecond)}
		wipe := fault{what: faultRedisWipe, at: p.rpExpiry + refundGrace + between(r, 200*time.Millisecond, 1500*time.Millisecond), down: between(r, 100*time.Millisecond, 600*time.Millisecond)}
		if r.IntN(2) == 0 {
			wipe.what, wipe.down = faultRedisFlush, 0
		}
		pg.down = wipe.at + wipe.down + between(r, 300*time.Millisecond, 2*time.Second) - pg.at
		return someNodes(r), []fault{pg, wipe}
	}},
	// The database fallback while Redis stalls: redis-server stopped while
	// grabs' script calls sit in its socket, resumed once the breaker has
	// opened and the fallback sells from Postgres; the stopped scripts
	// then run. Clients retry open grabs with their request id during
	// the stall (the fallback answers) and after it (Redis answers). In
	// half the rounds Postgres also refuses connections for a few seconds
	// around the resume (the re-sync then waits for it). One node sells:
	// the fallback refuses to sell beside another live node.
	{name: "redis-stall", fallback: true, moments: stallMoments, faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		p.retryOpen = true
		// The attempts are placed around it (stallMoments), so that part
		// of the stock is sold when it comes.
		stall := fault{what: faultRedisStall, at: between(r, 500*time.Millisecond, p.window/2), down: between(r, 1200*time.Millisecond, 4*time.Second)}
		if r.IntN(2) == 0 {
			stall.blipLead = between(r, 0, min(stall.down, 1500*time.Millisecond))
			stall.blip = stall.blipLead + between(r, time.Second, 3*time.Second)
		}
		return []int{0}, []fault{stall}
	}},
	// A Sentinel set's primary killed mid-sale, its replica promoted: the
	// nodes run REDIS_MODE=sentinel with REDIS_ACK_REPLICAS=1, so that a
	// grab answered OK is on a replica before the answer, and the replica
	// promoted sells on from what was sold. Both nodes sell, and grabs
	// sent later than failoverStallBound after the promotion must not
	// answer UNAVAILABLE.
	{name: "redis-failover", topology: topologySentinel, faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		return allNodes(), []fault{{what: faultPrimaryKill, at: faultMoment(r, p.window), down: between(r, 500*time.Millisecond, 2*time.Second)}}
	}},
	// Redis goes back in time mid-sale with its keys present: a copy of
	// its files taken while it sells, and between 300 ms and a third of
	// the sale later it is killed and started from that copy. Postgres
	// holds orders Redis no longer knows it sold; the request ids of
	// those orders are gone from Redis too.
	{name: "redis-rollback", faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		w := p.window
		return someNodes(r), []fault{{what: faultRedisRollback, at: faultMoment(r, w), down: between(r, 300*time.Millisecond, max(400*time.Millisecond, w/3))}}
	}},
	// Redis loses every key (FLUSHALL) mid-sale, running on: the orders
	// answered OK that no writer had read are handed back by the nodes
	// that sold them, so none may be lost.
	{name: "redis-flush", faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		return someNodes(r), []fault{{what: faultRedisFlush, at: faultMoment(r, p.window)}}
	}},
	// Redis's maxmemory-policy switched to an evicting one mid-sale and
	// back: UNAVAILABLE meanwhile, selling again at once after.
	{name: "redis-evict", faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		return someNodes(r), []fault{{what: faultRedisEvict, at: faultMoment(r, p.window), down: between(r, 200*time.Millisecond, time.Second)}}
	}},
	// The Redis Cluster primary that serves the voucher killed mid-sale,
	// its replica promoted (REDIS_MODE=cluster, REDIS_ACK_REPLICAS=1).
	{name: "cluster-failover", topology: topologyCluster, faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		return someNodes(r), []fault{{what: faultClusterPrimaryKill, at: faultMoment(r, p.window), down: between(r, 500*time.Millisecond, 2*time.Second)}}
	}},
	// The voucher's hash slot moved to another Cluster primary mid-sale,
	// with REDIS_ACK_REPLICAS=1: the keys, the segment leases and the
	// order log move whole, and the nodes sell on from the new primary.
	{name: "cluster-migrate", topology: topologyCluster, faults: func(r *rand.Rand, p *plan, _ bool) ([]int, []fault) {
		return someNodes(r), []fault{{what: faultClusterMigrate, at: faultMoment(r, p.window), node: r.IntN(2)}}
	}},
	// A waiting room while a node is killed (and started again) and the
	// Sentinel set's primary is killed and a replica promoted, both at
	// random moments while users join, wait, are admitted and grab. With
	// REDIS_ACK_REPLICAS=1 the failover loses nothing: no place is lost or
	// given twice, admissions follow the line, and nobody buys without
	// one (queueFaults; the round's grabs are the room's, sellQueue).
	{name: "queue", topology: topologySentinel, faults: queueFaults},
}

// The Redis topologies a kind sells from.
const (
	topologySingle   = "single"
	topologySentinel = "sentinel"
	topologyCluster  = "cluster"
)

// refundGrace is how long after its expiry a red packet is refunded: the
// nodes run with this grace (nodeSettings), and refund-wipe rounds wipe
// Redis only once it has passed.
const refundGrace = time.Second

// Kinds lists the fault kinds' names, in the order rounds cycle through
// them.
func Kinds() []string { return kindNames() }

// kindNames lists the kinds' names.
func kindNames() []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = k.name
	}
	return out
}

// selectKinds returns the kinds named (all for none), in kinds order.
func selectKinds(names []string) ([]kind, error) {
	if len(names) == 0 {
		return kinds, nil
	}
	var out []kind
	for _, k := range kinds {
		if slices.Contains(names, k.name) {
			out = append(out, k)
		}
	}
	for _, n := range names {
		if !slices.Contains(kindNames(), n) {
			return nil, fmt.Errorf("unknown fault kind %q (have %s)", n, strings.Join(kindNames(), ", "))
		}
	}
	return out, nil
}

// newPlan draws round's plan from (seed, round) alone.
func newPlan(seed int64, round int, ks []kind, short bool) plan {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(round)))
	k := ks[round%len(ks)]
	p := plan{round: round, kind: k.name}
	// Every other round's voucher requires grab tickets (which ones
	// depends on the seed), so that a run of two rounds or more sells
	// both ways; it takes no draw of r, so every other part of a seed's
	// plan stays what it was before tickets existed.
	p.tickets = (uint64(seed)+uint64(round))%2 == 0
	p.pow = p.tickets && (uint64(seed)+uint64(round))%4 == 0 // every other ticket round
	if short {
		p.stock = 5 + r.IntN(36)
		p.window = between(r, 1500*time.Millisecond, 2500*time.Millisecond)
	} else {
		p.stock = 5 + r.IntN(196)
		p.window = between(r, 2*time.Second, 5*time.Second)
	}
	p.limit = 1 + r.IntN(3)
	// More users than the stock serves at their limit, and more attempts
	// than stock, several per user, so that the sale sells out, users
	// reach their limit, and both are raced: a service that sold one unit
	// too many or let a user past the limit would be asked to.
	n := p.stock*3/2 + r.IntN(p.stock*3/2+1) + 5
	perLimit := p.stock / p.limit
	p.users = max(2, n/(2+r.IntN(4)), perLimit+1+r.IntN(perLimit/2+1))
	n = max(n, 2*p.users)
	p.rpCount, p.fallback, p.topology = p.stock, k.fallback, cmp.Or(k.topology, topologySingle)
	p.nodes, p.faults = k.faults(r, &p, short)
	if p.room != nil {
		// The room's users grab through it (sellQueue); the attempts
		// drawn below are the red packet's alone, two per user.
		n = 2 * p.users
	}
	slices.SortFunc(p.faults, func(a, b fault) int { return int(a.at - b.at) })
	// In half the rounds the first crash or cut comes at the sell-out
	// rather than at its moment, whichever is first (a stall comes when
	// its kind placed the attempts for it).
	// A rollback's snapshot at the sell-out would leave nothing to forget.
	if len(p.faults) > 0 && !slices.Contains([]faultKind{faultPGOutage, faultRedisStall, faultRedisRollback}, p.faults[0].what) && r.IntN(2) == 0 {
		p.faults[0].atOKs = max(1, p.stock-r.IntN(min(3, p.stock)))
	}

	// Most attempts spread over the sale; the rest come in a burst right
	// after a fault is undone, as clients retry after an outage, so that
	// what a fault left behind (a voucher rebuilt, a writer holding
	// orders) meets grabs while it matters. The sale lasts until the
	// bursts are over.
	for _, f := range p.faults {
		p.window = max(p.window, f.at+f.down+burst)
	}
	// Half the sales open with a rush, as flash sales do: a share of the
	// attempts in the first 10 ms, so that batches are full when the
	// stock runs out.
	var at []time.Duration
	if k.moments != nil {
		at = k.moments(r, &p, n)
	} else {
		at = defaultMoments(r, p, n)
	}
	slices.Sort(at)
	userBase := userBase(round)
	keys := make(map[int64][]string, p.users) // each user's request ids so far
	for _, t := range at {
		u := userBase + int64(r.IntN(p.users))
		a := attempt{at: t, user: u, node: p.nodes[r.IntN(len(p.nodes))]}
		// A quarter of the attempts retry one of the user's earlier
		// requests with its id, as a client does that timed out or was
		// told UNAVAILABLE; the original may still be in flight.
		if prev := keys[u]; len(prev) > 0 && r.IntN(4) == 0 {
			a.key, a.retry = prev[r.IntN(len(prev))], true
		} else {
			a.key = fmt.Sprintf("chaos-%d-%d-%d", round, u-userBase, len(prev))
			keys[u] = append(prev, a.key)
		}
		p.attempts = append(p.attempts, a)
	}
	if p.retryOpen {
		for i := range p.attempts {
			p.attempts[i].retryAfter = []time.Duration{
				between(r, 100*time.Millisecond, 500*time.Millisecond),
				between(r, 300*time.Millisecond, 1200*time.Millisecond),
				between(r, time.Second, 3*time.Second),
			}
		}
	}
	return p
}

// userBase is the first user id of round's plan: its users are
// userBase + [0, p.users), and its probes (see probe) userBase +
// probeUsers + i, far above any plan's users.
func userBase(round int) int64 { return 1_000_000 + int64(round)*10_000 }

// probeUsers is where a round's probe users begin, from its userBase.
const probeUsers = 9_000

// defaultMoments spreads n attempts over the sale, with an opening rush
// in half the rounds and bursts after the faults.
func defaultMoments(r *rand.Rand, p plan, n int) []time.Duration {
	rush := 0
	if r.IntN(2) == 0 {
		rush = 3 + r.IntN(4) // tenths of the attempts
	}
	at := make([]time.Duration, n)
	for i := range at {
		if r.IntN(10) < rush {
			at[i] = between(r, 0, 10*time.Millisecond)
			continue
		}
		if len(p.faults) > 0 && r.IntN(10) < 3 {
			f := p.faults[r.IntN(len(p.faults))]
			at[i] = f.at + f.down + between(r, 0, burst)
		} else {
			at[i] = between(r, 0, p.window)
		}
	}
	return at
}

// stallMoments places a redis-stall round's n attempts around its stall
// (the plan's one fault): before it, about as many as sell 30-80 % of the
// stock; most of the others while Redis is stopped, so that the fallback
// has buyers for what is left (and may sell out, while Redis still holds
// scripts that sell); the rest after Redis resumes.
func stallMoments(r *rand.Rand, p *plan, n int) []time.Duration {
	f := p.faults[0]
	before := min(n-1, max(1, p.stock*(3+r.IntN(6))/10))
	at := make([]time.Duration, n)
	for i := range at {
		switch {
		case i < before:
			at[i] = between(r, 0, f.at)
		case r.IntN(10) < 7:
			at[i] = between(r, f.at, f.at+f.down)
		default:
			at[i] = between(r, f.at+f.down, f.at+f.down+2*burst)
		}
	}
	p.window = max(p.window, f.at+f.down+2*burst)
	return at
}

// burst is how long the grabs after a fault keep coming.
const burst = 600 * time.Millisecond

func allNodes() []int {
	out := make([]int, nodeCount)
	for i := range out {
		out[i] = i
	}
	return out
}

// someNodes is one node or all of them, at random.
func someNodes(r *rand.Rand) []int {
	if r.IntN(2) == 0 {
		return []int{r.IntN(nodeCount)}
	}
	return allNodes()
}

// faultMoment is a moment early enough in the sale that grabs are still
// selling, or racing the sell-out, around it.
func faultMoment(r *rand.Rand, window time.Duration) time.Duration {
	return between(r, window/20, window*7/10)
}

// outage is how long Postgres refuses: longer than the order writer's
// first backoffs, so that it holds orders it cannot commit.
func outage(r *rand.Rand, short bool) time.Duration {
	if short {
		return between(r, time.Second, 3*time.Second)
	}
	return between(r, time.Second, 4*time.Second)
}

// between is uniform in [lo, hi).
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}
