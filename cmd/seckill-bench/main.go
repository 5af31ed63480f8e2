// Command seckill-bench runs flash sales against the service and the
// reference designs from outside, as users would, then checks what they
// answered and stored and prints throughput, latency, codes and costs.
//
//	seckill-bench --target service,reference,ceiling --scenario sold-out,in-stock \
//	    --url http://127.0.0.1:8080 --users 20000 --plot artifacts/bench.png
//
// "reference" and "ceiling" are started here as child processes (this
// binary's `serve` subcommand) on free loopback ports; the reference gets
// a database of its own on the Postgres server of DATABASE_URL and keys
// of its own in REDIS_URL. See docs/BENCHMARKS.md.
//
//	seckill-bench --scenario queue --early 5000 --late 15000 --stock 1000 \
//	    --admit-per-second 200 --max-active 300 --release-before 5s
//
// sells through a waiting room (queue.go in bench/sale): the service must
// run with TICKET_RELEASE_BEFORE equal to --release-before.
//
//	seckill-bench flood [--probes ...] [--rounds 3]
//
// measures a legitimate user's latency quiet and under floods of
// anonymous requests, the service pinned to a core of its own (flood.go).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"flashsale/bench/sale"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	sub := ""
	if len(os.Args) > 1 {
		sub = os.Args[1]
	}
	switch sub {
	case "serve":
		err = serve(ctx, os.Args[2:])
	case "flood":
		err = flood(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "flood-worker":
		err = floodWorker(ctx, os.Args[2:], os.Stdin, os.Stdout)
	default:
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "seckill-bench:", err)
	}
	os.Exit(exitCode(err))
}

// exitCode is 0 for success and for -h (the usage was asked for, and
// printed), 1 when a sale broke a promise, 2 for anything else.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errViolations):
		return 1
	}
	return 2
}

// errViolations makes the exit status 1: a sale broke a promise.
var errViolations = errors.New("invariant violations (see above)")

