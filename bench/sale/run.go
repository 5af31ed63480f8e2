// Package sale runs a flash sale against a target from outside, as its
// users would, and judges it: how fast it answered, what it answered,
// and whether what it answered and stored keeps the service's promises.
// cmd/seckill-bench is its command line.
package sale

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"flashsale/domain"
	"flashsale/internal/auth"
)

// Scenarios.
const (
	// SoldOut: a small stock, most grabs arrive after it is gone.
	SoldOut = "sold-out"
	// InStock: a unit for every grab, one attempt per user.
	InStock = "in-stock"
	// Mixed: stock for half the users, two attempts each.
	Mixed = "mixed"
	// Cluster: Mixed, round robin over several nodes.
	Cluster = "cluster"
	// RedPacket: grabRedPacket on red packets of half as many packets as
	// users in all, two attempts each; as few red packets as the
	// service's largest allows (createRedPackets).
	RedPacket = "red-packet"
)

// Scenarios lists every scenario by name.
var Scenarios = []string{SoldOut, InStock, Mixed, Cluster, RedPacket, Queue}

// Config is one sale.
type Config struct {
	Endpoint Endpoint
	Scenario string
	// Users, Attempts: each of Users distinct users grabs Attempts times.
	Users, Attempts int
	// Stock is the units on sale (red packets: packets); 0 takes the
	// scenario's default.
	Stock int
	// PerUserLimit defaults to 1.
	PerUserLimit int
	// Segments, when above zero, splits the service's voucher into this
	// many stock segments (its createVoucher's segments).
	Segments int
	// Concurrency is the number of requests in flight at most.
	Concurrency int
	// Rate, when above zero, fires requests at this many per second
	// instead of as fast as Concurrency allows.
	Rate int
	// MaxDuration stops the attack early (default 20 s).
	MaxDuration time.Duration
	// Secret is the HS256 JWT secret of the target.
	Secret string
	// RequestIDs sends each attempt's requestId (the service's
	// idempotency key) with the grab.
	RequestIDs bool
	// Tickets makes the service's voucher require grab tickets: every user
	// asks seckillTicket for one before the attack, and sends it with each
	// grab. Challenge "POW" adds a proof of work before each ticket, solved
	// here (gate.Solve).
	Tickets   bool
	Challenge string
	// LagTimeout bounds the wait for orders to reach the database
	// (default 60 s).
	LagTimeout time.Duration
	// Progress, when set, gets a live progress line.
	Progress io.Writer
	// Queue shapes the waiting-room scenario (Queue); Users is Early +
	// Late there, and MaxDuration counts from the sale's begin.
	Queue QueueOptions
	// OnAttack, when set, is called as the attack starts (after users,
	// tokens and the voucher are ready), e.g. to start a CPU profile of
	// the target.
	OnAttack func()
}

// Defaults fills in the scenario's stock and attempts where unset.
func (c *Config) Defaults() error {
	if c.Users < 1 && c.Scenario != Queue {
		return fmt.Errorf("users must be at least 1")
	}
	if c.Concurrency < 1 {
		c.Concurrency = 64
	}
	if c.PerUserLimit < 1 {
		c.PerUserLimit = 1
	}
	if c.MaxDuration <= 0 {
		c.MaxDuration = 20 * time.Second
	}
	if c.LagTimeout <= 0 {
		c.LagTimeout = 60 * time.Second
	}
	defaultAttempts := 2
	switch c.Scenario {
	case SoldOut:
		if c.Stock == 0 {
			c.Stock = max(1, c.Users/100)
		}
		defaultAttempts = 1
	case InStock:
		defaultAttempts = 1
		if c.Attempts == 0 {
			c.Attempts = 1
		}
		if c.Stock == 0 {
			c.Stock = c.Users * min(c.Attempts, c.PerUserLimit)
		}
	case Mixed, Cluster, RedPacket:
		if c.Stock == 0 {
			c.Stock = max(1, c.Users/2)
		}
	case Queue:
		c.Queue.defaults(c.Users)
		if c.Users = c.Queue.Early + c.Queue.Late; c.Users < 1 {
			return fmt.Errorf("scenario queue needs early or late users")
		}
		if c.Stock == 0 {
			c.Stock = max(1, c.Users/20)
		}
		defaultAttempts = 1
	default:
		return fmt.Errorf("unknown scenario %q (one of %v)", c.Scenario, Scenarios)
	}
	if c.Attempts < 1 {
		c.Attempts = defaultAttempts
	}
	if c.Scenario == Cluster && len(c.Endpoint.URLs) < 2 {
		return fmt.Errorf("scenario cluster needs two or more URLs of one cluster")
	}
	if len(c.Endpoint.URLs) == 0 {
		return fmt.Errorf("no URL for %s", c.Endpoint.Name)
	}
	return nil
}

