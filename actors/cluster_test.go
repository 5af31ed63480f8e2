package actors_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/internal/lease"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// leases adapts lease.Redlock to the router's Leases.
type leases struct {
	rl  *lease.Redlock
	ttl time.Duration
}

func (l leases) Acquire(ctx context.Context, name string) (actors.Lease, error) {
	return l.rl.Acquire(ctx, name, l.ttl)
}

func newLeases(ttl time.Duration, nodes ...*testenv.RedisServer) leases {
	var cs []redis.UniversalClient
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: 200 * time.Millisecond,
			ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
		cs = append(cs, c)
	}
	return leases{rl: lease.New(cs, persistence.LeaseKey, ttl, quiet), ttl: ttl}
}

// Redlock over three lock nodes: with one stopped, a quorum of two still
// grants segment leases and the sale goes on; with two stopped, no lease
// is granted (and a held one cannot be extended), and grabs answer
// UNAVAILABLE rather than sell without an owner.
func TestSegmentLeasesNeedAQuorumOfLockNodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nodes := []*testenv.RedisServer{testenv.MustRedis(t), testenv.MustRedis(t), testenv.MustRedis(t)}
	lk := newLeases(600*time.Millisecond, nodes...)
	r := e.router(t, nil, actors.Options{Leases: lk, LeaseWait: 400 * time.Millisecond})
	held := e.live(t, 100, 1)
	if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: held, UserID: 1}).Code; c != domain.SeckillOK {
		t.Fatalf("all lock nodes up: %s", c)
	}

	nodes[0].Kill()
	fresh := e.live(t, 100, 1) // a new activation must take its lease now
	for u := int64(1); u <= 5; u++ {
		if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: fresh, UserID: u}).Code; c != domain.SeckillOK {
			t.Fatalf("one lock node down, user %d: %s, want OK (2 of 3 is a quorum)", u, c)
		}
	}
	time.Sleep(time.Second) // the held lease is extended by a quorum meanwhile
	if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: held, UserID: 2}).Code; c != domain.SeckillOK {
		t.Fatalf("one lock node down, held segment: %s, want OK", c)
	}

	nodes[1].Kill()
	third := e.live(t, 100, 1)
	if c := r.Grab(t.Context(), domain.GrabRequest{VoucherID: third, UserID: 1}).Code; c != domain.SeckillUnavailable {
		t.Errorf("two lock nodes down, new segment: %s, want UNAVAILABLE", c)
	}
	deadline := time.Now().Add(3 * time.Second) // the held lease fails its next extension
	var c domain.SeckillCode
	for u := int64(100); time.Now().Before(deadline); u++ {
		if c = r.Grab(t.Context(), domain.GrabRequest{VoucherID: held, UserID: u}).Code; c == domain.SeckillUnavailable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c != domain.SeckillUnavailable {
		t.Errorf("two lock nodes down, held segment still answers %s after 3 s, want UNAVAILABLE", c)
	}
	if left, _ := e.rdb.Get(t.Context(), fmt.Sprintf("{v%d}:stock", third)).Int(); left != 100 {
		t.Errorf("a segment without a lease sold %d units", 100-left)
	}
}

// Rendezvous placement spreads segments fairly over members whose
// addresses differ only in the last digit (protoactor's own FNV-32
// placement gave 50/25/25 there), and a member that joins takes only its
// share from the others.
func TestPlacementIsFair(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 4, 5} {
		var members []string
		for i := range n {
			members = append(members, fmt.Sprintf("127.0.0.1:809%d", i))
		}
		for _, m := range members {
			share := actors.Share(members, m, 4096)
			if want := 1 / float64(n); share < want*0.85 || share > want*1.15 {
				t.Errorf("%d members: %s hosts %.3f of the segments, want %.3f ± 15%%", n, m, share, want)
			}
		}
	}
	three := []string{"127.0.0.1:8090", "127.0.0.1:8091", "127.0.0.1:8092"}
	four := append(three[:3:3], "127.0.0.1:8093")
	moved := 0
	for v := int64(1); v <= 1024; v++ {
		before, after := actors.Owner(three, v, 0), actors.Owner(four, v, 0)
		if before != after {
			moved++
			if after != four[3] {
				t.Fatalf("segment %d/0 moved from %s to %s, not to the new member", v, before, after)
			}
		}
	}
	if moved < 1024/4*8/10 || moved > 1024/4*12/10 {
		t.Errorf("%d of 1024 segments moved to the 4th member, want about a quarter", moved)
	}
}

// protoactor's retry noise, and its lines about a member it cannot reach
// (the membership's WARN says that once), go to DEBUG; its warnings stay.
func TestProtoactorRetryNoiseIsDebug(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := actors.ProtoactorLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	log.Error("cluster.RequestFuture failed", "err", "timeout")
	log.Info("Started partition manager")
	log.Error("EndpointWriter lost connection", "address", "10.0.0.3:8090")
	log.Error("EndpointWriter failed to create receive stream", "address", "10.0.0.3:8090")
	log.Error("EndpointWriter failed to connect", "address", "10.0.0.3:8090", "retry", 0)
	log.Warn("sendGossipForMember failed", "MemberId", "x")
	log.Error("Bad connection to the node health status", "autoManMemberUrl", "http://10.0.0.3:6330/_health")
	log.Warn("something real")
	out := buf.String()
	if strings.Contains(out, "RequestFuture") || strings.Contains(out, "partition manager") || strings.Contains(out, "EndpointWriter") ||
		strings.Contains(out, "Gossip") || strings.Contains(out, "health") {
		t.Errorf("noise logged at info level:\n%s", out)
	}
	if !strings.Contains(out, "something real") || !strings.Contains(out, "component=protoactor") {
		t.Errorf("warning lost or unlabelled:\n%s", out)
	}
}

// A member that died makes protoactor repeat the same failure about it
// without end (automanaged's health check of its seed every second, five
// connection attempts per message sent to it): each is logged once per
// event, by message and member, and the next line of it after a quiet
// minute is a new event that says how many were held back.
func TestProtoactorRepeatsAreLoggedOncePerEvent(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	log := actors.ProtoactorLoggerAt(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), func() time.Time { return now })
	health := "Failed to get cluster member health"
	for range 30 { // a failure about one member, every second
		log.Error(health, "error", "connection refused", "autoManMemberUrl", "http://10.0.0.3:6330/_health")
		log.Error("Failed to forward to member", "address", "10.0.0.3:8090", "retry", 1)
		log.With("address", "10.0.0.4:8090").Warn("Failed to deliver to member")
		now = now.Add(time.Second)
	}
	log.Error(health, "error", "connection refused", "autoManMemberUrl", "http://10.0.0.4:6330/_health") // another member
	log.Warn("something else")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines for 5 events, want 5:\n%s", len(lines), buf.String())
	}
	for _, l := range lines {
		if strings.Contains(l, "suppressed=") {
			t.Errorf("first line of an event carries a count: %s", l)
		}
	}

	now = now.Add(time.Minute) // quiet for a minute: the dead seed's line is news again
	buf.Reset()
	log.Error(health, "error", "connection refused", "autoManMemberUrl", "http://10.0.0.3:6330/_health")
	if out := buf.String(); !strings.Contains(out, health) || !strings.Contains(out, "suppressed=29") {
		t.Errorf("after a quiet minute: %q, want the line with suppressed=29", out)
	}
}
