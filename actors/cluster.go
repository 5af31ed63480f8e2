package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/cespare/xxhash/v2"

	"flashsale/actors/clusterpb"
	"flashsale/domain"
)

// ClusterOptions makes a router a protoactor cluster member, so that a
// voucher's segments are hosted across nodes rather than on one.
type ClusterOptions struct {
	// Name: members with the same name form one cluster.
	Name string
	// Provider finds the other members (test, automanaged or etcd).
	Provider cluster.ClusterProvider
	// Host and Port are this member's actor remoting address (port 0:
	// any free port).
	Host string
	Port int
}

// segmentKind is the cluster kind of a voucher segment.
const segmentKind = "segment"

// entryName is the name of each member's entry actor: the actor that
// takes the grabs other members send and hands them to this member's
// segment activations.
const entryName = "flashsale-segments"

// Cluster places each voucher segment on one member and carries grabs to
// it. Placement is rendezvous hashing of the segment's identity over the
// members that host segments, with a 64-bit hash (xxhash) and a strong
// mix per member: protoactor's own partition lookup hashes with FNV-32
// over identity and address concatenated, which measured a 50/25/25 split
// for three members whose ports differ in the last digit.
//
// Ownership is only routing: two members may briefly both think they host
// a segment while membership changes. A segment's activation serves only
// under its Redlock lease (Options.Leases), and every script call carries
// its fencing token, so a duplicate can neither sell twice nor oversell;
// it stops itself (see voucherActor).
type Cluster struct {
	r    *Router
	c    *cluster.Cluster
	log  *slog.Logger
	name string

	// members is the sorted placement view: each hosting member's address
	// and its hash seed.
	members atomic.Pointer[[]placed]
	sub     *eventstream.Subscription

	mu sync.Mutex
	// handed is every identity the lookup has resolved, so that a change
	// of membership can drop their cached PIDs.
	handed map[string]struct{}
	// departures holds, per member a grab was sent to, a channel closed
	// when that member leaves the placement: the grabs waiting on it are
	// sent to the segment's new host at once (see request).
	departures map[string]chan struct{}
	// joined: Join ran (the cluster's member list and remoting started).
	joined bool
}

type placed struct {
	addr string
	seed uint64
}

var _ cluster.IdentityLookup = (*placement)(nil)

// NewClusteredRouter starts a router that will be a member of a protoactor
// cluster once Join is called: grabs of a segment hosted by another member
// are sent to it (see Cluster.request). Until then it hosts nothing and
// answers every grab UNAVAILABLE. Stop leaves the cluster.
func NewClusteredRouter(store Store, ids OrderIDs, preheater Preheater, log *slog.Logger, opts Options, co ClusterOptions) (*Router, error) {
	r := NewRouter(store, ids, preheater, log, opts)
	c := &Cluster{r: r, log: log, name: co.Name, handed: map[string]struct{}{}, departures: map[string]chan struct{}{}}
	c.members.Store(&[]placed{})
	r.cluster = c
	if _, err := r.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &entryActor{r: r} }), entryName); err != nil {
		r.Stop()
		return nil, fmt.Errorf("start the cluster entry actor: %w", err)
	}
	rc := remote.Configure(co.Host, co.Port)
	cfg := cluster.Configure(co.Name, co.Provider, &placement{c: c}, rc,
		cluster.WithKinds(cluster.NewKind(segmentKind, actor.PropsFromProducer(func() actor.Actor { return &entryActor{r: r} }))))
	c.c = cluster.New(r.system, cfg)
	c.sub = r.system.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			c.onTopology(t)
		}
	})
	return r, nil
}

// Join makes the router a member: other members send it the grabs of the
// segments it hosts from then on. A node joins last, once everything a
// grab reaches (the order writer, live stock) is built: a member is found
// by the others, and sent grabs, the moment it joins.
func (c *Cluster) Join() {
	c.mu.Lock()
	joined := c.joined
	c.joined = true
	c.mu.Unlock()
	if joined {
		return
	}
	c.c.StartMember() // publishes the first topologies (onTopology) before it returns
	c.place(c.c.MemberList.Members().Members())
	c.log.Info("cluster member started", "cluster", c.name, "address", c.Address())
}

// Address is this member's actor remoting address.
func (c *Cluster) Address() string { return c.r.system.Address() }