// DurablePerSecond is the sale's OK orders over the time from the first
// request until the database held every one of them (the attack and the
// DB lag): what a shop sees, since an order counts once it is stored. A
// design that answers fast and writes later is charged for the later;
// false when the lag was not measured or nothing sold.
func (r *Report) DurablePerSecond() (float64, bool) {
	if r.DBLag == nil || r.OK == 0 {
		return 0, false
	}
	return float64(r.OK) / (r.Elapsed + *r.DBLag).Seconds(), true
}

// Report is what a sale showed.
type Report struct {
	Target   string `json:"target"`
	Scenario string `json:"scenario"`
	// Round numbers the reports of a run that ran its scenarios more than
	// once over the targets (seckill-bench --rounds); 0 or 1 otherwise.
	Round int `json:"round,omitempty"`
	// SaleID is the voucher's id, or the red packets' ids joined by
	// commas.
	SaleID   string        `json:"saleId"`
	Users    int           `json:"users"`
	Attempts int           `json:"attempts"`
	Expect   Expect        `json:"expect"`
	Requests int           `json:"requests"`
	Elapsed  time.Duration `json:"elapsed"`
	// RPS is answers per second over the attack, first request to last
	// answer.
	RPS     float64     `json:"rps"`
	Latency Latencies   `json:"latency"`
	Codes   []CodeCount `json:"codes"`
	OK      int         `json:"ok"`
	// Remaining is the target's stock answer after the sale.
	Remaining *int `json:"remaining,omitempty"`
	// Rows is how many rows of the sale the database held when checked.
	Rows *int `json:"rows,omitempty"`
	// DBLag is from the last OK answer to the moment the database held a
	// row for every OK; nil when not measured.
	DBLag *time.Duration `json:"dbLag,omitempty"`
	// PIDs and CPUPerRequest: the target processes' user+system time over
	// the attack (all local nodes of a cluster together) divided by the
	// requests.
	PIDs          []int          `json:"pids,omitempty"`
	CPUPerRequest *time.Duration `json:"cpuPerRequest,omitempty"`
	// GeneratorCPUPerRequest is this process's own CPU time (the load
	// generator's, and the checks' running alongside) per request: on a
	// shared machine it is taken from the target.
	GeneratorCPUPerRequest *time.Duration `json:"generatorCpuPerRequest,omitempty"`
	// DBCPUPerRequest is the CPU time of the local Postgres server's
	// processes over the attack per request (when the target's database
	// is on this machine): the orders it stores meanwhile, and the tool's
	// own row counts every 20 ms.
	DBCPUPerRequest *time.Duration `json:"dbCpuPerRequest,omitempty"`
	// MachineCPUPerRequest is the busy time of all this machine's cores
	// over the attack per request: target, Redis, Postgres, the load
	// generator and anything else running. On a saturated machine the
	// rps is about cores / this.
	MachineCPUPerRequest *time.Duration `json:"machineCpuPerRequest,omitempty"`
	// RSSBytes is the target processes' resident memory after the
	// attack, together.
	RSSBytes int64 `json:"rssBytes,omitempty"`
	// Redis's CPU time and commands over the attack per request.
	RedisCPUPerRequest      *time.Duration `json:"redisCpuPerRequest,omitempty"`
	RedisCommandsPerRequest *float64       `json:"redisCommandsPerRequest,omitempty"`
	// RedisCommands are the most called commands per request, those run
	// inside scripts included.
	RedisCommands []CommandRate `json:"redisCommands,omitempty"`
	Violations    []Violation   `json:"violations"`
	Timeline      []Bucket      `json:"timeline"`
	Notes         []string      `json:"notes,omitempty"`
	// Queue is the waiting room's figures (scenario queue only).
	Queue *QueueReport `json:"queue,omitempty"`
	// Outcomes are every answer, for checks and plots; not in JSON.
	Outcomes []Outcome `json:"-"`
	// Observed is what the stores said, as checked.
	Observed Observed `json:"-"`
}

