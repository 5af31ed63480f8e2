package persistence

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// How REDIS_URL reaches the stock Redis (REDIS_MODE), each with go-redis's
// own URL form, so that an operator can copy a URL from go-redis's docs.
const (
	// RedisSingle is one server: redis://host:port/db (redis.ParseURL).
	RedisSingle = "single"
	// RedisSentinel is a primary found through Sentinel, followed across
	// failovers: redis://sentinel:26379?master_name=NAME&addr=sentinel2:26379
	// (redis.ParseFailoverURL; the host and every addr are sentinels).
	RedisSentinel = "sentinel"
	// RedisCluster is a Redis Cluster: redis://node1:7000?addr=node2:7001
	// (redis.ParseClusterURL; any nodes, the rest is discovered).
	RedisCluster = "cluster"
)

// RedisModes lists the modes, in the order the docs give them.
var RedisModes = []string{RedisSingle, RedisSentinel, RedisCluster}

// RedisTarget is a parsed REDIS_URL in its mode: the one place that knows
// how each mode's client is built, so that every client of the stock
// Redis (request path, background loops, readiness probe) gets the same
// tuning whatever the mode.
type RedisTarget struct {
	mode     string
	single   *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
	// clients are the cluster clients made from a cluster target (see
	// ReloadSlotMaps); shared by the target's copies.
	clients *clusterClients
}

// clusterClients holds weak pointers to the cluster clients of one
// target: a closed client is forgotten once it is collected.
type clusterClients struct {
	mu  sync.Mutex
	all []weak.Pointer[redis.ClusterClient]
}

func (c *clusterClients) add(cc *redis.ClusterClient) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = slices.DeleteFunc(c.all, func(p weak.Pointer[redis.ClusterClient]) bool { return p.Value() == nil })
	c.all = append(c.all, weak.Make(cc))
}

// ReloadSlotMaps makes every cluster client of the target reload its slot
// map in the background (go-redis's ReloadState: one reload at a time per
// client), for a cluster whose primaries changed. A client reloads by
// itself when a call of its own is refused or redirected (slotMapRefresh),
// but one that made no call during a failover kept the old map and sent
// its first call after it to the old primary: a refusal, an UNAVAILABLE
// grab, 0.5-0.9 s more without a sale in the fault suite. Nothing for
// other modes.
func (t RedisTarget) ReloadSlotMaps(ctx context.Context) {
	if t.clients == nil {
		return
	}
	t.clients.mu.Lock()
	live := make([]*redis.ClusterClient, 0, len(t.clients.all))
	for _, p := range t.clients.all {
		if cc := p.Value(); cc != nil {
			live = append(live, cc)
		}
	}
	t.clients.mu.Unlock()
	for _, cc := range live {
		cc.ReloadState(ctx)
	}
}

// ParseRedisTarget parses url in mode; an empty mode is RedisSingle. Its
// errors say what is wrong without repeating the URL, which may hold a
// password.
func ParseRedisTarget(mode, url string) (RedisTarget, error) {
	mode = cmp.Or(mode, RedisSingle)
	t := RedisTarget{mode: mode}
	var err error
	switch mode {
	case RedisSingle:
		t.single, err = redis.ParseURL(url)
	case RedisSentinel:
		if t.failover, err = redis.ParseFailoverURL(url); err == nil {
			err = failoverProblem(t.failover)
		}
	case RedisCluster:
		if t.cluster, err = redis.ParseClusterURL(url); err == nil {
			err = clusterProblem(t.cluster)
		}
		t.clients = &clusterClients{}
	default:
		return t, fmt.Errorf("unknown redis mode %q: want %s", mode, strings.Join(RedisModes, ", "))
	}
	return t, err
}

// LockNodeMode is the mode a Redlock node (LOCK_REDIS_URLS) is reached
// in: the stock Redis's, redisMode, if it is that Redis (redisURL), and
// one server otherwise: Redlock wants independent nodes.
func LockNodeMode(redisMode, redisURL, node string) string {
	if node == redisURL {
		return redisMode
	}
	return RedisSingle
}