// Members lists the hosting members' addresses as this member sees them.
func (c *Cluster) Members() []string {
	ms := *c.members.Load()
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.addr
	}
	return out
}

// Cluster returns the router's cluster membership, nil for a local router.
func (r *Router) Cluster() *Cluster { return r.cluster }

func (c *Cluster) onTopology(t *cluster.ClusterTopology) {
	addrs := c.place(t.Members)
	// Cached PIDs point at the old hosts: drop them, so the next request
	// asks the placement again.
	c.mu.Lock()
	for id := range c.handed {
		c.c.PidCache.Remove(id, segmentKind)
	}
	clear(c.handed)
	c.mu.Unlock()
	c.r.Rehome(c.Local)
	if len(t.Left) == 0 {
		c.log.Info("cluster membership changed", "members", len(addrs), "joined", len(t.Joined))
		return
	}
	left := make([]string, len(t.Left))
	for i, m := range t.Left {
		left[i] = m.Address()
	}
	// The one line of a member's loss: protoactor's own about it are DEBUG
	// (peerLoss).
	c.log.Warn("cluster member left; its segments move to the others", "members", len(addrs), "left", left, "joined", len(t.Joined))
}

// place makes members the placement's view and returns their addresses.
func (c *Cluster) place(members []*cluster.Member) []string {
	self := c.r.system.Address() // remoting has started: the real port
	var addrs []string
	for _, m := range members {
		if m.HasKind(segmentKind) {
			addrs = append(addrs, m.Address())
		}
	}
	if !slices.Contains(addrs, self) {
		addrs = append(addrs, self) // until this member's own join shows
	}
	c.setMembers(addrs, self)
	return addrs
}

func (c *Cluster) setMembers(addrs []string, self string) {
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	ms := make([]placed, len(addrs))
	for i, a := range addrs {
		ms[i] = placed{addr: a, seed: xxhash.Sum64String(a)}
	}
	c.mu.Lock()
	c.members.Store(&ms)
	for addr, gone := range c.departures {
		if !slices.Contains(addrs, addr) {
			close(gone)
			delete(c.departures, addr)
		}
	}
	c.mu.Unlock()
	clusterMembers.Set(float64(len(ms)))
	placementShare.Set(Share(addrs, self, 4096))
}

// Local reports whether this member hosts the segment.
func (c *Cluster) Local(key segKey) bool {
	var buf [48]byte
	return c.ownerOf(xxhash.Sum64(appendIdentity(buf[:0], key))) == c.r.system.Address()
}

func appendIdentity(b []byte, key segKey) []byte {
	b = strconv.AppendInt(b, key.voucher, 10)
	b = append(b, '/')
	return strconv.AppendInt(b, int64(key.seg), 10)
}

// ownerOf is rendezvous hashing: the member with the highest score for the
// identity's hash hosts it.
func (c *Cluster) ownerOf(id uint64) string {
	return owner(*c.members.Load(), id)
}

func owner(ms []placed, id uint64) string {
	best, bestScore := "", uint64(0)
	for _, m := range ms {
		if s := mix(m.seed ^ id); best == "" || s > bestScore {
			best, bestScore = m.addr, s
		}
	}
	return best
}

// mix is the splitmix64 finalizer: every input bit moves every output bit,
// so seeds that differ in one character score independently.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Share is the share of n sample segment identities (voucher i/64,
// segment i%64) that member would host among members: how fair the
// placement is (1/len(members) is perfect).
func Share(members []string, member string, n int) float64 {
	ms := make([]placed, len(members))
	for i, a := range members {
		ms[i] = placed{addr: a, seed: xxhash.Sum64String(a)}
	}
	var buf [48]byte
	mine := 0
	for i := range n {
		key := segKey{voucher: int64(i / domain.MaxSegments), seg: i % domain.MaxSegments}
		if owner(ms, xxhash.Sum64(appendIdentity(buf[:0], key))) == member {
			mine++
		}
	}
	return float64(mine) / float64(n)
}

// forward sends a grab to the member hosting its segment and waits for
// the answer, until the grab's deadline at most.
func (c *Cluster) forward(ctx context.Context, key segKey, g *grabMsg) domain.GrabResult {
	res, segs := c.request(ctx, key, g)
	c.r.learnSegments(key.voucher, segs)
	return res
}

// replyRoom is the part of a grab's remaining time kept for the host's
// answer to travel back: the budget a request gives the host is that much
// shorter than the asking member's own wait.
const replyRoom = 50 * time.Millisecond