// Run runs one sale: creates it, attacks it, then checks it. An error is
// a sale that could not be run; broken promises are Report.Violations.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Defaults(); err != nil {
		return nil, err
	}
	if cfg.Scenario == Queue {
		return runQueue(ctx, cfg)
	}
	ep := cfg.Endpoint
	// As many idle connections kept as requests run at once (the tickets'
	// workers): with net/http's default of two, every other request of a
	// worker opened a new connection, which is neither what a shopper's
	// browser does nor welcome to a per-address connection rate.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = cfg.Concurrency
	a := api{ep: ep, client: &http.Client{Timeout: 10 * time.Second, Transport: transport}}
	defer transport.CloseIdleConnections()
	tokens := auth.NewTokens(cfg.Secret)
	admin, err := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, time.Hour)
	if err != nil {
		return nil, err
	}
	rep := &Report{Target: ep.Name, Scenario: cfg.Scenario, Users: cfg.Users, Attempts: cfg.Attempts,
		Expect: Expect{Stock: cfg.Stock, PerUserLimit: cfg.PerUserLimit}}
	// Users nobody used before on this target: their limits start empty.
	// The red packets' creators are the ids just below them.
	base := int64(rand.IntN(1<<30)) + 1<<31
	redPacket := cfg.Scenario == RedPacket
	// saleIDs: user u grabs saleIDs[u % len(saleIDs)]; watchID is what
	// the row watch selects by.
	var saleIDs []string
	var watchID string
	if redPacket {
		rep.Expect.TotalCents = int64(cfg.Stock) * 100
		if saleIDs, err = a.createRedPackets(ctx, tokens, base, cfg.Stock); err != nil {
			return nil, err
		}
		rep.SaleID, watchID = strings.Join(saleIDs, ","), "{"+strings.Join(saleIDs, ",")+"}"
		if len(saleIDs) > 1 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%d red packets (the service allows at most %d packets in one), user u grabs red packet u mod %d",
				len(saleIDs), domain.RedPacketMaxCount, len(saleIDs)))
		}
	} else {
		if rep.SaleID, err = a.createVoucher(ctx, admin, cfg.Stock, cfg.PerUserLimit, cfg.Segments, cfg.Tickets, cfg.Challenge); err != nil {
			return nil, err
		}
		saleIDs, watchID = []string{rep.SaleID}, rep.SaleID
	}
	userTokens := make([]string, cfg.Users)
	for i := range userTokens {
		if userTokens[i], err = tokens.Issue(auth.Identity{UserID: base + int64(i), Role: auth.RoleUser}, time.Hour); err != nil {
			return nil, err
		}
	}
	var tickets []string
	if cfg.Tickets && !redPacket && ep.API == GraphQL {
		began := time.Now()
		if tickets, err = a.tickets(ctx, rep.SaleID, userTokens, cfg.Challenge, cfg.Concurrency); err != nil {
			return nil, err
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d grab tickets taken before the attack in %s (challenge %q)",
			len(tickets), time.Since(began).Round(time.Millisecond), cfg.Challenge))
	}
	targets := make([]vegeta.Target, 0, cfg.Users*cfg.Attempts)
	runTag := strconv.FormatInt(base, 36)
	for i := range cfg.Users * cfg.Attempts {
		user, attempt := i%cfg.Users, i/cfg.Users
		url := ep.URLs[i%len(ep.URLs)]
		t := a.grabTarget(url, saleIDs[user%len(saleIDs)], userTokens[user], user, attempt, redPacket, cfg.RequestIDs, runTag)
		if tickets != nil {
			t.Body = ticketBody(rep.SaleID, tickets[user], cfg.RequestIDs, fmt.Sprintf("%s-%d-%d", runTag, user, attempt))
		}
		targets = append(targets, t)
	}

	var rowCounter *rowWatch
	if ep.DatabaseURL != "" && !ep.NoStock {
		if rowCounter, err = watchRows(ctx, ep.DatabaseURL, watchID, redPacket); err != nil {
			return nil, err
		}
		defer rowCounter.close()
	}
	meter := startMeters(ctx, ep, rep)
	outs, elapsed := attack(cfg, targets)
	meter.stop(ctx, rep, len(outs))
	if rowCounter != nil {
		rowCounter.attackOver()
	}
	for i := range outs {
		outs[i].User += int(base)
	}
	rep.Outcomes = outs
	rep.Requests, rep.Elapsed = len(outs), elapsed
	if elapsed > 0 {
		rep.RPS = float64(len(outs)) / elapsed.Seconds()
	}
	lat := make([]time.Duration, len(outs))
	for i, o := range outs {
		lat[i] = o.Latency
		if o.Code == "OK" {
			rep.OK++
		}
	}
	rep.Latency = Summarize(lat)
	rep.Codes = CountCodes(outs)
	rep.Timeline = Timeline(outs, TimelineWidth(elapsed))
	if len(outs) < len(targets) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("stopped after %s: %d of %d requests sent", cfg.MaxDuration, len(outs), len(targets)))
	}

	var stock func() (int, error)
	if !ep.NoStock && !redPacket {
		stock = func() (int, error) { return a.remaining(ctx, admin, rep.SaleID) }
	}
	observe(ctx, rep, outs, stock, rowCounter, cfg.LagTimeout)
	return rep, nil
}

