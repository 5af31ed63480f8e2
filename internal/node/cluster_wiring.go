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
	"flashsale/internal/config"
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

func (a *app) openLocks() error {
	var nodes []redis.UniversalClient
	for _, u := range a.cfg.LockRedisURLs {
		// The default node, REDIS_URL, is reached in REDIS_MODE (its
		// primary, through Sentinel); any other is one server.
		target, err := persistence.ParseRedisTarget(config.LockNodeMode(a.cfg, u), u) // validated by config
		if err != nil {
			return &config.Error{Var: "LOCK_REDIS_URLS", Msg: err.Error()}
		}
		// A lock node that stalls must not hold an activation past its
		// lease: Redlock needs a quorum, not every node.
		c := target.Client(persistence.ClientTuning{Dial: time.Second, Read: 500 * time.Millisecond, Write: 500 * time.Millisecond,
			MaxRetries: -1, DialerRetries: 1})
		a.locks.clients = append(a.locks.clients, c)
		nodes = append(nodes, c)
	}
	if len(nodes) == 0 { // embedded mode: the in-process Redis
		nodes = []redis.UniversalClient{a.rdb}
	}
	a.locks.redlock = lease.New(nodes, 0, a.log)
	return nil
}

func (p *lockPart) close() {
	for _, c := range p.clients {
		_ = c.Close()
	}
}

// segmentLeases hands segment activations their leases. A lease whose
// renewal failed (Redis away, failed over, restarted) is remembered with
// its value and not released: Redis may still hold it for this process,
// and the segment's next activation here takes it back at once
// (Redlock.Resume) instead of waiting up to SEGMENT_LEASE_TTL for it to
// lapse. Fencing tokens keep an overlap harmless either way.
type segmentLeases struct {
	redlock *lease.Redlock
	ttl     time.Duration

	mu   sync.Mutex
	lost map[string]string // lease name -> value of a lease whose renewal failed
}

var _ actors.Leases = (*segmentLeases)(nil)

func newSegmentLeases(redlock *lease.Redlock, ttl time.Duration) *segmentLeases {
	return &segmentLeases{redlock: redlock, ttl: ttl, lost: map[string]string{}}
}

func (s *segmentLeases) Acquire(ctx context.Context, name string) (actors.Lease, error) {
	s.mu.Lock()
	value, ok := s.lost[name]
	delete(s.lost, name)
	s.mu.Unlock()
	if ok {
		if l, err := s.redlock.Resume(ctx, name, s.ttl, value); err == nil {
			return &segmentLease{Lease: l, leases: s, name: name}, nil
		}
	}
	l, err := s.redlock.Acquire(ctx, name, s.ttl)
	if err != nil {
		return nil, err
	}
	return &segmentLease{Lease: l, leases: s, name: name}, nil
}

// segmentLease is one segment's lease, which remembers itself in its
// segmentLeases when a renewal fails.
type segmentLease struct {
	*lease.Lease
	leases *segmentLeases
	name   string
	lost   atomic.Bool
}

func (l *segmentLease) Extend(ctx context.Context) error {
	err := l.Lease.Extend(ctx)
	if err != nil && !errors.Is(err, lease.ErrLost) && l.Value() != "" {
		// Not refused by another holder: unreachable. Keep it for the
		// next activation, and do not release it.
		l.lost.Store(true)
		l.leases.mu.Lock()
		l.leases.lost[l.name] = l.Value()
		l.leases.mu.Unlock()
	}
	return err
}

func (l *segmentLease) Release(ctx context.Context) {
	if !l.lost.Load() {
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
