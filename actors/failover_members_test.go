//go:build !race

package actors_test

// A member killed mid-sale, in one process without the race detector (see
// cluster_members_test.go for why).

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/internal/lease"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// deadRedis fails every command of a client once its member is killed:
// a dead process reaches Redis no more.
type deadRedis struct{ dead atomic.Bool }

var errKilled = errors.New("member killed")

func (d *deadRedis) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if d.dead.Load() {
			return nil, errKilled
		}
		return next(ctx, network, addr)
	}
}

func (d *deadRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d.dead.Load() {
			cmd.SetErr(errKilled)
			return errKilled
		}
		return next(ctx, cmd)
	}
}

func (d *deadRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if d.dead.Load() {
			for _, c := range cmds {
				c.SetErr(errKilled)
			}
			return errKilled
		}
		return next(ctx, cmds)
	}
}

// mortal is a cluster member that a test can kill.
type mortal struct {
	r    *actors.Router
	cut  *actors.Cut
	dead *deadRedis
	log  lockedBuffer // what it logs at INFO and above
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// protoactorRepeats counts the member's protoactor warning and error
// lines by message and the member they are about, for those logged more
// than once.
func (m *mortal) protoactorRepeats() map[string]int {
	seen := map[string]int{}
	for _, line := range strings.Split(m.log.String(), "\n") {
		if !strings.Contains(line, "component=protoactor") || !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		key := ""
		for _, f := range []string{"level", "msg", "address", "MemberId", "autoManMemberUrl"} {
			key += attrOf(line, f) + " "
		}
		seen[key]++
	}
	maps.DeleteFunc(seen, func(_ string, n int) bool { return n < 2 })
	return seen
}

// attrOf is the value of a text handler's key=value (quoted or not).
func attrOf(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if s, err := strconv.QuotedPrefix(v); err == nil {
			return s
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}

// kill cuts the member off from the other members and from Redis, as
// kill -9 would; the cluster provider notices later (Unregister).
func (m *mortal) kill() {
	m.dead.dead.Store(true)
	m.cut.Kill(m.r)
}

// mortalMember starts a member whose stock and lock Redis clients and
// remoting connections die with it; its segment leases (ttl) are taken
// on lockNode.
func (e *env) mortalMember(tb testing.TB, agent *test.InMemAgent, name string, lockNode *testenv.RedisServer, ttl time.Duration, opts actors.Options) *mortal {
	tb.Helper()
	m := &mortal{cut: &actors.Cut{}, dead: &deadRedis{}}
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	rdb.AddHook(m.dead)
	lc := redis.NewClient(&redis.Options{Addr: lockNode.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	lc.AddHook(m.dead)
	opts.Leases = leases{rl: lease.New([]redis.UniversalClient{lc}, ttl, quiet), ttl: ttl}
	log := slog.New(slog.NewTextHandler(&m.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := actors.NewClusteredRouter(persistence.NewGrabs(rdb), testenv.MustOrderIDs(tb, e.db), e.catalog, log, opts,
		actors.WithCut(actors.ClusterOptions{Name: name, Provider: test.NewTestProvider(agent), Host: "127.0.0.1"}, m.cut))
	if err != nil {
		tb.Fatal(err)
	}
	m.r = r
	tb.Cleanup(func() { r.Close(); _ = rdb.Close(); _ = lc.Close() })
	return m
}

// attempt is one grab's answer and how long it took.
type attempt struct {
	user    int64
	seg     int
	at      time.Duration // since the kill (negative: before)
	took    time.Duration
	code    domain.SeckillCode
	orderID int64
}

// Three members sell a voucher of four segments; the member hosting
// segment 0 is killed (no graceful leave: its connections break, its
// Redis calls stop, its leases lapse) and the cluster provider drops it
// a second later, as automanaged's health checks would. Grabs keep
// entering at the two others all along, each user retrying UNAVAILABLE
// with its request id until it gets a decided answer.
//
// Every answer must come within GRAB_TIMEOUT (and a margin for a loaded
// machine's scheduling only): UNAVAILABLE is a fine answer, a late one
// is not. The sale stays exact: OK answers at most the stock, one order
// per user and request id, each in the database, nothing else there; the
// dead member's segments are served again by the others; and protoactor's
// failures about the dead member are logged once each by the survivors.
func TestMembersKilledHostAnswersEveryGrabWithinGrabTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		stock, segs = 5000, 4
		grabTimeout = actors.GrabTimeoutDefault
		leaseTTL    = 3 * time.Second // SEGMENT_LEASE_TTL's default
		// detection is how long the provider takes to drop the dead
		// member: automanaged checks every member each second.
		detection = time.Second
		slack     = 500 * time.Millisecond
	)
	id := testenv.MustVoucher(t, e.db, e.rdb, testenv.VoucherSpec{Stock: stock, Segments: segs}).ID
	agent, name := test.NewInMemAgent(), clusterName()
	lockNode := testenv.MustRedis(t)
	// Production deadlines (CallTimeout and BatchTimeout a little longer
	// for a loaded machine: a late call only answers UNAVAILABLE), and
	// LeaseWait as the service derives it from the lease and GRAB_TIMEOUT.
	opts := actors.Options{GrabTimeout: grabTimeout, CallTimeout: 300 * time.Millisecond, BatchTimeout: 600 * time.Millisecond,
		LeaseWait: min(leaseTTL+time.Second, max(grabTimeout-time.Second, grabTimeout/2))}
	var ms []*mortal
	for range 3 {
		ms = append(ms, e.mortalMember(t, agent, name, lockNode, leaseTTL, opts))
	}
	waitMembers(t, 3, ms[0].r, ms[1].r, ms[2].r)
	w := e.writer(t)

	var addrs []string
	for _, m := range ms {
		addrs = append(addrs, m.r.Cluster().Address())
	}
	victimAddr := actors.Owner(addrs, id, 0)
	victim := ms[slices.Index(addrs, victimAddr)]
	var survivors []*actors.Router
	victimSegs := map[int]bool{}
	for seg := range segs {
		victimSegs[seg] = actors.Owner(addrs, id, seg) == victimAddr
	}
	for _, m := range ms {
		if m != victim {
			survivors = append(survivors, m.r)
		}
	}

	var (
		mu       sync.Mutex
		attempts []attempt
		final    = map[int64]attempt{} // user -> decided answer
		killedAt atomic.Pointer[time.Time]
	)
	since := func(t time.Time) time.Duration {
		if k := killedAt.Load(); k != nil {
			return t.Sub(*k)
		}
		return -time.Hour
	}
	// Each user grabs once, with the key "k", at the survivors in turn
	// until the answer is decided.
	grab := func(u int64) {
		seg := actors.SegmentOf(u, segs)
		giveUp := time.Now().Add(30 * time.Second)
		for try := 0; ; try++ {
			start := time.Now()
			res := survivors[(int(u)+try)%2].Grab(context.Background(), domain.GrabRequest{VoucherID: id, UserID: u, RequestID: "k"})
			a := attempt{user: u, seg: seg, at: since(start), took: time.Since(start), code: res.Code, orderID: res.OrderID}
			mu.Lock()
			attempts = append(attempts, a)
			mu.Unlock()
			if res.Code != domain.SeckillUnavailable || time.Now().After(giveUp) {
				mu.Lock()
				final[u] = a
				mu.Unlock()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Every segment learns its count and activates before the kill.
	for u := int64(1); u <= 40; u++ {
		grab(u)
	}

	var next atomic.Int64
	next.Store(41)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				grab(next.Add(1) - 1)
			}
		})
	}
	time.Sleep(time.Second)
	now := time.Now()
	killedAt.Store(&now)
	victim.kill()
	time.Sleep(detection)
	actors.Unregister(victim.r)
	time.Sleep(leaseTTL + grabTimeout + 2*time.Second - detection)
	close(stop)
	wg.Wait()
	drained(t, w)

	// The bound: every answer within GRAB_TIMEOUT.
	var late []attempt
	var worst attempt
	for _, a := range attempts {
		if a.took > worst.took {
			worst = a
		}
		if a.took > grabTimeout+slack {
			late = append(late, a)
		}
	}
	t.Logf("%d attempts by %d users; slowest %v (segment %d, %v after the kill, %s)", len(attempts), len(final), worst.took.Round(time.Millisecond), worst.seg, worst.at.Round(time.Millisecond), worst.code)
	logFailover(t, attempts, victimSegs)
	for _, a := range late {
		t.Errorf("user %d (segment %d, dead member's: %v) sent %v after the kill waited %v for %s, past GRAB_TIMEOUT (%v)",
			a.user, a.seg, victimSegs[a.seg], a.at.Round(time.Millisecond), a.took.Round(time.Millisecond), a.code, grabTimeout)
	}

	// Exactness: decided answers only, OK at most stock, one order per
	// user (and so per request id), each in the database, nothing else.
	oks := map[int64]int64{} // order -> user
	for u, a := range final {
		switch a.code {
		case domain.SeckillUnavailable:
			t.Errorf("user %d got no decided answer in 30 s", u)
		case domain.SeckillOK:
			if prev, dup := oks[a.orderID]; dup {
				t.Errorf("order %d answered to users %d and %d", a.orderID, prev, u)
			}
			oks[a.orderID] = u
		}
	}
	for _, a := range attempts {
		if f := final[a.user]; a.code == domain.SeckillOK && (f.code != domain.SeckillOK || f.orderID != a.orderID) {
			t.Errorf("user %d's request id was answered OK with order %d, then %s with order %d", a.user, a.orderID, f.code, f.orderID)
		}
	}
	if len(oks) > stock {
		t.Errorf("%d OK answers, stock %d", len(oks), stock)
	}
	var rows []struct {
		ID     int64 `bun:"id"`
		UserID int64 `bun:"user_id"`
	}
	if err := e.db.NewSelect().Table("tb_voucher_order").Column("id", "user_id").Where("voucher_id = ?", id).Scan(context.Background(), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(oks) {
		t.Errorf("%d orders in the database, %d answered OK", len(rows), len(oks))
	}
	for _, r := range rows {
		if u, ok := oks[r.ID]; !ok || u != r.UserID {
			t.Errorf("database order %d (user %d) was not answered OK to that user", r.ID, r.UserID)
		}
	}
	// protoactor's repeated failures about the dead member: one line each.
	for _, m := range ms {
		if m == victim {
			continue
		}
		for line, n := range m.protoactorRepeats() {
			t.Errorf("member %s logged %d times: %s", m.r.Cluster().Address(), n, line)
		}
	}
	served := false
	for _, a := range attempts {
		served = served || a.at > 0 && victimSegs[a.seg] && a.code == domain.SeckillOK
	}
	if !served {
		t.Error("no grab of the dead member's segments sold after the kill: they were not served elsewhere")
	}
}

// logFailover logs, per half second around the kill, how the grabs of the
// dead member's segments went: answers by code and the slowest.
func logFailover(t *testing.T, attempts []attempt, victimSegs map[int]bool) {
	t.Helper()
	type slot struct {
		codes map[domain.SeckillCode]int
		worst time.Duration
	}
	slots := map[int]*slot{}
	firstOK := time.Duration(-1)
	for _, a := range attempts {
		if !victimSegs[a.seg] || a.at < -time.Second {
			continue
		}
		i := int((a.at + time.Second) / (500 * time.Millisecond))
		s := slots[i]
		if s == nil {
			s = &slot{codes: map[domain.SeckillCode]int{}}
			slots[i] = s
		}
		s.codes[a.code]++
		s.worst = max(s.worst, a.took)
		if a.at > 0 && a.code == domain.SeckillOK && (firstOK < 0 || a.at+a.took < firstOK) {
			firstOK = a.at + a.took
		}
	}
	keys := make([]int, 0, len(slots))
	for k := range slots {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		s := slots[k]
		t.Logf("dead member's segments, sent %+.1fs after the kill: %v, slowest %v", float64(k)/2-1, s.codes, s.worst.Round(time.Millisecond))
	}
	t.Logf("first OK of the dead member's segments answered %v after the kill", firstOK.Round(time.Millisecond))
}
