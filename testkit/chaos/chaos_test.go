package chaos

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/testkit/testenv"
)

func TestMain(m *testing.M) {
	redis.SetLogger(QuietRedis{}) // once, before any client exists
	os.Exit(m.Run())
}

// TestChaosShort runs one short round of every fault kind against real
// service processes, private redis-servers and databases of its own. The
// kinds are dealt to CHAOS_SHARDS runs (default 3) that go side by side,
// each with stores and nodes of its own: the rounds mostly wait (for a
// failover, a rebuild's hold, a node's restart), so the shards share the
// cores well. The seed comes from the clock, so that every run tries
// other plans, and is printed; CHAOS_SEED replays a run, CHAOS_ROUNDS
// changes each shard's length (`make chaos` is the long run).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and service processes")
	}
	seed := time.Now().UnixNano() % 1_000_000_000
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		seed = n
	}
	shards := 3
	if s := os.Getenv("CHAOS_SHARDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("CHAOS_SHARDS=%q: want a positive number", s)
		}
		shards = n
	}
	rounds := 0
	if s := os.Getenv("CHAOS_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("CHAOS_ROUNDS=%q: want a positive number", s)
		}
		rounds = n
	}
	bin, err := testenv.BuildService(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d (replay a shard: CHAOS_SEED=%d go test -run TestChaosShort ./testkit/chaos)", seed, seed)
	for i, names := range dealKinds(Kinds(), shards) {
		t.Run(fmt.Sprintf("shard%d", i), func(t *testing.T) {
			t.Parallel()
			runShort(t, seed, names, cmp.Or(rounds, len(names)), bin)
		})
	}
}

// runShort runs one shard of TestChaosShort: rounds rounds cycling
// through names.
func runShort(t *testing.T, seed int64, names []string, rounds int, bin string) {
	kindsFlag := strings.Join(names, ",")
	t.Logf("kinds %s (replay: go run ./cmd/chaos -seed %d -short -rounds %d -kinds %s)", kindsFlag, seed, rounds, kindsFlag)
	var out strings.Builder
	rep, err := Run(t.Context(), Config{Seed: seed, Rounds: rounds, Kinds: names, Short: true, Bin: bin, Out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rounds) != rounds {
		t.Fatalf("%d of %d rounds ran", len(rep.Rounds), rounds)
	}
	for _, r := range rep.Rounds {
		if r.Failed() {
			t.Errorf("round %d (%s) failed; replay: go run ./cmd/chaos -seed %d -start %d -rounds 1 -short -v -kinds %s", r.Round, r.Kind, seed, r.Round, kindsFlag)
		}
	}
}

// shortRoundCost is about how long a short round of a kind takes, in
// seconds, relative to the others (the replicated kinds start their
// Sentinel set or Cluster and wait for a promotion); dealKinds balances
// the shards by it.
var shortRoundCost = map[string]int{
	"cluster-failover": 40, "redis-failover": 30, "redis-rollback": 28, "redis-kill": 23,
	"pg-outage+redis-empty": 21, "refund-wipe": 21, "redis-stall": 21, "redis-empty": 18,
	"redis-empty-twice": 18, "mixed": 18, "none": 17, "node-kill": 9, "pg-outage": 8,
	"redis-cut": 8, "two-nodes": 7, "cluster-migrate": 12, "queue": 30,
}

// dealKinds deals the kinds to n shards, the costliest first, each to the
// shard with the least so far; every kind lands in exactly one shard, in
// the suite's order within it.
func dealKinds(names []string, n int) [][]string {
	n = min(n, len(names))
	byCost := slices.Clone(names)
	slices.SortStableFunc(byCost, func(a, b string) int { return cmp.Or(shortRoundCost[b], 20) - cmp.Or(shortRoundCost[a], 20) })
	load := make([]int, n)
	shardOf := map[string]int{}
	for _, k := range byCost {
		i := slices.Index(load, slices.Min(load))
		shardOf[k] = i
		load[i] += cmp.Or(shortRoundCost[k], 20)
	}
	out := make([][]string, n)
	for _, k := range names {
		out[shardOf[k]] = append(out[shardOf[k]], k)
	}
	return out
}
