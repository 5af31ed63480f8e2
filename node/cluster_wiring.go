package node

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"flashsale/actors"
	"flashsale/config"
	"flashsale/internal/lease"
	"flashsale/persistence"
)

// lockPart is the Redlock over LOCK_REDIS_URLS (the stock Redis in the
// embedded mode): segment ownership and the background singletons (the
// maintenance services) take their leases from it, so that each runs on
// one node at a time.
type lockPart struct {
	clients []redis.UniversalClient
	redlock *lease.Redlock
}

// openLocks builds the Redlock over LOCK_REDIS_URLS.
func (a *app) openLocks(context.Context) error {
	var nodes []redis.UniversalClient
	for _, u := range a.cfg.LockRedisURLs {
		// The default node, REDIS_URL, is reached in REDIS_MODE (its
		// primary, through Sentinel); any other is one server.
		target, err := persistence.ParseRedisTarget(persistence.LockNodeMode(a.cfg.RedisMode, a.cfg.RedisURL, u), u) // validated by config
		if err != nil {
			return &config.Error{Var: "LOCK_REDIS_URLS", Msg: err.Error()}
		}
		// A lock node that stalls must not hold an activation past its
		// lease: Redlock needs a quorum, not every node.
		c := a.traceRedis(target.Client(persistence.ClientTuning{Dial: time.Second, Read: 500 * time.Millisecond, Write: 500 * time.Millisecond,
			MaxRetries: -1, DialerRetries: 1}))
		a.locks.clients = append(a.locks.clients, c)
		nodes = append(nodes, c)
	}
	if len(nodes) == 0 { // embedded mode: the in-process Redis
		nodes = []redis.UniversalClient{a.rdb}
	}
	a.locks.redlock = lease.New(nodes, persistence.LeaseKey, 0, a.log)
	return nil
}

func (p *lockPart) close() {
	for _, c := range p.clients {
		_ = c.Close()
	}
}

// segmentLeases hands segment activations their leases. The value of the
// last lease of each segment held here is remembered: the segment's next
// activation here first takes it back (Redlock.Resume), which works only
// while Redis still holds it for this process, instead of waiting up to
// SEGMENT_LEASE_TTL for it to lapse. That is the case after a renewal
// failed (Redis away, failed over, restarted: such a lease is not
// released) and when the activation stopped without its release reaching
// Redis (it runs after the stop, and a slot on the move may refuse it). A
// release of a lease this process has handed out again since is skipped.
// Fencing tokens keep any overlap harmless.
type segmentLeases struct {
	redlock *lease.Redlock
	ttl     time.Duration

	mu   sync.Mutex
	last map[string]heldLease // lease name -> the last lease of it handed out here
}

// heldLease is a lease handed out: its value and which hand-out it was.
type heldLease struct {
	value string
	gen   uint64
}

var _ actors.Leases = (*segmentLeases)(nil)

func newSegmentLeases(redlock *lease.Redlock, ttl time.Duration) *segmentLeases {
	return &segmentLeases{redlock: redlock, ttl: ttl, last: map[string]heldLease{}}
}

// resumeTries and resumeRetry bound the attempts to take a lease back.
const (
	resumeTries = 6
	resumeRetry = 50 * time.Millisecond
)

func (s *segmentLeases) Acquire(ctx context.Context, name string) (actors.Lease, error) {
	s.mu.Lock()
	prev := s.last[name]
	s.mu.Unlock()
	// Redis may not answer the first ask (a redirect while the slot map
	// catches up after a move): a few tries, a fraction of the lease.
	for try := 0; prev.value != "" && try < resumeTries; try++ {
		l, err := s.redlock.Resume(ctx, name, s.ttl, prev.value)
		if err == nil {
			return s.handOut(name, l), nil
		}
		if errors.Is(err, lease.ErrLost) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(resumeRetry):
		}
	}
	l, err := s.redlock.Acquire(ctx, name, s.ttl)
	if err != nil {
		return nil, err
	}
	return s.handOut(name, l), nil
}

// handOut remembers l as the segment's latest lease here.
func (s *segmentLeases) handOut(name string, l *lease.Lease) *segmentLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	gen := s.last[name].gen + 1
	s.last[name] = heldLease{value: l.Value(), gen: gen}
	return &segmentLease{Lease: l, leases: s, name: name, gen: gen}
}

// segmentLease is one segment's lease as handed out here.
type segmentLease struct {
	*lease.Lease
	leases *segmentLeases
	name   string
	gen    uint64
	lost   atomic.Bool // a renewal failed for want of Redis: never released
}

func (l *segmentLease) Extend(ctx context.Context) error {
	err := l.Lease.Extend(ctx)
	if err != nil && !errors.Is(err, lease.ErrLost) {
		l.lost.Store(true) // Redis may still hold it for us: keep it
	}
	return err
}

func (l *segmentLease) Release(ctx context.Context) {
	l.leases.mu.Lock()
	latest := l.leases.last[l.name].gen == l.gen
	l.leases.mu.Unlock()
	if latest && !l.lost.Load() {
		l.Lease.Release(ctx)
	}
}

// clusterOptions builds this member's cluster settings from CLUSTER_*.
func clusterOptions(cfg config.Config) (actors.ClusterOptions, error) {
	co := actors.ClusterOptions{Name: cfg.ClusterName, Host: cfg.ClusterHost, Port: cfg.ClusterPort}
	switch cfg.ClusterProvider {
	case "automanaged":
		co.Provider = automanaged.NewWithConfig(time.Second, cfg.ClusterAutomanagedPort, cfg.ClusterSeeds...)
	case "etcd":
		p, err := etcd.NewWithConfig("/flashsale/"+cfg.ClusterName, clientv3.Config{
			Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second,
		})
		if err != nil {
			return co, &config.Error{Var: "ETCD_ENDPOINTS", Msg: err.Error()}
		}
		co.Provider = p
	default:
		return co, &config.Error{Var: "CLUSTER_PROVIDER", Msg: "a cluster of several processes needs automanaged or etcd"}
	}
	return co, nil
}

var _ cluster.ClusterProvider = (*automanaged.AutoManagedProvider)(nil)

// clusterLabel names the member in the start-up log.
func clusterLabel(cfg config.Config) string {
	if cfg.ClusterProvider == "automanaged" {
		return cfg.ClusterProvider + " :" + strconv.Itoa(cfg.ClusterAutomanagedPort)
	}
	return cfg.ClusterProvider
}