// observe reads what the stores say after a sale into rep (the live stock
// when stock is set, the stored rows when rows is, failures as notes) and
// checks the outcomes against it.
func observe(ctx context.Context, rep *Report, outs []Outcome, stock func() (int, error), rows *rowWatch, lagTimeout time.Duration) {
	var obs Observed
	if stock != nil {
		if n, err := stock(); err != nil {
			rep.Notes = append(rep.Notes, "stock query failed: "+err.Error())
		} else {
			rep.Remaining, obs.Remaining = &n, &n
		}
	}
	if rows != nil {
		stored, lag, err := rows.wait(ctx, outs, lagTimeout)
		if err != nil {
			rep.Notes = append(rep.Notes, "database check failed: "+err.Error())
		} else {
			obs.Rows = stored
			n := len(stored)
			rep.Rows, rep.DBLag = &n, lag
		}
	}
	rep.Observed = obs
	rep.Violations = append([]Violation{}, Check(outs, rep.Expect, obs)...)
}

// attack fires every target once and returns the outcomes.
func attack(cfg Config, targets []vegeta.Target) ([]Outcome, time.Duration) {
	var next atomic.Int64
	targeter := func(t *vegeta.Target) error {
		i := next.Add(1) - 1
		if i >= int64(len(targets)) {
			return vegeta.ErrNoTargets
		}
		*t = targets[i]
		return nil
	}
	c := uint64(cfg.Concurrency)
	attacker := vegeta.NewAttacker(
		vegeta.Workers(c), vegeta.MaxWorkers(c),
		vegeta.Connections(cfg.Concurrency), vegeta.MaxConnections(cfg.Concurrency),
		vegeta.Timeout(10*time.Second), vegeta.KeepAlive(true),
	)
	pacer := vegeta.Pacer(vegeta.ConstantPacer{})
	if cfg.Rate > 0 {
		pacer = vegeta.ConstantPacer{Freq: cfg.Rate, Per: time.Second}
	}
	outs := make([]Outcome, 0, len(targets))
	var ok atomic.Int64
	var done atomic.Int64
	start := time.Now()
	if cfg.OnAttack != nil {
		cfg.OnAttack()
	}
	stopProgress := progress(cfg, len(targets), start, &done, &ok)
	var last time.Time
	for res := range attacker.Attack(targeter, pacer, cfg.MaxDuration, cfg.Endpoint.Name) {
		if res.Error == vegeta.ErrNoTargets.Error() {
			continue
		}
		o := Outcome{Sent: res.Timestamp, Latency: res.Latency}
		o.User, o.Attempt, _ = userAttempt(res.URL)
		if res.Code == 0 {
			o.Code = LabelTransport
		} else {
			o.Code, o.OrderID, o.AmountCents = ParseAnswer(res.Body)
		}
		if o.Code == "OK" {
			ok.Add(1)
		}
		if end := res.End(); end.After(last) {
			last = end
		}
		outs = append(outs, o)
		done.Add(1)
	}
	stopProgress()
	if len(outs) == 0 {
		return outs, 0
	}
	first := outs[0].Sent
	for _, o := range outs {
		if o.Sent.Before(first) {
			first = o.Sent
		}
	}
	sort.Slice(outs, func(i, j int) bool { return outs[i].Sent.Before(outs[j].Sent) })
	return outs, last.Sub(first)
}

