package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"flashsale/bench/sale"
	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// flood measures what a flood of anonymous requests does to a legitimate
// user of the service:
//
//	seckill-bench flood [--probes a,b] [--legit 2000] [--clients 4] [--rounds 3]
//	    [--variant NAME:K=V,K=V ...] [--env K=V ...]
//
// It builds the service and runs it in real mode (a private redis-server,
// a fresh Postgres database on TEST_DATABASE_URL's server, the service's
// defaults otherwise), pinned with taskset to one core with GOMAXPROCS=1,
// its redis-server on the same core; one such service per --variant (the
// same build with settings changed), measured in turn, probe by probe, so
// that the variants meet the shared machine at about the same time. The
// clients run on the other core: this process is the legitimate user
// (from 127.0.0.2, one request at a time, the voucher's page and a grab
// by a new user in turn), and a flood-worker process of its own sends one
// probe from --clients connections at once (from 127.0.0.1) as fast as
// the service answers. For each probe, the legitimate user's latency is
// sampled quiet, then under the flood; the report gives both p99s and
// their ratio, the flood's rate and the service's CPU per flood request.
// docs/BENCHMARKS.md has the numbers.
func flood(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlood(args, stderr)
	if err != nil {
		return err
	}
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	dir, err := os.MkdirTemp("", "seckill-flood-")
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })
	bin := o.bin
	if bin == "" {
		fmt.Fprintln(stderr, "building the service")
		if bin, err = testenv.BuildService(dir); err != nil {
			return err
		}
	}
	var targets []*floodTarget
	for i, v := range o.variants {
		t, cleanup, err := startTarget(ctx, o, bin, filepath.Join(dir, strconv.Itoa(i)), v, stderr)
		cleanups = append(cleanups, cleanup)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		targets = append(targets, t)
	}
	// Every thread of this process, and so of the flood workers it
	// starts, on the clients' core.
	if o.clientCPU != "" {
		if err := pin(os.Getpid(), o.clientCPU); err != nil {
			return err
		}
	}
	for _, t := range targets {
		// Warm: the first requests fill pools and caches.
		if _, err := t.legit.sample(ctx, t.voucher, 200); err != nil {
			return fmt.Errorf("%s: warm-up: %w", t.name, err)
		}
	}
	var results []floodResult
	for round := 1; round <= o.rounds; round++ {
		for _, t := range targets {
			if t.idleCores, err = t.idle(); err != nil {
				return err
			}
		}
		for _, p := range o.probes {
			for _, t := range inTurn(targets, round) {
				res, err := measure(ctx, o, t, p, round)
				if err != nil {
					return fmt.Errorf("%s, round %d, %s: %w", t.name, round, p.name, err)
				}
				fmt.Fprintf(stderr, "round %d %-10s %-22s %s\n", round, t.name, p.name, res.line())
				results = append(results, res)
			}
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	printFlood(stdout, o, results)
	return nil
}

// inTurn is the order of the variants in a round: as given in odd
// rounds, reversed in even ones, so that none always goes first.
func inTurn(targets []*floodTarget, round int) []*floodTarget {
	if round%2 == 1 {
		return targets
	}
	out := slices.Clone(targets)
	slices.Reverse(out)
	return out
}

type floodOptions struct {
	probes                []floodProbe
	variants              []variant
	legit, clients        int
	rounds                int
	warmup                time.Duration
	serviceCPU, clientCPU string
	serviceProcs          int
	floodNice             int
	env                   map[string]string
	bin                   string
	jsonOut               bool
}

// variant is a service measured under its name, with settings of its own.
type variant struct {
	name string
	env  map[string]string
}

func parseFlood(args []string, stderr io.Writer) (floodOptions, error) {
	o := floodOptions{env: map[string]string{}}
	fs := flag.NewFlagSet("seckill-bench flood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	names := make([]string, len(floodProbes))
	for i, p := range floodProbes {
		names[i] = p.name
	}
	probes := fs.String("probes", strings.Join(names, ","), "comma-separated probes, each flooded in turn")
	fs.IntVar(&o.legit, "legit", 2000, "the legitimate user's requests per sample (quiet, then flooded)")
	fs.IntVar(&o.clients, "clients", 4, "flooding connections at once")
	fs.IntVar(&o.rounds, "rounds", 3, "times every probe is measured on every variant")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "flooding before anything is measured")
	fs.StringVar(&o.serviceCPU, "service-cpu", "0", "taskset CPU list of the services and their redis-servers (empty: not pinned)")
	fs.StringVar(&o.clientCPU, "client-cpu", "1", "taskset CPU list of the clients (empty: not pinned)")
	fs.IntVar(&o.serviceProcs, "service-procs", 1, "the services' GOMAXPROCS (0: the Go runtime's choice)")
	fs.IntVar(&o.floodNice, "flood-nice", 19, "niceness of the flood worker, so that it does not delay the legitimate user's process on their shared core (0: not niced)")
	fs.StringVar(&o.bin, "bin", "", "the service binary (default: built from this module)")
	fs.Func("env", "K=V added to every service's environment (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return errors.New("want K=V")
		}
		o.env[k] = v
		return nil
	})
	fs.Func("variant", "NAME or NAME:K=V,K=V: one more service under that name with those settings (repeatable; default one, \"service\")", func(s string) error {
		name, kvs, _ := strings.Cut(s, ":")
		if name == "" {
			return errors.New("want NAME or NAME:K=V,K=V")
		}
		v := variant{name: name, env: map[string]string{}}
		for _, kv := range split(kvs) {
			k, val, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("%q: want K=V", kv)
			}
			v.env[k] = val
		}
		o.variants = append(o.variants, v)
		return nil
	})
	fs.BoolVar(&o.jsonOut, "json", false, "print every measurement as JSON instead of the summary")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, n := range split(*probes) {
		p, ok := probeNamed(n)
		if !ok {
			return o, fmt.Errorf("unknown probe %q: %s", n, strings.Join(names, ", "))
		}
		o.probes = append(o.probes, p)
	}
	if len(o.variants) == 0 {
		o.variants = []variant{{name: "service"}}
	}
	if o.legit < 100 || o.clients < 1 || o.rounds < 1 {
		return o, errors.New("--legit must be 100 or more, --clients and --rounds 1 or more")
	}
	return o, nil
}