// redeliverPause spaces the sends of a grab that came back undelivered
// (a dead letter), so that a member that is starting or stopping is not
// asked in a tight loop.
const redeliverPause = 50 * time.Millisecond

// request is one grab's round trip through the cluster, answered by the
// grab's deadline whatever happens to the member hosting its segment: an
// answer that has not come by then is UNAVAILABLE, and, when the grab may
// have reached that member, undecided (its request id settles it, like a
// lost reply's).
//
// It does not use cluster.Request: that gives each attempt the whole
// timeout and checks the overall deadline only between attempts, and a
// member killed without leaving holds every message sent to it in
// protoactor's endpoint writer while the writer retries its connection
// (5 attempts 2 s apart) before the message comes back as a dead letter:
// a grab sent just after the kill waited 10 s. Here the grab is sent
// to the owner's entry actor (this member's own when it hosts the
// segment now) and waited for until the deadline, and when the owner
// leaves the placement meanwhile (its death noticed), the grab goes to the
// new owner at once, marked sent: it may have reached the dead member
// and sold, so only its request id may decide it there.
func (c *Cluster) request(ctx context.Context, key segKey, g *grabMsg) (domain.GrabResult, int) {
	deadline := g.deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(c.r.opts.GrabTimeout)
	}
	sent := g.sent()
	id := xxhash.Sum64String(key.identity())
	for {
		left := time.Until(deadline)
		if left <= replyRoom || ctx.Err() != nil {
			remoteGrabs.WithLabelValues("failed").Inc()
			return domain.GrabResult{Code: domain.SeckillUnavailable}, 0
		}
		addr, gone := c.owner(id)
		if addr == "" { // not joined yet: no member to send it to
			break
		}
		req := &clusterpb.GrabRequest{
			VoucherId: key.voucher, Segment: int32(key.seg), UserId: g.user, ClientIp: g.ip,
			RequestId: g.req, Keyed: g.keyed, Sent: sent, BudgetMs: max((left - replyRoom).Milliseconds(), 1), // 0 would mean none
		}
		f := c.r.system.Root.RequestFuture(actor.NewPID(addr, entryName), req, left)
		answer := make(chan futureResult, 1)
		go func() { // ends when the future does: by the deadline
			res, err := f.Result()
			answer <- futureResult{res, err}
		}()
		var got futureResult
		select {
		case got = <-answer:
		case <-gone:
			select {
			case got = <-answer: // answered as it left: take the answer
			default:
				remoteGrabs.WithLabelValues("resent").Inc()
				c.log.Debug("member left with a grab sent to it; sending it to the new host", "member", addr, "voucher", key.voucher, "segment", key.seg)
				sent = true
				continue
			}
		case <-ctx.Done():
			continue // answered UNAVAILABLE above: nobody is listening
		}
		if reply, ok := got.res.(*clusterpb.GrabReply); ok && got.err == nil {
			res := domain.GrabResult{Code: domain.SeckillCode(reply.Code), OrderID: reply.OrderId, RetryAfter: time.Duration(reply.RetryAfterMs) * time.Millisecond}
			if !res.Code.Valid() {
				break
			}
			remoteGrabs.WithLabelValues("ok").Inc()
			return res, int(reply.Segments)
		}
		if errors.Is(got.err, actor.ErrDeadLetter) || errors.Is(got.err, remote.ErrDeadLetter) {
			// Never delivered: the same grab may be sent again.
			select {
			case <-time.After(min(redeliverPause, max(time.Until(deadline)-replyRoom, 0))):
			case <-gone:
			}
			continue
		}
		break // the deadline passed
	}
	remoteGrabs.WithLabelValues("failed").Inc()
	c.log.Debug("grab sent to another member got no answer in time", "voucher", key.voucher, "segment", key.seg)
	return domain.GrabResult{Code: domain.SeckillUnavailable}, 0
}

type futureResult struct {
	res any
	err error
}

// owner is the member hosting the identity now, with a channel closed
// when it leaves the placement.
func (c *Cluster) owner(id uint64) (string, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := c.ownerOf(id)
	gone := c.departures[addr]
	if gone == nil {
		gone = make(chan struct{})
		c.departures[addr] = gone
	}
	return addr, gone
}

