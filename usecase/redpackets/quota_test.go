package redpackets_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/uptrace/bun"

	"flashsale/actors/writer"
	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/redpackets"
)

// quotaRig is the red-packet service on a database and a Redis of the
// test's own; grabs go straight to the Redis script (the sequencer in
// front of it plays no part in the quota).
type quotaRig struct {
	db    *bun.DB
	rdb   *redis.Client
	rds   *persistence.RedPacketRedis
	store *persistence.RedPacketStore
	ids   *persistence.OrderIDs
}

func newQuotaRig(tb testing.TB) *quotaRig {
	tb.Helper()
	g := &quotaRig{db: testenv.MustPostgres(tb), rdb: testenv.MustRedis(tb).Client()}
	g.rds = persistence.NewRedPacketRedis(g.rdb)
	g.store = persistence.NewRedPacketStore(g.db, g.rds)
	g.ids = testenv.MustOrderIDs(tb, g.db)
	return g
}

func (g *quotaRig) service(cfg redpackets.Config) *redpackets.Service {
	return redpackets.New(g.store, g.ids, nil, cfg)
}

// create makes a red packet of count packets of 10 cents each.
func create(ctx context.Context, s *redpackets.Service, creator int64, count int, expiry time.Duration) (domain.RedPacket, error) {
	return s.Create(ctx, domain.NewRedPacket{CreatorID: creator, TotalCents: int64(10 * count), Count: count, Expiry: expiry})
}

func mustCreate(tb testing.TB, s *redpackets.Service, creator int64, count int, expiry time.Duration) domain.RedPacket {
	tb.Helper()
	rp, err := create(context.Background(), s, creator, count, expiry)
	if err != nil {
		tb.Fatalf("create red packet of user %d: %v", creator, err)
	}
	return rp
}

// refused checks that err is the quota's answer, and returns it.
func refused(tb testing.TB, err error) *domain.Error {
	tb.Helper()
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != domain.CodeRateLimited {
		tb.Fatalf("create over the quota: %v (%T), want a %s error", err, err, domain.CodeRateLimited)
	}
	return de
}