// progress prints a live line until the returned func is called: a bar
// redrawn in place (\r) on a terminal, else a plain line a second, so
// that a log or a pipe gets readable lines, not one line of carriage
// returns.
func progress(cfg Config, total int, start time.Time, done, ok *atomic.Int64) func() {
	if cfg.Progress == nil {
		return func() {}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	every := 250 * time.Millisecond
	print := func(final bool) {
		n := done.Load()
		el := time.Since(start)
		fmt.Fprintf(cfg.Progress, "%s %s: %d/%d  OK %d  %.0f rps  %.1fs\n",
			cfg.Endpoint.Name, cfg.Scenario, n, total, ok.Load(), float64(n)/el.Seconds(), el.Seconds())
	}
	if isTerminal(cfg.Progress) {
		print = bar(cfg, total, start, done, ok)
	} else {
		every = time.Second
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				print(true)
				return
			case <-t.C:
				print(false)
			}
		}
	}()
	return func() { close(stop); wg.Wait() }
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// bar is progress's printer for a terminal: one line redrawn in place.
func bar(cfg Config, total int, start time.Time, done, ok *atomic.Int64) func(final bool) {
	return func(final bool) {
		n := done.Load()
		el := time.Since(start)
		width := 30
		filled := int(float64(width) * float64(n) / float64(max(total, 1)))
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = '.'
			if i < filled {
				bar[i] = '#'
			}
		}
		end := "\r"
		if final {
			end = "\n"
		}
		fmt.Fprintf(cfg.Progress, "\r%-9s %-10s [%s] %d/%d  OK %d  %.0f rps  %.1fs   %s",
			cfg.Endpoint.Name, cfg.Scenario, bar, n, total, ok.Load(), float64(n)/el.Seconds(), el.Seconds(), end)
	}
}

// meters measure the target's CPU and Redis over the attack.
type meters struct {
	pids    []int
	self0   time.Duration
	selfOK  bool
	cpu0    time.Duration
	cpuOK   bool
	rdb     *redis.Client
	redis0  redisCounters
	redisOK bool
	db0     map[int]PostgresProc
	dbName  string
	mach0   time.Duration
	machOK  bool
}

func startMeters(ctx context.Context, ep Endpoint, rep *Report) *meters {
	m := &meters{}
	self0, err := CPUTime(os.Getpid())
	m.self0, m.selfOK = self0, err == nil
	mach0, err := MachineCPU()
	m.mach0, m.machOK = mach0, err == nil
	if ep.DatabaseURL != "" && isLocal(ep.DatabaseURL) {
		if u, err := url.Parse(ep.DatabaseURL); err == nil {
			m.dbName = strings.TrimPrefix(u.Path, "/")
			m.db0 = PostgresProcs()
		}
	}
	if ep.PID != 0 {
		m.pids = []int{ep.PID}
	} else {
		for _, u := range ep.URLs {
			if pid := PIDByURL(u); pid != 0 && !slices.Contains(m.pids, pid) {
				m.pids = append(m.pids, pid)
			}
		}
	}
	if len(m.pids) > 0 {
		var err error
		m.cpu0, err = cpuTimes(m.pids)
		m.cpuOK = err == nil
	}
	if !m.cpuOK {
		rep.Notes = append(rep.Notes, "CPU per request not measured: no local process found for "+ep.URLs[0])
	}
	if ep.RedisURL != "" {
		if opt, err := redis.ParseURL(ep.RedisURL); err == nil {
			m.rdb = redis.NewClient(opt)
			var err error
			m.redis0, err = readRedis(ctx, m.rdb)
			m.redisOK = err == nil
		}
	}
	return m
}