func (c *Cluster) shutdown() {
	c.r.system.EventStream.Unsubscribe(c.sub)
	c.mu.Lock()
	joined := c.joined
	c.mu.Unlock()
	if !joined { // a start that failed before the node joined
		c.r.system.Shutdown()
		return
	}
	c.c.Shutdown(true)
}

// placement is the cluster's identity lookup: a segment identity resolves
// to the entry actor of the member that hosts it. Activations are the
// router's business (they need a lease and a fencing token first), so
// the lookup spawns nothing.
type placement struct{ c *Cluster }

func (p *placement) Get(ci *cluster.ClusterIdentity) *actor.PID {
	addr := p.c.ownerOf(xxhash.Sum64String(ci.Identity))
	if addr == "" {
		return nil
	}
	p.c.mu.Lock()
	p.c.handed[ci.Identity] = struct{}{}
	p.c.mu.Unlock()
	return actor.NewPID(addr, entryName)
}

func (p *placement) RemovePid(ci *cluster.ClusterIdentity, pid *actor.PID) {
	p.c.c.PidCache.RemoveByValue(ci.Identity, ci.Kind, pid)
}

func (p *placement) Setup(*cluster.Cluster, []string, bool) {}
func (p *placement) Shutdown()                              {}

// entryActor takes the grabs other members send to this one and hands
// each to the segment's activation here, answering the sender when the
// activation answers.
type entryActor struct{ r *Router }

func (e *entryActor) Receive(ctx actor.Context) {
	m, ok := ctx.Message().(*clusterpb.GrabRequest)
	if !ok {
		return
	}
	if sender := ctx.Sender(); sender != nil {
		e.r.serve(m, sender)
	}
}

// serve runs a grab another member sent, answering to reply. The sender
// waits for the answer for the request's budget (GrabTimeout if it gives
// none): a grab still waiting here when a script call could no longer
// answer within it (batchRoom) is answered UNAVAILABLE and never sent to
// Redis, like a local one whose caller gave up.
func (r *Router) serve(m *clusterpb.GrabRequest, reply *actor.PID) {
	key := segKey{voucher: m.VoucherId, seg: int(m.Segment)}
	if m.Segment < 0 || int(m.Segment) >= domain.MaxSegments {
		key.seg = 0
	}
	budget := r.opts.GrabTimeout
	if m.BudgetMs > 0 {
		budget = min(budget, time.Duration(m.BudgetMs)*time.Millisecond)
	}
	var answered atomic.Bool
	g := &grabMsg{user: m.UserId, ip: m.ClientIp, req: m.RequestId, keyed: m.Keyed, sentBefore: m.Sent,
		deadline: time.Now().Add(budget)}
	var timer *time.Timer
	g.done = func(res domain.GrabResult, segs int) {
		if !answered.CompareAndSwap(false, true) {
			return
		}
		if timer != nil {
			timer.Stop()
		}
		r.system.Root.Send(reply, &clusterpb.GrabReply{
			Code: string(res.Code), OrderId: res.OrderID, RetryAfterMs: res.RetryAfter.Milliseconds(), Segments: int32(segs),
		})
	}
	timer = time.AfterFunc(budget-r.batchRoom(budget), func() {
		if g.abandon() {
			g.done(domain.GrabResult{Code: domain.SeckillUnavailable}, 0)
		}
	})
	if !r.send(key, g) {
		g.done(domain.GrabResult{Code: domain.SeckillUnavailable}, 0)
	}
}

// batchRoom is the part of a forwarded grab's budget kept for its script
// call: a grab not taken into one by then is answered UNAVAILABLE, so that
// a call's answer (bounded by BatchTimeout) reaches the sender before it
// gives up. At most a quarter of the budget, so that a long BatchTimeout
// leaves a grab time to wait for its turn.
func (r *Router) batchRoom(budget time.Duration) time.Duration {
	return min(r.opts.BatchTimeout, budget/4)
}

// protoactorLogger is the logger protoactor-go writes to: ours, with its
// per-retry ERROR lines ("cluster.RequestFuture failed" on every dead
// letter while membership changes) and its INFO chatter about topology
// and actors starting sent to DEBUG, and its warnings and errors logged
// once per event (see repeats).
func protoactorLogger(log *slog.Logger) *slog.Logger {
	return newProtoactorLogger(log, time.Now)
}

func newProtoactorLogger(log *slog.Logger, now func() time.Time) *slog.Logger {
	h := &quietHandler{Handler: log.Handler(), seen: &repeats{gap: repeatGap, now: now, runs: map[string]*run{}}}
	return slog.New(h).With("component", "protoactor")
}

