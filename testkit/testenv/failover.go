package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated Redis deployments that fail over for real: a Sentinel set
// (one primary, replicas, three sentinels voting) and a Redis Cluster
// whose primaries each have a replica. Their primaries are killed with
// SIGKILL, as a crashed machine goes, and the helpers wait for what
// production waits for: the sentinels' or the cluster's own promotion of
// a replica. Nothing here fails over by command (SENTINEL FAILOVER,
// CLUSTER FAILOVER): those wait for the replica to catch up, a crash does
// not.

// FailoverTimeout bounds the waits for a promotion: a second or two to
// notice the primary is gone, an election, and room for busy cores.
const FailoverTimeout = 30 * time.Second

// SentinelSet is a primary, its replicas and the sentinels that watch
// them under Name, each a private redis-server on a random port. Which
// data node is primary changes with each failover: ask Primary.
type SentinelSet struct {
	Name string
	// Data are the data nodes; the first was started as the primary.
	Data      []*RedisServer
	Sentinels []*RedisServer
	dir       string
}

// MustSentinelSet starts a Sentinel set of one primary, two replicas and
// three sentinels (a quorum of two), as production runs it, and stops it
// when the test ends.
func MustSentinelSet(tb testing.TB) *SentinelSet {
	tb.Helper()
	s, err := StartSentinelSet(tb.TempDir(), "flashsale", 2, 3)
	if err != nil {
		tb.Fatal(err)
	}
	for _, srv := range s.servers() {
		srv.tb = tb
	}
	tb.Cleanup(s.Close)
	return s
}