// failoverProblem refuses what would not reach the primary: grabs write,
// and go-redis's failover client panics on the routing options of its
// failover-cluster client.
func failoverProblem(o *redis.FailoverOptions) error {
	switch {
	case o.MasterName == "":
		return errors.New("master_name is required: the name the sentinels monitor the primary under")
	case o.ReplicaOnly || o.RouteByLatency || o.RouteRandomly || o.UseDisconnectedReplicas:
		return errors.New("replica_only, route_by_latency, route_randomly and use_disconnected_replicas are not supported: every call goes to the primary")
	}
	return nil
}

// clusterProblem refuses reads from replicas: a grab decides from what it
// reads, and a replica may lag its primary.
func clusterProblem(o *redis.ClusterOptions) error {
	if o.ReadOnly || o.RouteByLatency || o.RouteRandomly {
		return errors.New("read_only, route_by_latency and route_randomly are not supported: every call goes to a primary")
	}
	return nil
}

// SingleTarget is one server reached with opts (the embedded Redis, tests).
func SingleTarget(opts redis.Options) RedisTarget {
	return RedisTarget{mode: RedisSingle, single: &opts}
}

// String names the servers the target starts from, never a password:
// host:port of one server, the primary's name and the sentinels, or the
// cluster nodes given.
func (t RedisTarget) String() string {
	switch {
	case t.failover != nil:
		return "sentinel " + t.failover.MasterName + " via " + strings.Join(t.failover.SentinelAddrs, ",")
	case t.cluster != nil:
		return "cluster via " + strings.Join(t.cluster.Addrs, ",")
	case t.single != nil:
		return t.single.Addr
	}
	return ""
}

// Mode is the target's REDIS_MODE.
func (t RedisTarget) Mode() string { return t.mode }

// ClientTuning is what the service sets on a client of the stock Redis,
// over what the URL says: the same fields exist in every mode's options.
type ClientTuning struct {
	// ContextTimeout makes a call end at its context's deadline.
	ContextTimeout bool
	// Dial, Read, Write and Pool are go-redis's timeouts; 0 keeps the
	// URL's (or go-redis's default).
	Dial, Read, Write, Pool time.Duration
	// MaxRetries and DialerRetries, when not 0, replace go-redis's.
	MaxRetries, DialerRetries int
	// PoolSize and MinIdleConns, when PoolSize is not 0, size the pool.
	PoolSize, MinIdleConns int
}

// RequestTuning is the request paths' tuning: every call ends at its
// context's deadline or after timeout, whichever comes first, waits at
// most timeout for a pooled connection, and is not retried by go-redis: a
// retry after a timeout doubles what a stalled Redis costs a request
// (measured: a catalogue read took 0.95 s), and the grab path retries its
// batches itself, within its own deadline. A refused connection fails at
// once, not after dial retries: go-redis dials up to 5 times, 100 ms
// apart, by default, and against a Redis that is down each call then
// waited out its whole deadline (measured: 200 ms a grab).
func RequestTuning(timeout time.Duration) ClientTuning {
	timeout = cmp.Or(timeout, RequestTimeoutDefault)
	return ClientTuning{ContextTimeout: true, Dial: timeout, Read: timeout, Write: timeout, Pool: timeout,
		MaxRetries: -1, DialerRetries: 1}
}

// BackgroundTuning is the background loops' (order writer, event
// watcher): go-redis's own timeouts (seconds) suit their batches and
// blocking reads, and the context's deadline ends a call to a stalled
// Redis, so they retry with backoff instead of waiting on a socket.
func BackgroundTuning() ClientTuning { return ClientTuning{ContextTimeout: true} }