type quietHandler struct {
	slog.Handler
	seen *repeats
	// scope is the member a logger derived with With speaks of, if any.
	scope string
}

var noisy = map[string]bool{
	"cluster.RequestFuture failed": true,
	"Request retried but failed":   true,
}

// peerLoss are protoactor's lines about a member it cannot reach: one
// member's death gave each survivor five at once (the remote's endpoint
// writer three, the gossip, automanaged's health check), four of them
// ERRORs, each naming the member another way (its address, its health
// URL, its id). A death is expected (a deploy, a crash the cluster heals)
// and the membership says it once: onTopology's WARN when a member leaves.
// These go to DEBUG.
var peerLoss = map[string]bool{
	"EndpointWriter lost connection":                 true,
	"EndpointWriter failed to create receive stream": true,
	"EndpointWriter failed to connect":               true,
	"Bad connection to the node health status":       true,
	"sendGossipForMember failed":                     true,
}

func (h *quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug) || h.Handler.Enabled(ctx, l)
}

func (h *quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo || (r.Level >= slog.LevelWarn && (noisy[r.Message] || peerLoss[r.Message])) {
		r.Level = slog.LevelDebug
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	if r.Level >= slog.LevelWarn {
		held, ok := h.seen.admit(r.Level.String() + " " + r.Message + " " + h.scope + memberOf(r.Attrs))
		if !ok {
			return nil
		}
		if held > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Int("suppressed", held))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &quietHandler{Handler: h.Handler.WithAttrs(as), seen: h.seen, scope: h.scope + memberOf(func(f func(slog.Attr) bool) {
		for _, a := range as {
			if !f(a) {
				return
			}
		}
	})}
}

func (h *quietHandler) WithGroup(name string) slog.Handler {
	return &quietHandler{Handler: h.Handler.WithGroup(name), seen: h.seen, scope: h.scope}
}

// memberAttrs are the attributes by which protoactor's lines name the
// member they are about.
var memberAttrs = map[string]bool{
	"address": true, "MemberId": true, "memberId": true, "member": true, "autoManMemberUrl": true,
	"pid": true, "PID": true, "gossipPid": true,
}

// memberOf is the member a line is about, from its attributes: a PID by
// its address only (a future's PID differs on every request).
func memberOf(attrs func(func(slog.Attr) bool)) string {
	var b strings.Builder
	attrs(func(a slog.Attr) bool {
		if !memberAttrs[a.Key] {
			return true
		}
		v := a.Value.Resolve()
		if pid, ok := v.Any().(*actor.PID); ok && pid != nil {
			b.WriteString(pid.Address)
		} else {
			b.WriteString(v.String())
		}
		b.WriteByte(' ')
		return true
	})
	return b.String()
}

// repeatGap is how long a line must have been quiet for its next
// occurrence to count as a new event. protoactor repeats a failure about
// a dead member without end: automanaged's health check of a seed that
// no longer answers logs an ERROR every second, and every message sent
// to it costs five connection attempts 2 s apart, each an ERROR line.
const repeatGap = time.Minute

// maxRuns bounds the lines remembered: past it, those quiet for repeatGap
// are forgotten, and if none is, all are.
const maxRuns = 1024

// repeats lets through the first line of each event: a line (level,
// message, the member it is about) is logged when it has not been seen
// for repeatGap, and held back (counted in flashsale_protoactor_log_
// suppressed_total) while it keeps coming. The next line of it logged,
// after a quiet gap, carries how many were held back since the last.
type repeats struct {
	gap time.Duration
	now func() time.Time

	mu   sync.Mutex
	runs map[string]*run
}

type run struct {
	last time.Time
	held int
}

func (s *repeats) admit(key string) (held int, ok bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[key]; r != nil {
		if now.Sub(r.last) < s.gap {
			r.last = now
			r.held++
			protoactorSuppressed.Inc()
			return 0, false
		}
		held, r.last, r.held = r.held, now, 0
		return held, true
	}
	if len(s.runs) >= maxRuns {
		maps.DeleteFunc(s.runs, func(_ string, r *run) bool { return now.Sub(r.last) >= s.gap })
		if len(s.runs) >= maxRuns {
			clear(s.runs)
		}
	}
	s.runs[key] = &run{last: now}
	return 0, true
}
