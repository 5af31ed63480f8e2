// Command chaos is the seeded fault-injection suite: it sells vouchers
// through real service nodes against a redis-server and a Postgres
// database of its own while it kills and cuts them, and checks the
// service's promises after every round (see docs/RELIABILITY.md).
//
//	go run ./cmd/chaos -seed 42 -rounds 200
//	go run ./cmd/chaos -seed 42 -start 17 -rounds 1 -v   # replay round 17
//	go run ./cmd/chaos -kinds redis-stall,refund-wipe -rounds 20  # the degraded paths
//
// It needs redis-server and redis-cli on PATH (the replicated kinds start
// sentinels and a Redis Cluster with them) and a Postgres that allows
// CREATE DATABASE at TEST_DATABASE_URL (`scripts/test-services.sh`
// provides them).
// It exits 1 when a round fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/testkit/chaos"
)

func main() {
	redis.SetLogger(chaos.QuietRedis{}) // once, before any client exists
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Int64("seed", 0, "seed of every round's plan (default: from the clock, printed)")
	start := fs.Int("start", 0, "number of the first round (a round's plan depends on seed and number only)")
	rounds := fs.Int("rounds", 200, "how many rounds")
	kinds := fs.String("kinds", "", "comma-separated fault kinds to run (default all: "+strings.Join(chaos.Kinds(), ", ")+")")
	short := fs.Bool("short", false, "smaller, quicker sales, as the test suite runs them")
	workers := fs.Int("workers", 0, "grabs in flight at most (default 16)")
	bin := fs.String("bin", "", "service binary to run (default: build this module's)")
	verbose := fs.Bool("v", false, "print every round's plan, and the nodes' logs of a failed round")
	logs := fs.Bool("logs", false, "print the nodes' logs of every round, passed or failed")
	nodeLevel := fs.String("node-log-level", "", "the nodes' LOG_LEVEL (default warn; debug shows each held voucher and failed call)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_000
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	cfg := chaos.Config{
		Seed: *seed, Start: *start, Rounds: *rounds, Short: *short, Bin: *bin, Workers: *workers, Verbose: *verbose,
		Logs: *logs, NodeLogLevel: *nodeLevel,
		Out: stdout, Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	if *kinds != "" {
		cfg.Kinds = strings.Split(*kinds, ",")
	}
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if n := rep.Failed(); n > 0 {
		return fmt.Errorf("%d of %d rounds failed (seed %d)", n, len(rep.Rounds), *seed)
	}
	return nil
}