// StartSentinelSet starts, with their files under dir, a primary with
// replicas replicas and sentinels sentinels that monitor it under name
// with a majority quorum, and waits until every sentinel knows every
// replica and every other sentinel. The caller closes it.
func StartSentinelSet(dir, name string, replicas, sentinels int) (_ *SentinelSet, err error) {
	if _, err := exec.LookPath(RedisServerBin()); err != nil {
		return nil, fmt.Errorf("redis-server not on PATH (scripts/test-services.sh installs it): %w", err)
	}
	s := &SentinelSet{Name: name, dir: dir}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), FailoverTimeout)
	defer cancel()
	primary, err := startRedisWith(mkdir(dir, "data0"), "", "--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, err
	}
	s.Data = append(s.Data, primary)
	for i := 1; i <= replicas; i++ {
		r, err := startRedisWith(mkdir(dir, "data"+strconv.Itoa(i)), "", "--repl-diskless-sync-delay", "0",
			"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
		if err != nil {
			return nil, err
		}
		s.Data = append(s.Data, r)
	}
	for _, r := range s.Data[1:] {
		if err := waitLinked(ctx, r); err != nil {
			return nil, err
		}
	}
	// Down after 1.5 s: quick failovers, and not so quick that a starved
	// core makes the sentinels see a live primary as down.
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s 1500\n"+
		"sentinel failover-timeout %[1]s 10000\n", name, primary.Port, sentinels/2+1)
	for i := range sentinels {
		sn, err := startRedisWith(mkdir(dir, "sentinel"+strconv.Itoa(i)), conf, "--sentinel")
		if err != nil {
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
		err := poll(ctx, func() (bool, error) {
			got, err := c.Replicas(ctx, name).Result()
			if err != nil || len(got) < replicas {
				return false, fmt.Errorf("sentinel %s knows %d of %d replicas: %v", sn.Addr(), len(got), replicas, err)
			}
			peers, err := c.Sentinels(ctx, name).Result()
			if err != nil || len(peers) < sentinels-1 {
				return false, fmt.Errorf("sentinel %s knows %d of %d other sentinels: %v", sn.Addr(), len(peers), sentinels-1, err)
			}
			return true, nil
		})
		_ = c.Close()
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// URL is go-redis's failover URL of the set (REDIS_MODE=sentinel).
func (s *SentinelSet) URL() string { return SentinelURL(s.Name, s.Sentinels...) }

// FailoverClient is a client that follows the set's primary through its
// sentinels; the caller closes it.
func (s *SentinelSet) FailoverClient() *redis.Client {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: addrs,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

// Primary is the data node every sentinel names as the primary; an error
// while they disagree or name none of the set.
func (s *SentinelSet) Primary(ctx context.Context) (*RedisServer, error) {
	var named string
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
		addr, err := c.GetMasterAddrByName(ctx, s.Name).Result()
		_ = c.Close()
		if err != nil || len(addr) != 2 {
			return nil, fmt.Errorf("sentinel %s names no primary: %v", sn.Addr(), err)
		}
		got := addr[0] + ":" + addr[1]
		if named != "" && got != named {
			return nil, fmt.Errorf("sentinels disagree on the primary: %s and %s", named, got)
		}
		named = got
	}
	for _, d := range s.Data {
		if d.Addr() == named {
			return d, nil
		}
	}
	return nil, fmt.Errorf("sentinels name %s, not a node of the set", named)
}

// KillPrimary kills the primary with SIGKILL and returns it; its data is
// gone (the data nodes keep no files), as with a crashed machine.
func (s *SentinelSet) KillPrimary(ctx context.Context) (*RedisServer, error) {
	p, err := s.Primary(ctx)
	if err != nil {
		return nil, err
	}
	p.Kill()
	return p, nil
}

// WaitPromoted waits until every sentinel names a primary other than old
// and that node says it is one, and returns it.
func (s *SentinelSet) WaitPromoted(ctx context.Context, old *RedisServer) (*RedisServer, error) {
	ctx, cancel := context.WithTimeout(ctx, FailoverTimeout)
	defer cancel()
	var promoted *RedisServer
	err := poll(ctx, func() (bool, error) {
		p, err := s.Primary(ctx)
		if err != nil {
			return false, err
		}
		if p == old {
			return false, fmt.Errorf("sentinels still name the killed primary %s", old.Addr())
		}
		if role, err := infoField(ctx, p, "replication", "role"); role != "master" {
			return false, fmt.Errorf("%s is named primary, says role %q: %v", p.Addr(), role, err)
		}
		promoted = p
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no replica promoted after %s was killed: %w", old.Addr(), err)
	}
	return promoted, nil
}

// Rejoin starts a killed data node again, empty, as a replica of the
// current primary, and waits until it has synced: the crashed machine
// back in the set. Started as a primary instead, it would be one until
// the sentinels notice, with no data.
func (s *SentinelSet) Rejoin(ctx context.Context, old *RedisServer) error {
	p, err := s.Primary(ctx)
	if err != nil {
		return err
	}
	old.mu.Lock()
	old.extra = []string{"--repl-diskless-sync-delay", "0", "--replicaof", "127.0.0.1", strconv.Itoa(p.Port)}
	old.mu.Unlock()
	if err := old.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, FailoverTimeout)
	defer cancel()
	return waitLinked(ctx, old)
}

// Close kills every process of the set.
func (s *SentinelSet) Close() {
	for _, srv := range s.servers() {
		srv.Kill()
	}
}

func (s *SentinelSet) servers() []*RedisServer { return slices.Concat(s.Sentinels, s.Data) }

// RedisCluster is a Redis Cluster whose nodes are private redis-servers on
// random ports. Which node is a primary changes with each failover: ask
// Primaries or PrimaryOf.
type RedisCluster struct {
	Nodes []*RedisServer
	// replicas is how many replicas each primary has.
	replicas int

	mu sync.Mutex
	// replicasOf holds, for each primary killed, the addresses of its
	// replicas at the kill: the candidates for its slots.
	replicasOf map[string][]string
}

// MustReplicatedCluster starts a Redis Cluster of three primaries with a
// replica each and stops it when the test ends.
func MustReplicatedCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	return MustReplicatedClusterOf(tb, 1)
}

// MustReplicatedClusterOf is MustReplicatedCluster with replicas replicas
// a shard.
func MustReplicatedClusterOf(tb testing.TB, replicas int) *RedisCluster {
	tb.Helper()
	c, err := StartRedisCluster(tb.TempDir(), 3, replicas)
	if err != nil {
		tb.Fatal(err)
	}
	for _, n := range c.Nodes {
		n.tb = tb
	}
	tb.Cleanup(c.Close)
	return c
}

// StartRedisCluster starts, with their files under dir, a Redis Cluster
// of primaries primaries with replicas replicas each (redis-cli --cluster
// create), and waits until every node says the cluster is ok and every
// replica has synced. The caller closes it.
func StartRedisCluster(dir string, primaries, replicas int) (_ *RedisCluster, err error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("redis-cli not on PATH (scripts/test-services.sh installs it): %w", err)
	}
	c := &RedisCluster{replicas: replicas}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	n := primaries * (1 + replicas)
	addrs := make([]string, n)
	for i := range n {
		bus, err := freePort() // port+10000 may be above 65535
		if err != nil {
			return nil, fmt.Errorf("cluster bus port: %w", err)
		}
		// A node timeout of 2 s: a killed primary's replica takes over in
		// a few seconds. nodes.conf stays in the node's dir, so that a
		// killed node started again rejoins as what the cluster made it.
		// cluster-require-full-coverage no, as OPERATIONS.md advises: the
		// other shards serve while one has no primary (with yes, every
		// shard answers CLUSTERDOWN until the replica is promoted).
		node, err := startRedisWith(mkdir(dir, "node"+strconv.Itoa(i)), "", "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(bus),
			"--cluster-require-full-coverage", "no", "--repl-diskless-sync-delay", "0")
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, node)
		addrs[i] = node.Addr()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), FailoverTimeout)
	defer cancel()
	for _, node := range c.Nodes {
		if err := c.waitHealthy(ctx, node, n); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// waitHealthy waits until node says the cluster is ok with want nodes
// known and, if it is a replica, that it has synced.
func (c *RedisCluster) waitHealthy(ctx context.Context, node *RedisServer, want int) error {
	cl := node.newClient()
	defer cl.Close()
	if err := poll(ctx, func() (bool, error) {
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(want)+"\r\n") {
			return false, fmt.Errorf("cluster node %s not ok: %v\n%s", node.Addr(), err, info)
		}
		return true, nil
	}); err != nil {
		return err
	}
	// Every node must see each primary's replicas: KillPrimaryOf finds
	// the candidates for a primary's slots in a node's view.
	if err := poll(ctx, func() (bool, error) {
		out, err := cl.ClusterNodes(ctx).Result()
		if err != nil {
			return false, err
		}
		nodes := parseClusterNodes(out)
		for _, p := range nodes {
			if !p.primary || p.failed || len(p.slots) == 0 {
				continue
			}
			n := 0
			for _, r := range nodes {
				if r.primaryID == p.id && !r.failed {
					n++
				}
			}
			if n < c.replicas {
				return false, fmt.Errorf("node %s sees %d replicas of %s, want %d", node.Addr(), n, p.addr, c.replicas)
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	if role, err := infoField(ctx, node, "replication", "role"); err != nil || role == "master" {
		return err
	}
	return waitLinked(ctx, node)
}

// parseClusterNodes reads CLUSTER NODES.
func parseClusterNodes(out string) []clusterNode {
	var nodes []clusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		nodes = append(nodes, clusterNode{id: f[0], addr: addr, primaryID: f[3], flags: f[2],
			primary: strings.Contains(f[2], "master"), failed: strings.Contains(f[2], "fail"), slots: f[8:]})
	}
	return nodes
}

// URL is go-redis's cluster URL of the nodes (REDIS_MODE=cluster).
func (c *RedisCluster) URL() string { return ClusterURL(c.Nodes...) }

// Client is a cluster client of the nodes; the caller closes it.
func (c *RedisCluster) Client() *redis.ClusterClient {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

// clusterNode is a line of CLUSTER NODES.
type clusterNode struct {
	id, addr, primaryID, flags string
	primary, failed            bool
	slots                      []string // "0-5460", "5461"
}

// view is the cluster as a running node sees it.
func (c *RedisCluster) view(ctx context.Context) ([]clusterNode, error) {
	var errs []error
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		cl := n.newClient()
		out, err := cl.ClusterNodes(ctx).Result()
		_ = cl.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		nodes := parseClusterNodes(out)
		return nodes, nil
	}
	return nil, fmt.Errorf("no cluster node answers: %w", errors.Join(errs...))
}

func (c *RedisCluster) server(addr string) *RedisServer {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Primaries are the nodes that serve slots now.
func (c *RedisCluster) Primaries(ctx context.Context) ([]*RedisServer, error) {
	nodes, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var out []*RedisServer
	for _, n := range nodes {
		if n.primary && !n.failed && len(n.slots) > 0 {
			if s := c.server(n.addr); s != nil {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// PrimaryOf is the primary that serves key's hash slot now.
func (c *RedisCluster) PrimaryOf(ctx context.Context, key string) (*RedisServer, error) {
	nodes, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var slot int64 = -1
	for _, n := range c.Nodes {
		if n.running() {
			cl := n.newClient()
			slot, err = cl.ClusterKeySlot(ctx, key).Result()
			_ = cl.Close()
			break
		}
	}
	if slot < 0 || err != nil {
		return nil, fmt.Errorf("hash slot of %q: %v", key, err)
	}
	for _, n := range nodes {
		if !n.primary || n.failed {
			continue
		}
		for _, r := range n.slots {
			lo, hi, found := strings.Cut(r, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.ParseInt(lo, 10, 64)
			b, err2 := strconv.ParseInt(hi, 10, 64)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				if s := c.server(n.addr); s != nil {
					return s, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no primary serves slot %d of %q", slot, key)
}

// KillPrimaryOf kills, with SIGKILL, the primary that serves key's slot
// and returns it; it fails, killing nothing, if that primary has no
// replica.
func (c *RedisCluster) KillPrimaryOf(ctx context.Context, key string) (*RedisServer, error) {
	p, err := c.PrimaryOf(ctx, key)
	if err != nil {
		return nil, err
	}
	replicas, err := c.replicaAddrs(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(replicas) == 0 {
		return nil, fmt.Errorf("primary %s has no replica to promote", p.Addr())
	}
	c.mu.Lock()
	if c.replicasOf == nil {
		c.replicasOf = map[string][]string{}
	}
	c.replicasOf[p.Addr()] = replicas
	c.mu.Unlock()
	p.Kill()
	return p, nil
}

// ReplicasOf are the nodes that replicate primary now.
func (c *RedisCluster) ReplicasOf(ctx context.Context, primary *RedisServer) ([]*RedisServer, error) {
	addrs, err := c.replicaAddrs(ctx, primary)
	if err != nil {
		return nil, err
	}
	var out []*RedisServer
	for _, a := range addrs {
		if s := c.server(a); s != nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// replicaAddrs are the addresses of primary's replicas, as the cluster
// sees them now.
func (c *RedisCluster) replicaAddrs(ctx context.Context, primary *RedisServer) ([]string, error) {
	nodes, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var id string
	for _, n := range nodes {
		if n.addr == primary.Addr() {
			id = n.id
		}
	}
	var replicas []string
	for _, n := range nodes {
		if id != "" && n.primaryID == id {
			replicas = append(replicas, n.addr)
		}
	}
	return replicas, nil
}

// WaitPromoted waits until a replica of the killed primary old serves its
// slots, and every running node says so and that the cluster is ok; it
// returns the promoted node.
func (c *RedisCluster) WaitPromoted(ctx context.Context, old *RedisServer) (*RedisServer, error) {
	ctx, cancel := context.WithTimeout(ctx, FailoverTimeout)
	defer cancel()
	var promoted *RedisServer
	err := poll(ctx, func() (bool, error) {
		nodes, err := c.view(ctx)
		if err != nil {
			return false, err
		}
		c.mu.Lock()
		candidates := c.replicasOf[old.Addr()]
		c.mu.Unlock()
		promoted = nil
		for _, n := range nodes {
			if n.addr == old.Addr() && len(n.slots) > 0 {
				return false, fmt.Errorf("the killed primary %s still serves its slots", old.Addr())
			}
			if n.primary && !n.failed && len(n.slots) > 0 && slices.Contains(candidates, n.addr) {
				promoted = c.server(n.addr)
			}
		}
		if promoted == nil {
			return false, fmt.Errorf("no replica of %s serves its slots yet", old.Addr())
		}
		// Every running node must say so: a client that loads its slot
		// map from one that has not heard of the promotion yet would send
		// the slots' commands to the killed node.
		for _, n := range c.Nodes {
			if !n.running() {
				continue
			}
			cl := n.newClient()
			info, err := cl.ClusterInfo(ctx).Result()
			var out string
			if err == nil {
				out, err = cl.ClusterNodes(ctx).Result()
			}
			_ = cl.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false, fmt.Errorf("node %s: cluster not ok: %v", n.Addr(), err)
			}
			for _, seen := range parseClusterNodes(out) {
				if seen.addr == old.Addr() && len(seen.slots) > 0 || seen.addr == promoted.Addr() && len(seen.slots) == 0 {
					return false, fmt.Errorf("node %s has not seen %s promoted yet", n.Addr(), promoted.Addr())
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("no replica promoted after %s was killed: %w", old.Addr(), err)
	}
	return promoted, nil
}

// Rejoin starts a killed node again: with its nodes.conf it rejoins the
// cluster, as a replica of the node promoted in its place. It waits until
// it has synced.
func (c *RedisCluster) Rejoin(ctx context.Context, old *RedisServer) error {
	if err := old.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, FailoverTimeout)
	defer cancel()
	return c.waitHealthy(ctx, old, len(c.Nodes))
}

// Close kills every node.
func (c *RedisCluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// waitLinked waits until a replica's link to its primary is up and the
// primary counts its acknowledgements (waitAcking).
func waitLinked(ctx context.Context, r *RedisServer) error {
	if err := poll(ctx, func() (bool, error) {
		status, err := infoField(ctx, r, "replication", "master_link_status")
		if status != "up" {
			return false, fmt.Errorf("replica %s not synced (link %q): %v", r.Addr(), status, err)
		}
		return true, nil
	}); err != nil {
		return err
	}
	return waitAcking(ctx, r)
}

// waitAcking waits until a replica's primary has a write acknowledged
// through it (SET, then WAIT 1). A replica whose link is up, listed online
// by its primary with an acknowledged offset, may still not acknowledge
// the stream for up to a second more (measured: 0.9 s after a Cluster
// node rejoined as the replica of its promoted one, in three runs of
// seven), and a shard with REDIS_ACK_REPLICAS=1 and no other replica
// acknowledges no grab until then. The write goes to a key of the
// primary's own slots on a cluster.
func waitAcking(ctx context.Context, r *RedisServer) error {
	host, err := infoField(ctx, r, "replication", "master_host")
	if err != nil {
		return err
	}
	port, err := infoField(ctx, r, "replication", "master_port")
	if err != nil {
		return err
	}
	primary := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(host, port)})
	defer primary.Close()
	key, err := ownKey(ctx, primary)
	if err != nil {
		return err
	}
	return poll(ctx, func() (bool, error) {
		pipe := primary.Pipeline()
		pipe.Set(ctx, key, time.Now().UnixNano(), time.Minute)
		wait := pipe.Do(ctx, "WAIT", 1, 50)
		if _, err := pipe.Exec(ctx); err != nil {
			return false, err
		}
		if n, _ := wait.Int(); n < 1 {
			return false, fmt.Errorf("replica %s acknowledges no write of its primary %s yet", r.Addr(), primary.Options().Addr)
		}
		return true, nil
	})
}

// ownKey is a key that node serves: on a cluster node, one of a slot it
// holds as a primary; on another, any.
func ownKey(ctx context.Context, node *redis.Client) (string, error) {
	const prefix = "testenv:ack:"
	out, err := node.ClusterNodes(ctx).Result()
	if err != nil {
		return prefix, nil //nolint:nilerr // not a cluster node: any key is its own
	}
	var mine []string
	for _, n := range parseClusterNodes(out) {
		if strings.Contains(n.flags, "myself") {
			mine = n.slots
		}
	}
	if len(mine) == 0 {
		return "", fmt.Errorf("cluster node %s holds no slot", node.Options().Addr)
	}
	in := func(slot int64) bool {
		for _, r := range mine {
			lo, hi, _ := strings.Cut(r, "-")
			a, err1 := strconv.ParseInt(lo, 10, 64)
			b, err2 := strconv.ParseInt(cmp.Or(hi, lo), 10, 64)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				return true
			}
		}
		return false
	}
	for i := range 1_000_000 {
		key := prefix + strconv.Itoa(i)
		slot, err := node.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			return "", err
		}
		if in(slot) {
			return key, nil
		}
	}
	return "", fmt.Errorf("cluster node %s holds no slot", node.Options().Addr)
}

// infoField reads one field of a section of a server's INFO.
func infoField(ctx context.Context, s *RedisServer, section, field string) (string, error) {
	c := s.newClient()
	defer c.Close()
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in INFO %s", field, section)
}

// poll calls cond every 50 ms until it holds or ctx ends; then the error
// is cond's last, which says what was still missing.
func poll(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// newClient is a client of the server for helpers that have no test to
// close it; the caller closes it. It does not retry: a helper polls.
func (s *RedisServer) newClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

// running reports whether the server process runs.
func (s *RedisServer) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop != nil
}

// mkdir makes dir/name and returns it; when it cannot, the server
// that was to live there fails to start and says why.
func mkdir(dir, name string) string {
	p := filepath.Join(dir, name)
	_ = os.MkdirAll(p, 0o700)
	return p
}

// MoveSlotOf moves the hash slot of key, with its keys, from the primary
// that serves it to primary to, as redis-cli --cluster reshard does:
// IMPORTING on the target, MIGRATING on the source, MIGRATE of every key
// in batches, then SETSLOT NODE on the target, the source and the other
// primaries. It returns when every primary names the target.
func (c *RedisCluster) MoveSlotOf(ctx context.Context, key string, to *RedisServer) error {
	from, err := c.PrimaryOf(ctx, key)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("the slot of %q is on %s already", key, to.Addr())
	}
	src, dst := from.newClient(), to.newClient()
	defer src.Close()
	defer dst.Close()
	slot, err := src.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("hash slot of %q: %w", key, err)
	}
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return fmt.Errorf("importing on %s: %w", to.Addr(), err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return fmt.Errorf("migrating on %s: %w", from.Addr(), err)
	}
	host, port, _ := strings.Cut(to.Addr(), ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		if err != nil {
			return fmt.Errorf("keys in slot %d: %w", slot, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("migrate %d keys of slot %d: %w", len(keys), slot, err)
		}
	}
	primaries, err := c.Primaries(ctx)
	if err != nil {
		return err
	}
	order := []*RedisServer{to, from}
	for _, p := range primaries {
		if p != to && p != from {
			order = append(order, p)
		}
	}
	for _, p := range order {
		cl := p.newClient()
		err := cl.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("setslot node on %s: %w", p.Addr(), err)
		}
	}
	return poll(ctx, func() (bool, error) {
		now, err := c.PrimaryOf(ctx, key)
		if err != nil {
			return false, err
		}
		if now != to {
			return false, fmt.Errorf("the slot of %q is still served by %s", key, now.Addr())
		}
		return true, nil
	})
}
