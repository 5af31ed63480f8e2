package persistence_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// aofReplicated is a primary and a synced replica that both keep an
// append-only file fsynced at every write, as a Sentinel set that promises
// durability runs them.
func aofReplicated(tb testing.TB) (primary, replica *testenv.RedisServer) {
	tb.Helper()
	aof := []string{"--appendonly", "yes", "--appendfsync", "always"}
	primary = testenv.MustRedisFlags(tb, aof...)
	return primary, testenv.MustReplicaFlags(tb, primary, aof...)
}

// offersWaitAOF says whether s is Redis 7.2 or later (WAITAOF).
func offersWaitAOF(tb testing.TB, s *testenv.RedisServer) (version string, ok bool) {
	tb.Helper()
	info, err := s.Client().Info(tb.Context(), "server").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, found := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); found {
			version = v
		}
	}
	var major, minor int
	_, _ = fmt.Sscanf(version, "%d.%d", &major, &minor)
	return version, major > 7 || major == 7 && minor >= 2
}

// waitAOFCalls is how many WAITAOF the server answered (INFO commandstats).
func waitAOFCalls(tb testing.TB, s *testenv.RedisServer) string {
	tb.Helper()
	info, err := s.Client().Info(tb.Context(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, found := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_waitaof:calls="); found {
			calls, _, _ := strings.Cut(rest, ",")
			return calls
		}
	}
	return "0"
}

// aofGrabs claims a voucher on primary for grabs acknowledged by one
// replica, with WAITAOF where offered, and returns a func that sells it
// to a user in a batch of one.
func aofGrabs(t *testing.T, primary *testenv.RedisServer) func(user int64) error {
	t.Helper()
	db, rdb := testenv.MustPostgres(t), ackClient(t, primary)
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	g.Acks = persistence.Acks{Replicas: 1, Timeout: ackTimeout, AOF: &persistence.AOFAcks{}}
	fence, _, err := g.Claim(t.Context(), v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return func(user int64) error {
		t.Helper()
		_, err := g.Grab(call(t), v.ID, 0, fence, testenv.Grabs(t, ids, user))
		return err
	}
}

// Where the primary has WAITAOF and its append-only file on, a batch
// answers only once the primary's and the replica's files have fsynced
// its writes: with the replica's file off (it still replicates, so WAIT
// alone would answer) the batch is undecided. With the primary's file
// turned off WAITAOF is refused: that batch is undecided, and the next
// ones are acknowledged with WAIT. Run with TEST_REDIS_SERVER set to a
// Redis 7.2 or later server; it skips on an older one.
func TestGrabWaitsForTheAppendOnlyFsyncWhereOffered(t *testing.T) {
	t.Parallel()
	primary, replica := aofReplicated(t)
	if version, ok := offersWaitAOF(t, primary); !ok {
		t.Skipf("redis-server %s has no WAITAOF (7.2 or later; TEST_REDIS_SERVER names another binary)", version)
	}
	grab := aofGrabs(t, primary)

	// The first batch learns what the primary offers (with WAIT).
	if err := grab(1); err != nil {
		t.Fatalf("first batch: %v", err)
	}
	if err := grab(2); err != nil {
		t.Fatalf("batch with both files on: %v", err)
	}
	if calls := waitAOFCalls(t, primary); calls != "1" {
		t.Fatalf("the primary answered %s WAITAOF, want 1 (the second batch)", calls)
	}

	if err := replica.Client().ConfigSet(t.Context(), "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if err := grab(3); !errors.Is(err, persistence.ErrNotAcknowledged) {
		t.Fatalf("batch whose replica has no append-only file: %v, want ErrNotAcknowledged", err)
	}

	if err := primary.Client().ConfigSet(t.Context(), "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	if err := grab(4); !errors.Is(err, persistence.ErrNotAcknowledged) {
		t.Fatalf("batch whose primary refuses WAITAOF: %v, want ErrNotAcknowledged", err)
	}
	if err := grab(5); err != nil {
		t.Fatalf("batch after WAITAOF was refused, want WAIT's acknowledgement: %v", err)
	}
}

// Where the primary lacks WAITAOF (Redis before 7.2) the acknowledgement
// is WAIT's, append-only file or not: batches answer (a WAITAOF sent
// would be refused, and its batch undecided).
func TestGrabWaitsWithWAITWhereWAITAOFIsLacking(t *testing.T) {
	t.Parallel()
	primary, _ := aofReplicated(t)
	if version, ok := offersWaitAOF(t, primary); ok {
		t.Skipf("redis-server %s has WAITAOF", version)
	}
	grab := aofGrabs(t, primary)
	for i := int64(1); i <= 3; i++ {
		if err := grab(i); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
}