// floodTarget is one running service and its legitimate user.
type floodTarget struct {
	name    string
	addr    string // host:port
	pid     int
	tokens  *auth.Tokens
	voucher string
	legit   *legitUser
	stderr  io.Writer
	// idleCores is the service's own CPU when nobody asks anything (its
	// timers and background jobs), measured each round.
	idleCores float64
}

// Loopback addresses: the per-address limits key on the peer address
// (forwarding headers are not trusted), so the flood and the user are
// told apart as two clients behind two addresses would be.
const (
	floodFrom = "127.0.0.1"
	legitFrom = "127.0.0.2"
)

// startTarget starts a variant's redis-server, database and service,
// pinned, and creates the voucher its user grabs.
func startTarget(ctx context.Context, o floodOptions, bin, dir string, v variant, stderr io.Writer) (*floodTarget, func(), error) {
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, cleanup, err
	}
	rdb, err := testenv.StartRedis(dir, false)
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, rdb.Kill)
	dbURL, drop, err := testenv.CreatePostgres(ctx, "flashsale_flood_")
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, func() { _ = drop() })
	secret := randomHex(16)
	env := map[string]string{"REDIS_URL": rdb.URL(), "DATABASE_URL": dbURL, "JWT_SECRET": secret}
	if o.serviceProcs > 0 {
		env["GOMAXPROCS"] = strconv.Itoa(o.serviceProcs)
	}
	maps.Copy(env, o.env)
	maps.Copy(env, v.env)
	svc, err := testenv.StartService(ctx, bin, env)
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, svc.Kill)
	t := &floodTarget{name: v.name, addr: strings.TrimPrefix(svc.Base, "http://"), tokens: auth.NewTokens(secret), stderr: stderr}
	if t.pid = sale.PIDByURL(svc.Base); t.pid == 0 {
		return nil, cleanup, errors.New("the service's process was not found by its port")
	}
	redisPID := sale.PIDByURL(rdb.URL())
	if redisPID == 0 {
		return nil, cleanup, errors.New("redis-server's process was not found by its port")
	}
	// Every thread of the service and of its Redis on the services'
	// core: the clients cannot take it from them.
	if o.serviceCPU != "" {
		for _, pid := range []int{t.pid, redisPID} {
			if err := pin(pid, o.serviceCPU); err != nil {
				return nil, cleanup, err
			}
		}
	}
	admin, err := t.tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, 24*time.Hour)
	if err != nil {
		return nil, cleanup, err
	}
	t.legit = newLegitUser(t.addr, t.tokens)
	if t.voucher, err = t.legit.createVoucher(ctx, admin); err != nil {
		return nil, cleanup, err
	}
	if err := t.legit.createLongTexts(ctx, admin, 100); err != nil {
		return nil, cleanup, err
	}
	return t, cleanup, nil
}