func (m *meters) stop(ctx context.Context, rep *Report, requests int) {
	if requests == 0 {
		return
	}
	if self, err := CPUTime(os.Getpid()); err == nil && m.selfOK {
		d := (self - m.self0) / time.Duration(requests)
		rep.GeneratorCPUPerRequest = &d
	}
	if mach, err := MachineCPU(); err == nil && m.machOK {
		d := (mach - m.mach0) / time.Duration(requests)
		rep.MachineCPUPerRequest = &d
	}
	var dbOthers time.Duration
	if len(m.db0) > 0 {
		u := PostgresDelta(m.db0, PostgresProcs(), m.dbName)
		d := u.Own / time.Duration(requests)
		rep.DBCPUPerRequest = &d
		// A shared Postgres serves other clients meanwhile: their backends
		// are left out, and the report says they were there.
		if o := u.Others / time.Duration(requests); o >= time.Microsecond {
			dbOthers = u.Others
			rep.Notes = append(rep.Notes, fmt.Sprintf("db cpu/req counts database %s's backends and the server's background processes; "+
				"backends of other databases used %s/req meanwhile (another client of the same Postgres), not counted", m.dbName, o))
		}
		if u.Exited > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("db cpu/req misses %d backends of %s that ended during the attack: too low", u.Exited, m.dbName))
		}
	}
	if m.cpuOK {
		if cpu, err := cpuTimes(m.pids); err == nil {
			d := (cpu - m.cpu0) / time.Duration(requests)
			rep.PIDs, rep.CPUPerRequest = m.pids, &d
		}
		for _, pid := range m.pids {
			if n, err := RSS(pid); err == nil {
				rep.RSSBytes += n
			}
		}
	}
	if m.rdb != nil {
		defer m.rdb.Close()
		if c, err := readRedis(ctx, m.rdb); err == nil && m.redisOK {
			d := (c.cpu - m.redis0.cpu) / time.Duration(requests)
			// The two INFO calls of this measurement are not the target's.
			n := float64(c.commands-m.redis0.commands-1) / float64(requests)
			rep.RedisCPUPerRequest, rep.RedisCommandsPerRequest = &d, &n
			rep.RedisCommands = topCommands(m.redis0.calls, c.calls, requests, 6)
		}
	}
	// The machine's busy time less what the measured processes used: other
	// programs (another benchmark, a build, other clients of the same
	// Postgres) and the kernel's interrupt work. Over a fifth, the figures
	// above were taken on a disturbed machine, and the report says so.
	if rep.MachineCPUPerRequest != nil {
		known := dbOthers / time.Duration(requests)
		for _, d := range []*time.Duration{rep.GeneratorCPUPerRequest, rep.CPUPerRequest, rep.DBCPUPerRequest, rep.RedisCPUPerRequest} {
			if d != nil {
				known += *d
			}
		}
		if mach := *rep.MachineCPUPerRequest; mach > 0 && mach-known > mach/5 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("machine cpu/req %s: %s/req (%.0f%%) went to processes this run did not start or measure "+
				"(other programs, the kernel's interrupts); CPU figures taken on a busy machine", mach, mach-known, 100*float64(mach-known)/float64(mach)))
		}
	}
}

// rowWatch counts a sale's rows in the database from before the attack,
// so that the moment they are all there is seen even when it comes before
// the attack ends: every rowPoll, but while the attack runs at most one
// twentieth of the time (a count over a table that grows by tens of
// thousands of rows takes milliseconds, and polling it every rowPoll
// took CPU from a target that stores its orders during the attack, not
// from one that stores them after).
type rowWatch struct {
	// attacking is set until attackOver.
	attacking      atomic.Bool
	db             *sql.DB
	countQuery, id string
	redPacket      bool
	stop           chan struct{}
	done           chan struct{}
	mu             sync.Mutex
	samples        []rowSample
	err            error
}

type rowSample struct {
	at    time.Time
	count int
}

const rowPoll = 20 * time.Millisecond

// watchRows counts the sale's rows: saleID is the voucher's id, or the
// red packets' ids as a Postgres array ("{1,2}").
func watchRows(ctx context.Context, dbURL, saleID string, redPacket bool) (*rowWatch, error) {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, err
	}
	w := &rowWatch{db: db, id: saleID, redPacket: redPacket, stop: make(chan struct{}), done: make(chan struct{}),
		countQuery: `SELECT count(*) FROM tb_voucher_order WHERE voucher_id = $1`}
	if redPacket {
		w.countQuery = `SELECT count(*) FROM tb_red_packet_grab WHERE red_packet_id = ANY($1::bigint[])`
	}
	w.attacking.Store(true)
	go w.run(ctx)
	return w, nil
}