// tune sets t on one mode's fields, and the dialer that keeps a refused
// dial from latching the pool shut (unlatchedDialer).
func (t ClientTuning) tune(ctxTimeout *bool, dial, read, write, pool *time.Duration, retries, dialer, poolSize, minIdle *int,
	dialFn *func(context.Context, string, string) (net.Conn, error), tlsConf *tls.Config) {
	*ctxTimeout = t.ContextTimeout
	if *dialFn == nil {
		*dialFn = unlatchedDialer(tlsConf)
	}
	for _, d := range []struct {
		to  *time.Duration
		set time.Duration
	}{{dial, t.Dial}, {read, t.Read}, {write, t.Write}, {pool, t.Pool}} {
		if d.set != 0 {
			*d.to = d.set
		}
	}
	if t.MaxRetries != 0 {
		*retries = t.MaxRetries
	}
	if t.DialerRetries != 0 {
		*dialer = t.DialerRetries
	}
	if t.PoolSize != 0 {
		*poolSize, *minIdle = t.PoolSize, t.MinIdleConns
	}
}

// Options returns the single server's options tuned by tu; ok is false in
// another mode.
func (t RedisTarget) Options(tu ClientTuning) (_ *redis.Options, ok bool) {
	if t.single == nil {
		return nil, false
	}
	o := *t.single
	tu.tune(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
		&o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.MinIdleConns, &o.Dialer, o.TLSConfig)
	return &o, true
}

// Client returns a new client of the target tuned by tu: a plain client,
// go-redis's failover client (which asks the sentinels for the primary
// and follows it across failovers), or its cluster client.
func (t RedisTarget) Client(tu ClientTuning) redis.UniversalClient {
	switch {
	case t.failover != nil:
		o := *t.failover
		tu.tune(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
			&o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.MinIdleConns, &o.Dialer, o.TLSConfig)
		return redis.NewFailoverClient(&o)
	case t.cluster != nil:
		o := *t.cluster
		tu.tune(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
			&o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.MinIdleConns, &o.Dialer, o.TLSConfig)
		if tu.MaxRetries < 0 {
			// The cluster client sends a call again, to the same node or
			// another, after a timeout or a redirect, up to MaxRedirects
			// times whatever MaxRetries says: without retries, one
			// attempt, so that a redirect or a refusal by the cluster
			// proves the call did not run (see notSent).
			o.MaxRedirects = -1
		}
		cc := redis.NewClusterClient(&o)
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(slotMapRefresh{cc}) })
		if t.clients != nil {
			t.clients.add(cc)
		}
		return cc
	default:
		o, _ := t.Options(tu)
		return redis.NewClient(o)
	}
}

// AddHooks adds hooks to a client of the stock Redis so that they see
// every call it makes. A cluster client's own hooks do not see the calls
// made through the primary of a key (ClusterClient.MasterForKey, see
// ackNode), so on a cluster they go on each node's client instead, which
// every call of the cluster client goes through too.
func AddHooks(rdb redis.UniversalClient, hooks ...redis.Hook) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		for _, h := range hooks {
			rdb.AddHook(h)
		}
		return
	}
	cc.OnNewNode(func(node *redis.Client) {
		for _, h := range hooks {
			node.AddHook(h)
		}
	})
}

// NodeHooker gives a cluster node's client a hook of its own
// (breaker.Breaker.NodeHook: one circuit per node).
type NodeHooker interface {
	redis.Hook
	NodeHook(node *redis.Client) redis.Hook
}

// AddBreakerHooks adds the breaker and then the other hooks to a client of
// the stock Redis, as AddHooks does; on a cluster each node's client gets
// the breaker's circuit for that node, so that a shard that fails over
// opens only its own.
func AddBreakerHooks(rdb redis.UniversalClient, b NodeHooker, others ...redis.Hook) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		AddHooks(rdb, append([]redis.Hook{b}, others...)...)
		return
	}
	cc.OnNewNode(func(node *redis.Client) {
		node.AddHook(b.NodeHook(node))
		for _, h := range others {
			node.AddHook(h)
		}
	})
}