// pin sets the CPU affinity of every thread of pid; threads started
// later inherit it.
func pin(pid int, cpus string) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset (util-linux) pinning %d to CPU %s: %w: %s", pid, cpus, err, out)
	}
	return nil
}

// idleWindow is how long a service's own CPU is measured with nothing
// asked of it. /proc counts CPU time in ticks of 10 ms.
const idleWindow = 2 * time.Second

// idle measures the service's CPU while nobody asks anything, in cores.
func (t *floodTarget) idle() (float64, error) {
	cpu0, err := sale.CPUTime(t.pid)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	time.Sleep(idleWindow)
	cpu1, err := sale.CPUTime(t.pid)
	if err != nil {
		return 0, err
	}
	return float64(cpu1-cpu0) / float64(time.Since(began)), nil
}

// settle waits, up to 5 s, until the service's CPU is back to its idle
// level: half a second with at most one tick (10 ms) over it.
func (t *floodTarget) settle() {
	const window = 500 * time.Millisecond
	for range 10 {
		cpu0 := mustCPU(t.pid)
		time.Sleep(window)
		if mustCPU(t.pid)-cpu0 <= time.Duration(t.idleCores*float64(window))+10*time.Millisecond {
			return
		}
	}
}

// floodResult is one probe's measurement on one variant in one round.
type floodResult struct {
	Variant string `json:"variant"`
	Probe   string `json:"probe"`
	Round   int    `json:"round"`
	Quiet   sample `json:"quiet"`
	Flood   sample `json:"flood"`
	// FloodPerSecond are the flood's requests answered per second while
	// the legitimate user was sampled.
	FloodPerSecond float64 `json:"floodPerSecond"`
	// ServiceCores is the service's CPU under the flood alone, before
	// the user's sample, in cores (1: one core busy all the time), and
	// CPUPerFloodRequest the same CPU less the service's idle CPU, per
	// flood request.
	ServiceCores       float64       `json:"serviceCores"`
	CPUPerFloodRequest time.Duration `json:"cpuPerFloodRequest"`
	// ServiceCore and ClientCore are what the two cores did during the
	// user's flooded sample (when each is one CPU).
	ServiceCore coreUse `json:"serviceCore"`
	ClientCore  coreUse `json:"clientCore"`
	// Outcomes count the flood's answers; Unexpected those the probe
	// does not expect.
	Outcomes   map[string]int64 `json:"outcomes"`
	Unexpected int64            `json:"unexpected"`
	Errors     int64            `json:"errors"`
	LastError  string           `json:"lastError,omitempty"`
}

func (r floodResult) ratio() float64 { return float64(r.Flood.P99) / float64(r.Quiet.P99) }

func (r floodResult) line() string {
	return fmt.Sprintf("p99 %s -> %s (%.2fx), p50 %s -> %s, flood %.0f/s, service %.2f cores, %s per flood request, service core %s, client core %s, legit refused %d %v / %d %v, flood %s",
		msec(r.Quiet.P99), msec(r.Flood.P99), r.ratio(), msec(r.Quiet.P50), msec(r.Flood.P50), r.FloodPerSecond, r.ServiceCores,
		usec(r.CPUPerFloodRequest), r.ServiceCore, r.ClientCore, r.Quiet.Refused, r.Quiet.RefusedAs, r.Flood.Refused, r.Flood.RefusedAs, outcomeText(r.Outcomes))
}

func outcomeText(m map[string]int64) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return int(m[b] - m[a]) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// floodAlone is how long the service's CPU per flood request is measured,
// before the user's flooded sample.
const floodAlone = 3 * time.Second

