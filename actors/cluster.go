package actors

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
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
	r       *Router
	c       *cluster.Cluster
	timeout time.Duration
	log     *slog.Logger

	// members is the sorted placement view: each hosting member's address
	// and its hash seed.
	members atomic.Pointer[[]placed]
	sub     *eventstream.Subscription

	// handed is every identity the lookup has resolved, so that a change
	// of membership can drop their cached PIDs.
	mu     sync.Mutex
	handed map[string]struct{}
}

type placed struct {
	addr string
	seed uint64
}

var _ cluster.IdentityLookup = (*placement)(nil)

// NewClusteredRouter starts a router that is a member of a protoactor
// cluster: grabs of a segment hosted by another member are sent to it
// with cluster.Request. Close leaves the cluster.
func NewClusteredRouter(store Store, ids OrderIDs, preheater Preheater, log *slog.Logger, opts Options, co ClusterOptions) (*Router, error) {
	r := NewRouter(store, ids, preheater, log, opts)
	c := &Cluster{r: r, log: log, handed: map[string]struct{}{}}
	// A member answers a grab within GrabTimeout (it abandons one that
	// waited longer, see serve) plus a batch in flight, the database
	// fallback's bound included: waiting longer than that for a reply
	// only means the member is gone. cluster.Request retries only after
	// a dead letter (the grab never arrived) within this bound, and the
	// request id makes any repeat the same sale.
	c.timeout = 2*r.opts.GrabTimeout + time.Second
	r.cluster = c
	if _, err := r.system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &entryActor{r: r} }), entryName); err != nil {
		r.Close()
		return nil, fmt.Errorf("start the cluster entry actor: %w", err)
	}
	cfg := cluster.Configure(co.Name, co.Provider, &placement{c: c}, remote.Configure(co.Host, co.Port),
		cluster.WithKinds(cluster.NewKind(segmentKind, actor.PropsFromProducer(func() actor.Actor { return &entryActor{r: r} }))),
		cluster.WithRequestTimeout(c.timeout))
	c.c = cluster.New(r.system, cfg)
	c.sub = r.system.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			c.onTopology(t)
		}
	})
	c.c.StartMember() // publishes the first topologies (onTopology) before it returns
	c.place(c.c.MemberList.Members().Members())
	log.Info("cluster member started", "cluster", co.Name, "address", c.Address())
	return r, nil
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
	c.log.Info("cluster membership changed", "members", len(addrs), "joined", len(t.Joined), "left", len(t.Left))
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
	c.members.Store(&ms)
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
// the answer.
func (c *Cluster) forward(key segKey, g *grabMsg) domain.GrabResult {
	res, segs := c.request(key, g)
	c.r.learnSegments(key.voucher, segs)
	return res
}

// request is one grab's round trip through the cluster.
func (c *Cluster) request(key segKey, g *grabMsg) (domain.GrabResult, int) {
	req := &clusterpb.GrabRequest{
		VoucherId: key.voucher, Segment: int32(key.seg), UserId: g.user, ClientIp: g.ip,
		RequestId: g.req, Keyed: g.keyed, Sent: g.sent(),
	}
	resp, err := c.c.Request(key.identity(), segmentKind, req, cluster.WithTimeout(c.timeout))
	reply, ok := resp.(*clusterpb.GrabReply)
	if err != nil || !ok {
		remoteGrabs.WithLabelValues("failed").Inc()
		c.log.Debug("grab sent to another member got no answer", "voucher", key.voucher, "segment", key.seg, "err", err)
		return domain.GrabResult{Code: domain.SeckillUnavailable}, 0
	}
	remoteGrabs.WithLabelValues("ok").Inc()
	res := domain.GrabResult{Code: domain.SeckillCode(reply.Code), OrderID: reply.OrderId, RetryAfter: time.Duration(reply.RetryAfterMs) * time.Millisecond}
	if !res.Code.Valid() {
		return domain.GrabResult{Code: domain.SeckillUnavailable}, 0
	}
	return res, int(reply.Segments)
}

func (c *Cluster) shutdown() {
	c.r.system.EventStream.Unsubscribe(c.sub)
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

// serve runs a grab another member sent, answering to reply. A grab that
// waits here longer than GrabTimeout is answered UNAVAILABLE and never
// sent to Redis (its sender gives up soon after), like a local one.
func (r *Router) serve(m *clusterpb.GrabRequest, reply *actor.PID) {
	key := segKey{voucher: m.VoucherId, seg: int(m.Segment)}
	if m.Segment < 0 || int(m.Segment) >= domain.MaxSegments {
		key.seg = 0
	}
	var answered atomic.Bool
	g := &grabMsg{user: m.UserId, ip: m.ClientIp, req: m.RequestId, keyed: m.Keyed}
	if m.Sent {
		g.state.Store(grabTaken)
	}
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
	timer = time.AfterFunc(r.opts.GrabTimeout, func() {
		if g.abandon() {
			g.done(domain.GrabResult{Code: domain.SeckillUnavailable}, 0)
		}
	})
	if !r.send(key, g) {
		g.done(domain.GrabResult{Code: domain.SeckillUnavailable}, 0)
	}
}

// protoactorLogger is the logger protoactor-go writes to: ours, with its
// per-retry ERROR lines ("cluster.RequestFuture failed" on every dead
// letter while membership changes) and its INFO chatter about topology
// and actors starting sent to DEBUG.
func protoactorLogger(log *slog.Logger) *slog.Logger {
	return slog.New(&quietHandler{Handler: log.Handler()}).With("component", "protoactor")
}

type quietHandler struct{ slog.Handler }

var noisy = map[string]bool{
	"cluster.RequestFuture failed": true,
	"Request retried but failed":   true,
}

func (h *quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug) || h.Handler.Enabled(ctx, l)
}

func (h *quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo || (r.Level >= slog.LevelWarn && noisy[r.Message]) {
		r.Level = slog.LevelDebug
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &quietHandler{Handler: h.Handler.WithAttrs(as)}
}

func (h *quietHandler) WithGroup(name string) slog.Handler {
	return &quietHandler{Handler: h.Handler.WithGroup(name)}
}