// redPacketsOf counts the creator's red packets in the database.
func (g *quotaRig) redPacketsOf(tb testing.TB, creator int64) int {
	tb.Helper()
	n, err := g.db.NewSelect().Table("tb_red_packet").Where("creator_id = ?", creator).Count(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return int(n)
}

func TestTheEleventhOpenRedPacketIsRefused(t *testing.T) {
	t.Parallel()
	g := newQuotaRig(t)
	s := g.service(redpackets.Config{}) // the default quota
	var first domain.RedPacket
	for i := range redpackets.MaxOpenPerUserDefault {
		rp := mustCreate(t, s, 7, 100, time.Hour+time.Duration(i)*time.Minute)
		if i == 0 {
			first = rp
		}
	}
	_, err := create(t.Context(), s, 7, 100, time.Hour)
	de := refused(t, err)
	for _, want := range []string{"you have 10 open red packets", "the limit per user is 10", "fully grabbed", first.ExpiresAt.UTC().Format(time.RFC3339)} {
		if !strings.Contains(de.Message, want) {
			t.Errorf("message %q lacks %q", de.Message, want)
		}
	}
	if len(de.Message) > 200 { // the GraphQL layer cuts longer ones
		t.Errorf("message of %d bytes: %q", len(de.Message), de.Message)
	}
	// Retry after: the earliest expiry and its refund (1 s grace + 1 s
	// interval by default), not later, not at once.
	if want := time.Until(first.ExpiresAt) + 2*time.Second; de.RetryAfter > want+time.Second || de.RetryAfter < want-time.Minute {
		t.Errorf("retry after %s, want about %s", de.RetryAfter, want)
	}
	if n := g.redPacketsOf(t, 7); n != 10 {
		t.Fatalf("user 7 has %d red packets in the database, want 10: the refused one was stored", n)
	}
	// The quota is per user.
	mustCreate(t, s, 8, 100, time.Hour)
}

// Twenty creates of one user with nine open red packets race, through two
// services on two connection pools (two nodes): exactly one passes.
func TestConcurrentCreatesAtTheLimitCreateExactlyOne(t *testing.T) {
	t.Parallel()
	nodes, g := twoNodes(t, redpackets.Config{})
	for round := range 3 {
		creator := int64(100 + round)
		for range 9 {
			mustCreate(t, nodes[0], creator, 10, time.Hour)
		}
		if created, limited := raceCreates(t, nodes, creator, 20); created != 1 || limited != 19 {
			t.Fatalf("round %d: %d created, %d refused of 20 racing creates at 9 open, want 1 and 19", round, created, limited)
		}
		if n := g.redPacketsOf(t, creator); n != 10 {
			t.Fatalf("round %d: user %d has %d red packets, want 10", round, creator, n)
		}
	}
}

// twoNodes are two red-packet services with cfg on one database and one
// Redis, each with a connection pool of its own (two nodes), and a rig
// on the same database for the test's reads.
func twoNodes(tb testing.TB, cfg redpackets.Config) ([]*redpackets.Service, *quotaRig) {
	tb.Helper()
	dbURL := testenv.MustPostgresURL(tb)
	rdb := testenv.MustRedis(tb).Client()
	var nodes []*redpackets.Service
	for range 2 {
		db := testenv.MustOpen(tb, dbURL)
		nodes = append(nodes, redpackets.New(persistence.NewRedPacketStore(db, persistence.NewRedPacketRedis(rdb)), testenv.MustOrderIDs(tb, db), nil, cfg))
	}
	return nodes, &quotaRig{db: testenv.MustOpen(tb, dbURL)}
}

// raceCreates starts n creates of 10 packets by creator at once, on the
// nodes in turn, and counts those created and those RATE_LIMITED; any
// other answer fails the test.
func raceCreates(tb testing.TB, nodes []*redpackets.Service, creator int64, n int) (created, limited int) {
	tb.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := create(context.Background(), nodes[i%len(nodes)], creator, 10, time.Hour)
			mu.Lock()
			defer mu.Unlock()
			switch domain.ErrorCode(err) {
			case "":
				created++
			case domain.CodeRateLimited:
				limited++
			default:
				tb.Errorf("create: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	return created, limited
}

func TestAClosedRedPacketFreesItsSlot(t *testing.T) {
	t.Parallel()
	const limit = 3
	cfg := redpackets.Config{MaxOpenPerUser: limit}

	t.Run("fully grabbed, once its grabs are in the database", func(t *testing.T) {
		t.Parallel()
		g := newQuotaRig(t)
		s := g.service(cfg)
		rps := make([]domain.RedPacket, limit)
		for i := range rps {
			rps[i] = mustCreate(t, s, 7, 2, time.Hour)
		}
		w := testenv.StartRedPacketWriter(t, g.db, g.rdb, writer.Options{})

		// One packet of two taken: still open.
		g.grab(t, rps[1].ID, 20)
		testenv.Drained(t, w, time.Minute)
		_, err := create(t.Context(), s, 7, 2, time.Hour)
		refused(t, err)
		// Both taken: closed.
		g.grab(t, rps[1].ID, 21)
		testenv.Drained(t, w, time.Minute)
		mustCreate(t, s, 7, 2, time.Hour)
		_, err = create(t.Context(), s, 7, 2, time.Hour)
		refused(t, err)
	})

	t.Run("expired: open until its refund", func(t *testing.T) {
		t.Parallel()
		g := newQuotaRig(t)
		s := g.service(cfg)
		short := mustCreate(t, s, 7, 2, 2*time.Second)
		g.grab(t, short.ID, 20) // a grab does not close it: one packet is left
		for range limit - 1 {
			mustCreate(t, s, 7, 2, time.Hour)
		}
		time.Sleep(time.Until(short.ExpiresAt) + 50*time.Millisecond)
		_, err := create(t.Context(), s, 7, 2, time.Hour)
		refused(t, err) // expired, not refunded yet: its rest is still out
		testenv.StartRedPacketWriter(t, g.db, g.rdb, writer.Options{})
		g.refund(t, short.ID)
		mustCreate(t, s, 7, 2, time.Hour)
		_, err = create(t.Context(), s, 7, 2, time.Hour)
		refused(t, err)
	})
}

// grab takes a packet of the red packet for the user, through the grab
// script.
func (g *quotaRig) grab(tb testing.TB, id, user int64) {
	tb.Helper()
	out, err := g.rds.Grab(context.Background(), id, []domain.RedPacketGrab{{RequestID: fmt.Sprint("r", user), UserID: user}})
	if err != nil || len(out.Results) != 1 || out.Results[0].Code != domain.RedPacketOK {
		tb.Fatalf("grab red packet %d for user %d: %v %+v", id, user, err, out)
	}
}

func TestTheQuotaIsSettable(t *testing.T) {
	t.Parallel()
	g := newQuotaRig(t)
	for _, limit := range []int{1, 4} {
		s := g.service(redpackets.Config{MaxOpenPerUser: limit})
		creator := int64(limit)
		for range limit {
			mustCreate(t, s, creator, 1, time.Hour)
		}
		_, err := create(t.Context(), s, creator, 1, time.Hour)
		if de := refused(t, err); !strings.Contains(de.Message, fmt.Sprintf("limit per user is %d:", limit)) {
			t.Errorf("limit %d: message %q does not name it", limit, de.Message)
		}
	}
	// Raised, the same user may create more.
	mustCreate(t, g.service(redpackets.Config{MaxOpenPerUser: 2}), 1, 1, time.Hour)
}