// measure samples t's legitimate user quiet, then under a flood of p.
func measure(ctx context.Context, o floodOptions, t *floodTarget, p floodProbe, round int) (floodResult, error) {
	res := floodResult{Variant: t.name, Probe: p.name, Round: round}
	var err error
	if res.Quiet, err = t.legit.sample(ctx, t.voucher, o.legit); err != nil {
		return res, fmt.Errorf("quiet: %w", err)
	}
	// The quiet sample's orders are on their way to the database: what
	// that costs is not the flood's.
	t.settle()
	w, err := startWorker(ctx, o, t, p)
	if err != nil {
		return res, err
	}
	defer w.stop()
	time.Sleep(o.warmup)
	// The flood alone first: the service's CPU per flood request.
	c0, err := w.counts()
	if err != nil {
		return res, err
	}
	cpu0, began := mustCPU(t.pid), time.Now()
	time.Sleep(floodAlone)
	c1, err := w.counts()
	if err != nil {
		return res, err
	}
	cpu1, took := mustCPU(t.pid), time.Since(began)
	res.ServiceCores = float64(cpu1-cpu0) / float64(took)
	if sent := c1.Sent - c0.Sent; sent > 0 && p.name != idleProbe {
		busy := cpu1 - cpu0 - time.Duration(t.idleCores*float64(took))
		res.CPUPerFloodRequest = max(busy, 0) / time.Duration(sent)
	}
	// Then the user's sample under the flood, and what both cores did
	// meanwhile (every process's work on them, and the kernel's).
	began = time.Now()
	serviceCore0, clientCore0 := readCoreTicks(o.serviceCPU), readCoreTicks(o.clientCPU)
	if res.Flood, err = t.legit.sample(ctx, t.voucher, o.legit); err != nil {
		return res, fmt.Errorf("flooded: %w", err)
	}
	res.ServiceCore = readCoreTicks(o.serviceCPU).since(serviceCore0)
	res.ClientCore = readCoreTicks(o.clientCPU).since(clientCore0)
	c2, err := w.counts()
	if err != nil {
		return res, err
	}
	res.FloodPerSecond = float64(c2.Sent-c1.Sent) / time.Since(began).Seconds()
	res.Outcomes = c2.Outcomes
	for k, n := range c2.Outcomes {
		if len(p.want) > 0 && !slices.Contains(p.want, k) {
			res.Unexpected += n
		}
	}
	res.Errors, res.LastError = c2.Errors, c2.LastError
	return res, nil
}

// coreTicks are one CPU's counters from /proc/stat (USER_HZ ticks).
type coreTicks struct{ busy, softirq, total int64 }

// coreUse is the share of a window one CPU spent busy (any process, or
// the kernel), and of it in softirq (network receive work among it).
type coreUse struct {
	Busy    float64 `json:"busy"`
	Softirq float64 `json:"softirq"`
}

func (u coreUse) String() string {
	return fmt.Sprintf("%.0f%% busy (%.0f%% softirq)", 100*u.Busy, 100*u.Softirq)
}

// readCoreTicks reads one CPU's line of /proc/stat; zero when cpu is not
// one CPU number or the line is not there.
func readCoreTicks(cpu string) coreTicks {
	if _, err := strconv.Atoi(cpu); err != nil {
		return coreTicks{}
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return coreTicks{}
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || f[0] != "cpu"+cpu {
			continue
		}
		var v [7]int64 // user nice system idle iowait irq softirq
		for i := range v {
			v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
		}
		t := coreTicks{busy: v[0] + v[1] + v[2] + v[5] + v[6], softirq: v[6]}
		t.total = t.busy + v[3] + v[4]
		return t
	}
	return coreTicks{}
}

func (t coreTicks) since(before coreTicks) coreUse {
	total := t.total - before.total
	if total <= 0 {
		return coreUse{}
	}
	return coreUse{Busy: float64(t.busy-before.busy) / float64(total), Softirq: float64(t.softirq-before.softirq) / float64(total)}
}

func mustCPU(pid int) time.Duration {
	d, _ := sale.CPUTime(pid)
	return d
}

// floodCounts is what a flood worker has sent so far.
type floodCounts struct {
	Sent      int64            `json:"sent"`
	Outcomes  map[string]int64 `json:"outcomes"`
	Errors    int64            `json:"errors"`
	LastError string           `json:"lastError,omitempty"`
}

// worker is a running flood-worker process.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

const floodTokensEnv = "SECKILL_FLOOD_TOKENS"