// attackOver lets the watch poll every rowPoll again.
func (w *rowWatch) attackOver() { w.attacking.Store(false) }

// pollShare is the most of one core's time the counts may take while the
// attack runs.
const pollShare = 20

func (w *rowWatch) run(ctx context.Context) {
	defer close(w.done)
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		var n int
		began := time.Now()
		err := w.db.QueryRowContext(ctx, w.countQuery, w.id).Scan(&n)
		next := rowPoll
		if w.attacking.Load() {
			next = max(rowPoll, pollShare*time.Since(began))
		}
		t.Reset(next)
		w.mu.Lock()
		if err != nil {
			w.err = fmt.Errorf("count rows: %w", err)
		} else {
			w.samples = append(w.samples, rowSample{time.Now(), n})
		}
		w.mu.Unlock()
		if err != nil {
			return
		}
		select {
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// complete returns when the first sample with at least n rows was taken.
func (w *rowWatch) complete(n int) (time.Time, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if s.count >= n {
			return s.at, true, nil
		}
	}
	return time.Time{}, false, w.err
}

// stopPolling stops the sampling and waits for it; idempotent.
func (w *rowWatch) stopPolling() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *rowWatch) close() {
	w.stopPolling()
	w.db.Close()
}

// wait waits until the database holds a row for every OK answer (or
// timeout), then returns the sale's rows and how long after the last OK
// answer they were all there (to within rowPoll once the attack is over,
// to within the poll interval of the moment while it ran).
func (w *rowWatch) wait(ctx context.Context, outs []Outcome, timeout time.Duration) ([]Row, *time.Duration, error) {
	var lastOK time.Time
	ok := 0
	for _, o := range outs {
		if o.Code == "OK" {
			ok++
			if end := o.Sent.Add(o.Latency); end.After(lastOK) {
				lastOK = end
			}
		}
	}
	deadline := time.Now().Add(timeout)
	var lag *time.Duration
	for {
		at, found, err := w.complete(ok)
		if err != nil {
			return nil, nil, err
		}
		if found {
			if ok > 0 {
				d := max(at.Sub(lastOK), 0)
				lag = &d
			}
			break
		}
		if time.Now().After(deadline) {
			break // the checker reports the missing rows
		}
		time.Sleep(rowPoll)
	}
	w.stopPolling()
	rows, err := readRows(ctx, w.db, w.id, w.redPacket)
	return rows, lag, err
}

func readRows(ctx context.Context, db *sql.DB, saleID string, redPacket bool) ([]Row, error) {
	q := `SELECT id::text, user_id, status NOT IN (4, 6), 0 FROM tb_voucher_order WHERE voucher_id = $1`
	if redPacket {
		q = `SELECT red_packet_id::text || ':' || seq::text, user_id, true, amount_cents FROM tb_red_packet_grab WHERE red_packet_id = ANY($1::bigint[])`
	}
	rs, err := db.QueryContext(ctx, q, saleID)
	if err != nil {
		return nil, fmt.Errorf("read rows: %w", err)
	}
	defer rs.Close()
	rows := []Row{}
	for rs.Next() {
		var r Row
		if err := rs.Scan(&r.ID, &r.User, &r.Live, &r.AmountCents); err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, errors.Join(rs.Err())
}

// CommandRate is how often one Redis command ran per request.
type CommandRate struct {
	Command    string  `json:"command"`
	PerRequest float64 `json:"perRequest"`
}

// topCommands returns the n commands called most between before and
// after, per request.
func topCommands(before, after map[string]int64, requests, n int) []CommandRate {
	var rates []CommandRate
	for cmd, calls := range after {
		if d := calls - before[cmd]; d > 0 && cmd != "info" {
			rates = append(rates, CommandRate{cmd, float64(d) / float64(requests)})
		}
	}
	sort.Slice(rates, func(i, j int) bool {
		if rates[i].PerRequest != rates[j].PerRequest {
			return rates[i].PerRequest > rates[j].PerRequest
		}
		return rates[i].Command < rates[j].Command
	})
	return rates[:min(n, len(rates))]
}