type options struct {
	targets, scenarios, urls        string
	users, attempts, stock, perUser int
	concurrency, rate               int
	maxDuration                     time.Duration
	secret, databaseURL, redisURL   string
	pid, segments                   int
	requestIDs, jsonOut             bool
	tickets                         bool
	challenge                       string
	plot                            string
	profileURL, profile             string
	profileFor                      time.Duration
	rounds                          int
	queue                           sale.QueueOptions
	maxDurationSet                  bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("seckill-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.targets, "target", "service", "comma-separated targets, each run in turn: service (the --url nodes), reference, ceiling, ceiling-graphql (the ceiling answering the service's contract), or a service URL")
	fs.StringVar(&o.scenarios, "scenario", sale.SoldOut, "comma-separated scenarios: "+strings.Join(sale.Scenarios, ", "))
	fs.StringVar(&o.urls, "url", envOr("SECKILL_URL", "http://127.0.0.1:8080"), "the service's base URL(s), comma-separated; the cluster scenario goes round robin over them (env SECKILL_URL)")
	fs.IntVar(&o.users, "users", 2000, "distinct users")
	fs.IntVar(&o.attempts, "attempts", 0, "grabs per user (0: the scenario's, 1 or 2)")
	fs.IntVar(&o.stock, "stock", 0, "units on sale (0: the scenario's: sold-out users/100, in-stock one per grab, else users/2)")
	fs.IntVar(&o.perUser, "per-user-limit", 1, "orders one user may hold")
	fs.IntVar(&o.segments, "segments", 0, "the service's voucher split into this many stock segments (0: the service's default)")
	fs.IntVar(&o.concurrency, "concurrency", 64, "requests in flight at most")
	fs.IntVar(&o.rate, "rate", 0, "requests per second (0: as fast as --concurrency allows)")
	fs.DurationVar(&o.maxDuration, "max-duration", 20*time.Second, "stop each attack after this (queue: every user done this long after the sale begins; 60s unless set)")
	fs.StringVar(&o.profileURL, "profile-url", "", "the service's PPROF_ADDR as a URL (http://127.0.0.1:6060): with --profile, a CPU profile of each attack on target service is taken from it")
	fs.StringVar(&o.profile, "profile", "", "write each service attack's CPU profile to <this>-<scenario>.pprof (needs --profile-url)")
	fs.DurationVar(&o.profileFor, "profile-seconds", 5*time.Second, "how long each CPU profile runs from the attack's start")
	// No default from the environment: -h would print the secret.
	fs.StringVar(&o.secret, "jwt-secret", "", "HS256 secret of the targets (default: env JWT_SECRET)")
	// URLs may hold passwords: the environment is read after parsing.
	fs.StringVar(&o.databaseURL, "database-url", "", "the service's Postgres, read for its orders; the reference gets a database of its own on the same server (default: env DATABASE_URL)")
	fs.StringVar(&o.redisURL, "redis-url", "", "the service's Redis, measured (CPU, commands per request); the reference uses it too, under keys of its own (default: env REDIS_URL)")
	fs.IntVar(&o.pid, "pid", 0, "the service's process id for CPU per request (0: found by its port when local)")
	fs.BoolVar(&o.requestIDs, "request-ids", true, "send a requestId (idempotency key) with each service grab")
	fs.BoolVar(&o.tickets, "tickets", false, "the service's voucher requires grab tickets: each user takes one before the attack and sends it with every grab")
	fs.StringVar(&o.challenge, "challenge", "", "with --tickets: POW puts a proof of work before each ticket (solved by the tool, before the attack)")
	fs.IntVar(&o.rounds, "rounds", 1, "run each scenario this many times over the targets, the targets' order reversed every other round, so that no target always meets the machine first; the summary gives each round's ratios and their medians")
	fs.IntVar(&o.queue.Early, "early", 0, "queue: users who join the waiting room before it opens (0 with --late 0: a quarter of --users)")
	fs.IntVar(&o.queue.Late, "late", 0, "queue: users who join after it opens, in waves (0 with --early 0: the rest of --users)")
	fs.IntVar(&o.queue.AdmitPerSecond, "admit-per-second", 0, "queue: the room's admitPerSecond (0: the service's default, 100)")
	fs.IntVar(&o.queue.MaxActive, "max-active", 0, "queue: the room's maxActive, open tickets at most (0: the service's default, 1000)")
	fs.IntVar(&o.queue.Subscribers, "subscribers", 200, "queue: users who follow their place over a websocket (queueChanged), sampled evenly; the rest poll queuePlace; the service's WS_MAX_PER_IP (256) bounds it")
	fs.DurationVar(&o.queue.ReleaseBefore, "release-before", 0, "queue: the service's TICKET_RELEASE_BEFORE, when the room opens before the sale (0: the service's default, 60s; start the service with e.g. TICKET_RELEASE_BEFORE=5s)")
	fs.DurationVar(&o.queue.TicketTTL, "ticket-ttl", 0, "queue: the service's TICKET_TTL, an admission's lifetime (0: the service's default, 2m)")
	fs.DurationVar(&o.queue.EarlyWindow, "early-window", 0, "queue: from the voucher's creation to the room's opening, for the early joins (0: 2s + 2ms a user)")
	fs.IntVar(&o.queue.Wave, "wave", 16, "queue: late users who join at once; each wave waits for the one before, so their order is known")
	fs.DurationVar(&o.queue.PollMin, "poll-min", 500*time.Millisecond, "queue: a poller's shortest interval (it polls at a quarter of its estimated wait, jittered)")
	fs.DurationVar(&o.queue.PollMax, "poll-max", 10*time.Second, "queue: a poller's longest interval")
	fs.BoolVar(&o.jsonOut, "json", false, "print the reports as JSON instead of a table")
	fs.StringVar(&o.plot, "plot", "", "write throughput and latency over time to this PNG (none by default; keep it out of tracked files, e.g. artifacts/, which git ignores)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) { o.maxDurationSet = o.maxDurationSet || f.Name == "max-duration" })
	o.secret = cmp.Or(o.secret, os.Getenv("JWT_SECRET"))
	o.databaseURL = cmp.Or(o.databaseURL, os.Getenv("DATABASE_URL"))
	o.redisURL = cmp.Or(o.redisURL, os.Getenv("REDIS_URL"))
	if o.secret == "" {
		return o, errors.New("a JWT secret is needed: --jwt-secret or JWT_SECRET")
	}
	if o.rounds < 1 {
		return o, errors.New("--rounds must be 1 or more")
	}
	return o, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	var cleanups []func()
	// Every target is started first and every scenario then runs on each
	// in turn, so that the targets meet the same machine at about the
	// same time.
	var endpoints []sale.Endpoint
	defer func() {
		for _, c := range cleanups {
			c()
		}
	}()
	for _, target := range split(o.targets) {
		ep, cleanup, err := endpoint(ctx, target, o, stderr)
		if err != nil {
			return fmt.Errorf("target %s: %w", target, err)
		}
		cleanups = append(cleanups, cleanup)
		endpoints = append(endpoints, ep)
	}
	var reports []*sale.Report
	var failed []string
	for _, sc := range split(o.scenarios) {
		for round := 1; round <= o.rounds; round++ {
			for _, ep := range roundOrder(endpoints, round) {
				rep, skipped, err := runOne(ctx, o, ep, sc, round, stderr)
				if err != nil {
					return err
				}
				if skipped {
					continue
				}
				if o.rounds > 1 {
					rep.Round = round
				}
				reports = append(reports, rep)
				if len(rep.Violations) > 0 {
					failed = append(failed, ep.Name+" "+sc)
				}
			}
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"reports": reports, "ratios": ratios(reports)}); err != nil {
			return err
		}
	} else {
		printSummary(stdout, reports)
	}
	if o.plot != "" {
		if err := plots(o.plot, firstRound(reports), stderr); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s", errViolations, strings.Join(failed, ", "))
	}
	return nil
}

// plots writes the grab scenarios' plot to path, and each waiting-room
// sale's to path itself when it is the only report, else to
// <path>-queue[-N].png.
func plots(path string, reps []*sale.Report, stderr io.Writer) error {
	var grabs, queues []*sale.Report
	for _, r := range reps {
		if r.Queue != nil {
			queues = append(queues, r)
		} else {
			grabs = append(grabs, r)
		}
	}
	write := func(p string, draw func(io.Writer) error) error {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		if err := draw(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "plot:", p)
		return nil
	}
	if len(grabs) > 0 {
		if err := write(path, func(w io.Writer) error { return sale.Plot(w, grabs) }); err != nil {
			return err
		}
	}
	for i, r := range queues {
		p := path
		if len(grabs) > 0 || len(queues) > 1 {
			p = strings.TrimSuffix(path, ".png") + "-queue"
			if len(queues) > 1 {
				p += fmt.Sprintf("-%d", i+1)
			}
			p += ".png"
		}
		if err := write(p, func(w io.Writer) error { return sale.PlotQueue(w, r) }); err != nil {
			return err
		}
	}
	return nil
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// endpoint resolves a --target word: the service, or a reference design
// started here for the run.
func endpoint(ctx context.Context, target string, o options, stderr io.Writer) (sale.Endpoint, func(), error) {
	nothing := func() {}
	switch target {
	case "service":
		return sale.Endpoint{Name: "service", API: sale.GraphQL, URLs: split(o.urls), DatabaseURL: o.databaseURL,
			PID: o.pid, RedisURL: o.redisURL}, nothing, nil
	case "reference", "ceiling", "ceiling-graphql":
		return startReference(ctx, target, o, stderr)
	}
	// name=URL: another service node under a name of its own, e.g. the
	// same build with a setting changed, measured in the same run.
	name, url := "service", target
	if n, u, ok := strings.Cut(target, "="); ok && n != "" && !strings.Contains(n, "/") {
		name, url = n, u
	}
	if strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://") {
		return sale.Endpoint{Name: name, API: sale.GraphQL, URLs: []string{strings.TrimSuffix(url, "/")},
			DatabaseURL: o.databaseURL, PID: o.pid, RedisURL: o.redisURL}, nothing, nil
	}
	return sale.Endpoint{}, nil, fmt.Errorf("unknown target %q: service, reference, ceiling, ceiling-graphql, a URL or name=URL", target)
}

// roundOrder is the order of the targets in a round: as given in odd
// rounds, reversed in even ones.
func roundOrder(eps []sale.Endpoint, round int) []sale.Endpoint {
	if round%2 == 1 {
		return eps
	}
	out := slices.Clone(eps)
	slices.Reverse(out)
	return out
}

// firstRound keeps the reports of the first round (all of a one-round run).
func firstRound(reps []*sale.Report) []*sale.Report {
	var out []*sale.Report
	for _, r := range reps {
		if r.Round <= 1 {
			out = append(out, r)
		}
	}
	return out
}

// runOne runs one scenario on one target; skipped is true for a scenario
// the target cannot run. The service's CPU profile, if asked for, is
// taken in the first round.
func runOne(ctx context.Context, o options, ep sale.Endpoint, sc string, round int, stderr io.Writer) (rep *sale.Report, skipped bool, err error) {
	if ctx.Err() != nil {
		return nil, false, ctx.Err()
	}
	if ep.API == sale.Plain && sc == sale.RedPacket {
		fmt.Fprintf(stderr, "%s: skipped red-packet: the reference designs have no red packets\n", ep.Name)
		return nil, true, nil
	}
	if ep.API == sale.Plain && sc == sale.Queue {
		fmt.Fprintf(stderr, "%s: skipped queue: the reference designs have no waiting room\n", ep.Name)
		return nil, true, nil
	}
	if sc == sale.Cluster && len(ep.URLs) < 2 {
		fmt.Fprintf(stderr, "%s: skipped cluster: it needs two or more --url nodes\n", ep.Name)
		return nil, true, nil
	}
	cfg := sale.Config{Endpoint: ep, Scenario: sc, Users: o.users, Attempts: o.attempts, Stock: o.stock,
		PerUserLimit: o.perUser, Segments: o.segments, Concurrency: o.concurrency, Rate: o.rate, MaxDuration: o.maxDuration,
		Secret: o.secret, RequestIDs: o.requestIDs, Progress: stderr,
		Tickets: o.tickets, Challenge: strings.ToUpper(o.challenge), Queue: o.queue}
	if sc == sale.Queue && !o.maxDurationSet {
		cfg.MaxDuration = 60 * time.Second
	}
	var prof *cpuProfile
	if o.profile != "" && o.profileURL != "" && ep.Name == "service" && round == 1 {
		prof = &cpuProfile{url: o.profileURL, seconds: o.profileFor, out: o.profile + "-" + sc + ".pprof"}
		cfg.OnAttack = func() { prof.start(ctx) }
	}
	rep, err = sale.Run(ctx, cfg)
	if perr := prof.wait(); perr != nil {
		fmt.Fprintf(stderr, "%s %s: no CPU profile: %v\n", ep.Name, sc, perr)
	}
	if errors.Is(err, sale.ErrNoRedPackets) {
		fmt.Fprintf(stderr, "%s: red-packet not run: %v\n", ep.Name, err)
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w", ep.Name, sc, err)
	}
	return rep, false, nil
}