// startWorker starts a flood worker sending p to t.
func startWorker(ctx context.Context, o floodOptions, t *floodTarget, p floodProbe) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var users []string
	for i := range 64 {
		tok, err := t.tokens.Issue(auth.Identity{UserID: int64(900_000 + i), Role: auth.RoleUser}, 24*time.Hour)
		if err != nil {
			return nil, err
		}
		users = append(users, tok)
	}
	args := []string{exe, "flood-worker", "--addr", t.addr, "--probe", p.name, "--clients", strconv.Itoa(o.clients)}
	if o.floodNice != 0 {
		// Every thread of the worker niced (nice is per thread on Linux,
		// and threads inherit it): on the clients' core, the user's own
		// process is then not kept waiting by the flood's clients.
		args = append([]string{"nice", "-n", strconv.Itoa(o.floodNice)}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), floodTokensEnv+"="+strings.Join(users, ","), "GOMAXPROCS=1")
	cmd.Stderr = t.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &worker{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	w.out.Buffer(nil, 1<<20)
	if !w.out.Scan() || w.out.Text() != "flooding" {
		w.stop()
		return nil, fmt.Errorf("the flood worker did not start: %q", w.out.Text())
	}
	return w, nil
}

func (w *worker) counts() (floodCounts, error) {
	var c floodCounts
	if _, err := io.WriteString(w.stdin, "counts\n"); err != nil {
		return c, err
	}
	if !w.out.Scan() {
		return c, fmt.Errorf("the flood worker stopped: %v", w.out.Err())
	}
	return c, json.Unmarshal(w.out.Bytes(), &c)
}

func (w *worker) stop() {
	_ = w.stdin.Close()
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = w.cmd.Process.Kill()
		<-done
	}
}

// floodWorker is the flood-worker subcommand: it floods the service with
// one probe from --clients connections at once, prints "flooding" once
// under way, answers each line on stdin with its counts so far (JSON),
// and stops when stdin closes.
func floodWorker(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("seckill-bench flood-worker", flag.ContinueOnError)
	addr := fs.String("addr", "", "the service's host:port")
	name := fs.String("probe", "", "the probe")
	clients := fs.Int("clients", 4, "connections at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, ok := probeNamed(*name)
	if !ok {
		return fmt.Errorf("unknown probe %q", *name)
	}
	users := strings.Split(os.Getenv(floodTokensEnv), ",")
	f := newFlooder(*addr, floodFrom, *clients, users, forgedToken(users[0]))
	defer f.close()
	if p.prepare != nil {
		if err := p.prepare(ctx, f); err != nil {
			return fmt.Errorf("prepare %s: %w", p.name, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		sent     atomic.Int64
		mu       sync.Mutex
		outcomes = map[string]int64{}
		errs     int64
		lastErr  string
	)
	for c := range *clients {
		wg.Go(func() {
			for i := c; ctx.Err() == nil; i += *clients {
				out, err := p.send(ctx, f, i)
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				mu.Lock()
				if err != nil {
					errs++
					lastErr = err.Error()
				} else {
					outcomes[out]++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond) // a refused dial is no flood
				}
			}
		})
	}
	if _, err := fmt.Fprintln(stdout, "flooding"); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	in := bufio.NewScanner(stdin)
	enc := json.NewEncoder(stdout)
	for in.Scan() {
		mu.Lock()
		c := floodCounts{Sent: sent.Load(), Outcomes: maps.Clone(outcomes), Errors: errs, LastError: lastErr}
		mu.Unlock()
		if err := enc.Encode(c); err != nil {
			break
		}
	}
	cancel()
	wg.Wait()
	return nil
}

// forgedToken is a user's token with its signature changed.
func forgedToken(tok string) string {
	i := strings.LastIndexByte(tok, '.')
	if i < 0 || i+1 >= len(tok) {
		return "x.y.z"
	}
	sig := []byte(tok[i+1:])
	if sig[0] == 'A' {
		sig[0] = 'B'
	} else {
		sig[0] = 'A'
	}
	return tok[:i+1] + string(sig)
}

// sample is the legitimate user's latency over some requests.
// sample is the legitimate user's latency over some requests.
type sample struct {
	Requests int           `json:"requests"`
	P50      time.Duration `json:"p50"`
	P99      time.Duration `json:"p99"`
	Max      time.Duration `json:"max"`
	// QueryP99 and GrabP99 are the two kinds' own p99s.
	QueryP99 time.Duration `json:"queryP99"`
	GrabP99  time.Duration `json:"grabP99"`
	// Refused counts answers other than the voucher, or a grab's OK, and
	// RefusedAs by their first code.
	Refused   int            `json:"refused"`
	RefusedAs map[string]int `json:"refusedAs,omitempty"`
}

// legitUser is a shopper: one request at a time, the voucher's page
// (its live stock) and a grab in turn, each grab by a user not seen
// before (one order per user), from legitFrom.
type legitUser struct {
	base   string
	client *http.Client
	tokens *auth.Tokens
	next   int64 // the next user id
}

func newLegitUser(addr string, tokens *auth.Tokens) *legitUser {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(legitFrom)}, Timeout: 5 * time.Second}
	return &legitUser{base: "http://" + addr, tokens: tokens, next: 1_000_000,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1}}}
}