// Masters lists the addresses of a cluster's nodes that serve slots as
// primaries now (CLUSTER SHARDS, as any node sees it); nil for another
// client.
func Masters(rdb redis.UniversalClient) func(ctx context.Context) ([]string, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	return func(ctx context.Context) ([]string, error) {
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("read the cluster's slots: %w", err)
		}
		var out []string
		for _, s := range slots {
			if len(s.Nodes) > 0 && !slices.Contains(out, s.Nodes[0].Addr) {
				out = append(out, s.Nodes[0].Addr)
			}
		}
		return out, nil
	}
}

// slotMapRefresh reloads a cluster client's slot map as soon as one of its
// nodes says that the map is out of date: a redirect (MOVED, ASK), a
// cluster that cannot serve the slot now (CLUSTERDOWN, TRYAGAIN, during a
// failover or a migration), or a refused connection (a primary that
// died). go-redis itself reloads on a redirect only where it follows it,
// not on the calls made through a key's primary (ackNode), and otherwise
// every 60 s: a failed-over shard then went 58 s without a sale.
// ReloadState runs one reload at a time in the background, so a burst of
// failures costs one CLUSTER SLOTS, not one each.
type slotMapRefresh struct{ cc *redis.ClusterClient }

// DialHook implements redis.Hook.
func (h slotMapRefresh) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			h.cc.ReloadState(ctx)
		}
		return conn, err
	}
}

// ProcessHook implements redis.Hook.
func (h slotMapRefresh) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if staleSlotMap(err) {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h slotMapRefresh) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		stale := staleSlotMap(err)
		for _, c := range cmds {
			stale = stale || staleSlotMap(c.Err())
		}
		if stale {
			h.cc.ReloadState(ctx)
		}
		return err
	}
}

// staleSlotMap reports an error that says the slot map may be out of
// date: a refusal by the cluster (clusterRefusal), a refused connection
// (go-redis's pool answers one from memory for a while after a dial
// failed, without dialling, so the dial hook alone misses it), or a call
// the node's open circuit breaker refused (breaker.NodeHook: the node may
// have failed over).
func staleSlotMap(err error) bool {
	var down interface{ ClusterNodeDown() bool }
	return err != nil && (clusterRefusal(err) || errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &down) && down.ClusterNodeDown())
}

// unlatchedDialer dials like go-redis's own dialer (TCP keep-alive, TLS
// when the URL asks for it), except that a failed dial returns, instead
// of its error, a connection that fails every read and write with that
// error: the caller's call fails with it just the same (a refused dial
// still proves the call was not sent, see notSent), but go-redis's pool
// never counts it. That pool stops dialing after PoolSize failed dials in
// a row and answers every later call with the last dial error, trying
// to dial again only once a second (reported upstream, still open): a node
// whose clients had failed that often during a failover or a restart
// went on refusing grabs, writing no orders and ending no hold for up to
// a second after Redis served again (measured in the fault suite's
// redis-failover rounds: "dial tcp <old primary>: connection refused"
// 0.5 s after every sentinel named the new one).
func unlatchedDialer(tlsConf *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		var err error
		if tlsConf != nil {
			c, err = (&tls.Dialer{NetDialer: d, Config: tlsConf}).DialContext(ctx, network, addr)
		} else {
			c, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return failedConn{err: err, addr: addr}, nil
		}
		return c, nil
	}
}

// failedConn is a dial that failed with err (unlatchedDialer): every read
// and write returns err, and nothing is ever sent.
type failedConn struct {
	err  error
	addr string
}

func (c failedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c failedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c failedConn) Close() error                     { return nil }
func (c failedConn) LocalAddr() net.Addr              { return failedAddr("") }
func (c failedConn) RemoteAddr() net.Addr             { return failedAddr(c.addr) }
func (c failedConn) SetDeadline(time.Time) error      { return nil }
func (c failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c failedConn) SetWriteDeadline(time.Time) error { return nil }

// failedAddr is a failedConn's address: the one it was dialed at.
type failedAddr string

func (a failedAddr) Network() string { return "tcp" }
func (a failedAddr) String() string  { return string(a) }
