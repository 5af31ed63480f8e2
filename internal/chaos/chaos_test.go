package chaos

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	redis.SetLogger(QuietRedis{}) // once, before any client exists
	os.Exit(m.Run())
}

// TestChaosShort runs one short round of every fault kind against real
// service processes, a private redis-server and a database of its own.
// The seed comes from the clock, so that every run tries other plans, and
// is printed; CHAOS_SEED replays a run, CHAOS_ROUNDS changes its length
// (`make chaos` is the long run).
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
	names := Kinds()
	kindsFlag := strings.Join(names, ",")
	rounds := len(names)
	if s := os.Getenv("CHAOS_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("CHAOS_ROUNDS=%q: want a positive number", s)
		}
		rounds = n
	}
	t.Logf("seed %d (replay: CHAOS_SEED=%d go test -run TestChaosShort ./internal/chaos, or go run ./cmd/chaos -seed %d -short -rounds %d -kinds %s)", seed, seed, seed, rounds, kindsFlag)
	var out strings.Builder
	rep, err := Run(t.Context(), Config{Seed: seed, Rounds: rounds, Kinds: names, Short: true, Out: &out})
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