const (
	legitVoucherQuery = `query($v: ID!) { voucher(id: $v) { id title status seckill { remaining } } }`
	legitGrabQuery    = `mutation($v: ID!, $r: String) { seckillVoucher(voucherId: $v, requestId: $r) { code orderId } }`
)

func (u *legitUser) createVoucher(ctx context.Context, admin string) (string, error) {
	now := time.Now().UTC()
	in := map[string]any{
		"shopId": "1", "title": "flood", "payValue": 100, "actualValue": 1000,
		"type": "SECKILL", "stock": 100_000_000, "perUserLimit": 1,
		"beginAt": now.Add(-time.Minute).Format(time.RFC3339), "endAt": now.Add(24 * time.Hour).Format(time.RFC3339),
	}
	var out struct {
		Data struct {
			CreateVoucher struct{ ID string } `json:"createVoucher"`
		} `json:"data"`
	}
	body, err := u.do(ctx, admin, `mutation($in: CreateVoucherInput!) { createVoucher(input: $in) { id } }`, map[string]any{"in": in})
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Data.CreateVoucher.ID == "" {
		return "", fmt.Errorf("create voucher: %s", body)
	}
	return out.Data.CreateVoucher.ID, nil
}

// createLongTexts stores n vouchers whose subTitle and rules are as long
// as allowed, four bytes a character: the pages the user-token probes
// ask for are then the costliest a catalog can make them.
func (u *legitUser) createLongTexts(ctx context.Context, admin string, n int) error {
	text := strings.Repeat("\U0001F600", domain.MaxTextLen)
	for i := range n {
		in := map[string]any{"shopId": "2", "title": fmt.Sprint("long ", i), "subTitle": text, "rules": text,
			"payValue": 100, "actualValue": 1000, "type": "NORMAL"}
		body, err := u.do(ctx, admin, `mutation($in: CreateVoucherInput!) { createVoucher(input: $in) { id } }`, map[string]any{"in": in})
		if err != nil {
			return err
		}
		if !bytes.Contains(body, []byte(`"id"`)) {
			return fmt.Errorf("create a voucher of long texts: %s", body)
		}
	}
	return nil
}

func (u *legitUser) do(ctx context.Context, token, query string, vars map[string]any) ([]byte, error) {
	b, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.base+"/query", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// sample sends n requests, one at a time, and returns their latencies.
func (u *legitUser) sample(ctx context.Context, voucher string, n int) (sample, error) {
	// Tokens are made before the clock starts: they are the client's cost.
	grabTokens := make([]string, (n+1)/2)
	for i := range grabTokens {
		tok, err := u.tokens.Issue(auth.Identity{UserID: u.next, Role: auth.RoleUser}, 24*time.Hour)
		if err != nil {
			return sample{}, err
		}
		grabTokens[i] = tok
		u.next++
	}
	pageToken := grabTokens[0]
	var all, queries, grabs []time.Duration
	s := sample{Requests: n}
	for i := range n {
		var (
			query string
			vars  = map[string]any{"v": voucher}
			token = pageToken
			want  = []byte(`"remaining"`)
		)
		if i%2 == 1 {
			query, token, want = legitGrabQuery, grabTokens[i/2], []byte(`"code":"OK"`)
			vars["r"] = "flood-" + strconv.Itoa(i) + "-" + token[len(token)-8:]
		} else {
			query = legitVoucherQuery
		}
		began := time.Now()
		body, err := u.do(ctx, token, query, vars)
		took := time.Since(began)
		if err != nil {
			return s, err
		}
		if !bytes.Contains(body, want) {
			s.Refused++
			if s.RefusedAs == nil {
				s.RefusedAs = map[string]int{}
			}
			s.RefusedAs[answerCode(body[:min(len(body), 4096)])]++
		}
		all = append(all, took)
		if i%2 == 1 {
			grabs = append(grabs, took)
		} else {
			queries = append(queries, took)
		}
	}
	s.P50, s.P99, s.Max = quantile(all, 0.5), quantile(all, 0.99), quantile(all, 1)
	s.QueryP99, s.GrabP99 = quantile(queries, 0.99), quantile(grabs, 0.99)
	return s, nil
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// printFlood prints, per probe and variant, the medians over the rounds
// and the ratio's spread.
func printFlood(w io.Writer, o floodOptions, results []floodResult) {
	fmt.Fprintf(w, "\nservices pinned to CPU %q (GOMAXPROCS %d) with their redis-servers; the legitimate user (%s) and %d flooding clients (%s, nice %d) on CPU %q; %d legitimate requests per sample; %d rounds; Go %s\n",
		o.serviceCPU, o.serviceProcs, legitFrom, o.clients, floodFrom, o.floodNice, o.clientCPU, o.legit, o.rounds, runtime.Version())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(w, "load average at the end: %s", b)
	}
	if len(o.env) > 0 {
		fmt.Fprintf(w, "every service's environment added: %v\n", o.env)
	}
	for _, v := range o.variants {
		if len(v.env) > 0 {
			fmt.Fprintf(w, "%s: %v\n", v.name, v.env)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| probe | service | flood req/s | service cores under the flood | service CPU per flood request | legit p99 quiet → flooded | ratio median [min–max] | legit p50 quiet → flooded | service core / client core busy (softirq) while flooded | legit refused | flood answers (last round) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|---|---|---|---:|---|")
	for _, p := range o.probes {
		for _, v := range o.variants {
			var rs []floodResult
			for _, r := range results {
				if r.Probe == p.name && r.Variant == v.name {
					rs = append(rs, r)
				}
			}
			if len(rs) > 0 {
				fmt.Fprintln(w, summaryRow(p, v, rs))
			}
		}
	}
}

// summaryRow is one probe on one variant over the rounds: medians, and
// the ratio's range.
func summaryRow(p floodProbe, v variant, rs []floodResult) string {
	med := func(f func(floodResult) float64) float64 {
		vals := make([]float64, len(rs))
		for i, r := range rs {
			vals[i] = f(r)
		}
		slices.Sort(vals)
		return vals[len(vals)/2]
	}
	d := func(f func(floodResult) time.Duration) time.Duration {
		return time.Duration(med(func(r floodResult) float64 { return float64(f(r)) }))
	}
	ratios := make([]float64, len(rs))
	refused := 0
	for i, r := range rs {
		ratios[i] = r.ratio()
		refused += r.Flood.Refused
	}
	slices.Sort(ratios)
	last := rs[len(rs)-1]
	answers := outcomeText(last.Outcomes)
	if last.Errors > 0 {
		answers += fmt.Sprintf("; %d errors (%s)", last.Errors, last.LastError)
	}
	cpu := usec(d(func(r floodResult) time.Duration { return r.CPUPerFloodRequest }))
	if p.name == idleProbe {
		cpu = "–"
	}
	cores := fmt.Sprintf("%.0f%% (%.0f%%) / %.0f%% (%.0f%%)",
		100*med(func(r floodResult) float64 { return r.ServiceCore.Busy }), 100*med(func(r floodResult) float64 { return r.ServiceCore.Softirq }),
		100*med(func(r floodResult) float64 { return r.ClientCore.Busy }), 100*med(func(r floodResult) float64 { return r.ClientCore.Softirq }))
	return fmt.Sprintf("| %s | %s | %.0f | %.2f | %s | %s → %s | %.2f× [%.2f–%.2f] | %s → %s | %s | %d | %s |",
		p.name, v.name, med(func(r floodResult) float64 { return r.FloodPerSecond }), med(func(r floodResult) float64 { return r.ServiceCores }), cpu,
		msec(d(func(r floodResult) time.Duration { return r.Quiet.P99 })), msec(d(func(r floodResult) time.Duration { return r.Flood.P99 })),
		ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1],
		msec(d(func(r floodResult) time.Duration { return r.Quiet.P50 })), msec(d(func(r floodResult) time.Duration { return r.Flood.P50 })),
		cores, refused, answers)
}

// msec is a latency in milliseconds, to 10 µs.
func msec(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// usec is a CPU time in microseconds.
func usec(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1000) }
