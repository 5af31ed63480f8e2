package sale

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/persistence"
	"flashsale/usecase/gate"
)

// Queue is the waiting-room scenario: a voucher sold through a waiting
// room, Early users joining before it opens and Late ones after, one
// small wave at a time; every user waits for their turn (most polling
// queuePlace, a sample subscribed to queueChanged, as a page would) and
// grabs with the admission's ticket.
const Queue = "queue"

// QueueOptions shape the waiting-room scenario; zero values take the
// defaults.
type QueueOptions struct {
	// Early users join before the room opens, Late ones after (default:
	// a quarter of Config.Users, and the rest).
	Early, Late int
	// AdmitPerSecond and MaxActive are the room's (default: the
	// service's, 100 and 1000).
	AdmitPerSecond, MaxActive int
	// Subscribers follow their place over a websocket (queueChanged)
	// instead of polling it, sampled evenly over the users (default 200; the service's WS_MAX_PER_IP, 256, bounds it from
	// one address; negative: none).
	Subscribers int
	// ReleaseBefore and TicketTTL must be the target's
	// TICKET_RELEASE_BEFORE and TICKET_TTL (default: the service's).
	ReleaseBefore, TicketTTL time.Duration
	// EarlyWindow is the time from the voucher's creation to the room's
	// opening, for the early joins (default 2 s plus 2 ms a user).
	EarlyWindow time.Duration
	// Wave is how many late users join at once; a wave starts when the
	// one before it was answered, so the order between waves is known
	// (default 16).
	Wave int
	// PollMin and PollMax bound a poller's interval: a quarter of the
	// place's estimated wait, jittered by a quarter either way (default
	// 500 ms and 10 s).
	PollMin, PollMax time.Duration
	// NoticeBound is the longest a waiting subscriber may take to hear
	// SOLD_OUT after the last unit sold (default 1 s).
	NoticeBound time.Duration
}

func (q *QueueOptions) defaults(users int) {
	if q.Early == 0 && q.Late == 0 {
		q.Early = users / 4
		q.Late = users - q.Early
	}
	q.AdmitPerSecond = cmp.Or(q.AdmitPerSecond, domain.AdmitPerSecondDefault)
	q.MaxActive = cmp.Or(q.MaxActive, domain.MaxActiveDefault)
	if q.Subscribers == 0 {
		q.Subscribers = 200
	}
	q.Subscribers = min(max(q.Subscribers, 0), q.Early+q.Late)
	q.ReleaseBefore = cmp.Or(q.ReleaseBefore, gate.ReleaseBeforeDefault)
	q.TicketTTL = cmp.Or(q.TicketTTL, gate.TicketTTLDefault)
	q.EarlyWindow = cmp.Or(q.EarlyWindow, 2*time.Second+time.Duration(q.Early)*2*time.Millisecond)
	q.Wave = cmp.Or(q.Wave, 16)
	q.PollMin = cmp.Or(q.PollMin, 500*time.Millisecond)
	q.PollMax = max(cmp.Or(q.PollMax, 10*time.Second), q.PollMin)
	q.NoticeBound = cmp.Or(q.NoticeBound, time.Second)
}

// QueueReport is what a waiting-room sale showed beside its grabs.
type QueueReport struct {
	Early          int `json:"early"`
	Late           int `json:"late"`
	AdmitPerSecond int `json:"admitPerSecond"`
	MaxActive      int `json:"maxActive"`
	// JoinedEarly is how many joins answered EARLY; EarlyMissed counts
	// early users whose join came after the opening (a short EarlyWindow).
	JoinedEarly int       `json:"joinedEarly"`
	EarlyMissed int       `json:"earlyMissed"`
	JoinLatency Latencies `json:"joinLatency"`
	// Open is the room's opening, Begin the sale's; the timeline counts
	// from Open.
	Open  time.Time `json:"open"`
	Begin time.Time `json:"begin"`
	// Admitted are the admissions Redis recorded ({v}:qx), by whether the
	// user joined early; nil when Redis was not read.
	Admitted      *int `json:"admitted,omitempty"`
	AdmittedEarly int  `json:"admittedEarly"`
	AdmittedLate  int  `json:"admittedLate"`
	// AdmitRate is admissions a second from the first to the last.
	AdmitRate float64 `json:"admitRate"`
	// MostOpen is the most tickets open at once, reconstructed (a lower
	// bound of the service's count).
	MostOpen int `json:"mostOpen"`
	// Wait is from a join's answer (an early one's: the opening) to its
	// admission.
	Wait Latencies `json:"wait"`
	// LastUnit is the send time of the last OK grab: the last unit sold
	// no earlier. Notice is from it to each waiting subscriber's
	// SOLD_OUT, bounded by NoticeBound.
	LastUnit    time.Time     `json:"lastUnit"`
	Notice      Notices       `json:"notice"`
	NoticeBound time.Duration `json:"noticeBound"`
	// Polls are queuePlace requests (PollErrors of them failed);
	// Subscribers followed a websocket, Fallbacks of them fell back to
	// polling.
	Polls      int `json:"polls"`
	PollErrors int `json:"pollErrors"`
	// PollErrorCodes counts the failed polls by error code.
	PollErrorCodes map[string]int `json:"pollErrorCodes,omitempty"`
	Subscribers    int            `json:"subscribers"`
	Fallbacks      int            `json:"fallbacks"`
	// Unfinished users neither bought nor heard the sale was over by the
	// deadline.
	Unfinished int           `json:"unfinished"`
	Timeline   []QueueBucket `json:"timeline"`
	// Arrivals and Admissions are what the checks judged (Admissions:
	// Redis's record, nil when not read); not in JSON.
	Arrivals   []Arrival         `json:"-"`
	Admissions map[int]time.Time `json:"-"`
}

// QueueBucket is one slice of a waiting-room sale's timeline.
type QueueBucket struct {
	// At is the slice's start from the room's opening.
	At             time.Duration `json:"at"`
	AdmitPerSecond float64       `json:"admitPerSecond"`
	OKPerSecond    float64       `json:"okPerSecond"`
	// Waiting is the line's length the service last reported in the
	// slice (a place's "waiting"); -1 when nobody heard it.
	Waiting int `json:"waiting"`
}

// place is a QueuePlace as the tool reads it.
type place struct {
	State           string  `json:"state"`
	Position        *int    `json:"position"`
	Waiting         int     `json:"waiting"`
	EstimatedWaitMs *int    `json:"estimatedWaitMs"`
	Ticket          *string `json:"ticket"`
}

const placeFields = `state position waiting estimatedWaitMs ticket`

// A place's states (the schema's QueueState).
const (
	stateEarly    = "EARLY"
	stateAdmitted = "ADMITTED"
	stateSoldOut  = "SOLD_OUT"
	stateClosed   = "CLOSED"
)

// queueUser is one user of the run, written by its own goroutine only
// (the joiner, then the waiter) and read after both ended.
type queueUser struct {
	id         int
	token      string
	early      bool // meant to join early
	subscriber bool
	arrival    Arrival
	joined     bool
	since      time.Time // the subscription's first place
	soldOutAt  time.Time // from the subscription
	watched    bool      // followed the subscription to its end
	finished   bool
}

// queueRun is one waiting-room sale in progress.
type queueRun struct {
	cfg       Config
	q         QueueOptions
	a         api
	voucher   string
	open      time.Time
	begin     time.Time
	runTag    string
	sem       chan struct{}
	mu        sync.Mutex
	outs      []Outcome
	samples   []waitSample
	polls     atomic.Int64
	pollErrs  atomic.Int64
	errCodes  map[string]int // failed polls by code, under mu
	fallbacks atomic.Int64
	okCount   atomic.Int64
}

type waitSample struct {
	at      time.Time
	waiting int
}

// runQueue runs the waiting-room scenario.
func runQueue(ctx context.Context, cfg Config) (*Report, error) {
	ep := cfg.Endpoint
	if ep.API != GraphQL {
		return nil, fmt.Errorf("scenario %s needs the service's GraphQL API", Queue)
	}
	q := cfg.Queue
	users := q.Early + q.Late
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost, transport.MaxConnsPerHost = cfg.Concurrency, cfg.Concurrency
	defer transport.CloseIdleConnections()
	r := &queueRun{cfg: cfg, q: q, a: api{ep: ep, client: &http.Client{Timeout: 10 * time.Second, Transport: transport}},
		sem: make(chan struct{}, cfg.Concurrency), errCodes: map[string]int{}}
	tokens := auth.NewTokens(cfg.Secret)
	admin, err := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, time.Hour)
	if err != nil {
		return nil, err
	}
	rep := &Report{Target: ep.Name, Scenario: Queue, Users: users, Attempts: 1,
		Expect: Expect{Stock: cfg.Stock, PerUserLimit: 1}}
	us, err := r.users(tokens)
	if err != nil {
		return nil, err
	}

	r.open = time.Now().Add(q.EarlyWindow).Truncate(time.Millisecond)
	r.begin = r.open.Add(q.ReleaseBefore)
	if r.voucher, err = r.createRoom(ctx, admin); err != nil {
		return nil, err
	}
	rep.SaleID = r.voucher
	qr := &QueueReport{Early: q.Early, Late: q.Late, AdmitPerSecond: q.AdmitPerSecond, MaxActive: q.MaxActive,
		Open: r.open, Begin: r.begin, NoticeBound: q.NoticeBound}
	rep.Queue = qr

	var rowCounter *rowWatch
	if ep.DatabaseURL != "" {
		if rowCounter, err = watchRows(ctx, ep.DatabaseURL, r.voucher, false); err != nil {
			return nil, err
		}
		defer rowCounter.close()
	}
	meter := startMeters(ctx, ep, rep)
	started := time.Now()
	// Every user is done by the deadline: bought, heard the sale is over,
	// or gave up.
	waitCtx, cancel := context.WithDeadline(ctx, r.begin.Add(cfg.MaxDuration))
	defer cancel()
	stopProgress := r.progress(started, users)
	var waiters sync.WaitGroup
	rep.Notes = append(rep.Notes, r.arrive(waitCtx, us, &waiters)...)
	waiters.Wait()
	stopProgress()
	elapsed := time.Since(started)
	outs := r.outs
	requests := len(outs) + int(r.polls.Load()) + users
	meter.stop(ctx, rep, requests)

	for _, u := range us {
		if !u.finished {
			qr.Unfinished++
		}
	}
	if qr.Unfinished > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d users had neither bought nor heard the sale was over at the deadline (--max-duration %s after the sale's begin)", qr.Unfinished, cfg.MaxDuration))
	}
	rep.Outcomes = outs
	rep.Requests, rep.Elapsed = requests, elapsed
	rep.RPS = float64(requests) / elapsed.Seconds()
	lat := make([]time.Duration, 0, len(outs))
	for _, o := range outs {
		lat = append(lat, o.Latency)
		if o.Code == "OK" {
			rep.OK++
		}
	}
	rep.Latency = Summarize(lat)
	rep.Codes = CountCodes(outs)
	rep.Timeline = Timeline(outs, TimelineWidth(elapsed))
	rep.Notes = append(rep.Notes, "requests and rps count every join, poll and grab; latency and codes are the grabs'")

	observe(ctx, rep, outs, func() (int, error) { return r.a.remaining(ctx, admin, r.voucher) }, rowCounter, cfg.LagTimeout)
	rep.Violations = append(rep.Violations, CheckSoldExactly(rep.OK, cfg.Stock, users, rep.Observed)...)
	rep.Violations = append(rep.Violations, r.judgeQueue(ctx, rep, us)...)
	return rep, nil
}

// arrive lets the users join: the early ones, as many at once as the
// concurrency allows, then, after the opening, the later ones in waves;
// each joined user's waiter is started on waiters. Three of the last in
// line also grab without a ticket as the sale begins.
func (r *queueRun) arrive(ctx context.Context, us []*queueUser, waiters *sync.WaitGroup) (notes []string) {
	users := len(us)
	var next atomic.Int64
	var joiners sync.WaitGroup
	for range r.cfg.Concurrency {
		joiners.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= r.q.Early || ctx.Err() != nil {
					return
				}
				r.join(ctx, us[i])
				if us[i].joined {
					waiters.Go(func() { r.wait(ctx, us[i]) })
				}
			}
		})
	}
	joiners.Wait()
	if late := time.Since(r.open); late > 0 && r.q.Early > 0 {
		notes = append(notes, fmt.Sprintf("the early joins ended %s after the opening: raise --early-window", late.Round(time.Millisecond)))
	}
	sleepCtx(ctx, time.Until(r.open)+20*time.Millisecond)
	// The later ones in waves, each after the one before was answered.
	for w := r.q.Early; w < users && ctx.Err() == nil; w += r.q.Wave {
		var wave sync.WaitGroup
		for i := w; i < min(w+r.q.Wave, users); i++ {
			wave.Go(func() { r.join(ctx, us[i]) })
		}
		wave.Wait()
		for i := w; i < min(w+r.q.Wave, users); i++ {
			if us[i].joined {
				waiters.Go(func() { r.wait(ctx, us[i]) })
			}
		}
	}
	// A few of the last in line grab without a ticket as the sale
	// begins: the room must refuse them (CheckAdmittedBuyers).
	for i := max(r.q.Early, users-3); i < users; i++ {
		waiters.Go(func() {
			sleepCtx(ctx, time.Until(r.begin)+100*time.Millisecond)
			r.grab(ctx, us[i], "", -1)
		})
	}
	return notes
}

// users are the run's users, ids nobody used before on this target:
// early ones first. Subscribers are spread evenly over them (the early
// ones' order is shuffled at the opening): some are admitted, most still
// wait when the stock is gone, and the last may join after it.
func (r *queueRun) users(tokens *auth.Tokens) ([]*queueUser, error) {
	n := r.q.Early + r.q.Late
	base := int64(rand.IntN(1<<30)) + 1<<31
	r.runTag = strconv.FormatInt(base, 36)
	us := make([]*queueUser, n)
	every := max(1, n/max(r.q.Subscribers, 1))
	for i := range us {
		tok, err := tokens.Issue(auth.Identity{UserID: base + int64(i), Role: auth.RoleUser}, 2*time.Hour)
		if err != nil {
			return nil, err
		}
		sub := r.q.Subscribers > 0 && i%every == every/2 && i/every < r.q.Subscribers
		us[i] = &queueUser{id: int(base) + i, token: tok, early: i < r.q.Early, subscriber: sub}
	}
	return us, nil
}

// judgeQueue fills in the waiting room's figures and runs its checks:
// those on the admissions when Redis's record could be read, the
// notices' when the stock sold out.
func (r *queueRun) judgeQueue(ctx context.Context, rep *Report, us []*queueUser) []Violation {
	qr, outs := rep.Queue, rep.Outcomes
	var vs []Violation
	var arrivals []Arrival
	var joins []time.Duration
	for _, u := range us {
		if !u.joined {
			continue
		}
		arrivals = append(arrivals, u.arrival)
		joins = append(joins, u.arrival.Answered.Sub(u.arrival.Sent))
		if u.arrival.Early {
			qr.JoinedEarly++
		} else if u.early {
			qr.EarlyMissed++
		}
	}
	if n := len(us) - len(arrivals); n > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d users could not join (answers other than a place, retried for a second)", n))
	}
	qr.JoinLatency, qr.Arrivals = Summarize(joins), arrivals
	qr.Polls, qr.PollErrors, qr.Fallbacks = int(r.polls.Load()), int(r.pollErrs.Load()), int(r.fallbacks.Load())
	if len(r.errCodes) > 0 {
		qr.PollErrorCodes = r.errCodes
	}
	for _, o := range outs {
		if o.Code == "OK" && o.Sent.After(qr.LastUnit) {
			qr.LastUnit = o.Sent
		}
	}

	var admittedAt map[int]time.Time
	var err error
	if r.cfg.Endpoint.RedisURL == "" {
		rep.Notes = append(rep.Notes, "no --redis-url: the admissions (order, pace, open tickets, buyers) were not checked")
	} else if admittedAt, err = r.admissions(ctx, r.cfg.Endpoint.RedisURL); err != nil {
		rep.Notes = append(rep.Notes, "admissions not read: "+err.Error())
	}
	if qr.Admissions = admittedAt; admittedAt != nil {
		vs = append(vs, r.judgeAdmissions(qr, arrivals, admittedAt, outs)...)
	}
	var watchers []Watcher
	for _, u := range us {
		if u.subscriber {
			qr.Subscribers++
			if u.watched {
				watchers = append(watchers, Watcher{User: u.id, Since: u.since, SoldOutAt: u.soldOutAt})
			}
		}
	}
	switch {
	case rep.OK < r.cfg.Stock:
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d of %d units sold: the SOLD_OUT notices were not timed", rep.OK, r.cfg.Stock))
	case admittedAt != nil:
		var nvs []Violation
		qr.Notice, nvs = SoldOutNotices(watchers, admittedAt, qr.LastUnit, r.q.NoticeBound)
		vs = append(vs, nvs...)
	}
	admissions := make([]time.Time, 0, len(admittedAt))
	for _, at := range admittedAt {
		admissions = append(admissions, at)
	}
	qr.Timeline = QueueTimeline(r.open, admissions, outs, r.samples, QueueTimelineWidth(time.Since(r.open)))
	return vs
}

// judgeAdmissions runs the checks that need Redis's record of the
// admissions and fills in the report's admission figures.
func (r *queueRun) judgeAdmissions(qr *QueueReport, arrivals []Arrival, admittedAt map[int]time.Time, outs []Outcome) []Violation {
	n := len(admittedAt)
	qr.Admitted = &n
	early := map[int]bool{}
	from := map[int]time.Time{}
	for _, a := range arrivals {
		early[a.User] = a.Early
		from[a.User] = a.Answered
		if a.Early {
			from[a.User] = r.open
		}
	}
	times := make([]time.Time, 0, n)
	var waits []time.Duration
	for u, at := range admittedAt {
		times = append(times, at)
		if early[u] {
			qr.AdmittedEarly++
		} else {
			qr.AdmittedLate++
		}
		if f, ok := from[u]; ok {
			waits = append(waits, max(at.Sub(f), 0))
		}
	}
	qr.Wait = Summarize(waits)
	if len(times) > 1 {
		first, last := times[0], times[0]
		for _, t := range times {
			if t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
		if span := last.Sub(first); span > 0 {
			qr.AdmitRate = float64(len(times)-1) / span.Seconds()
		}
	}
	// Each ticket's slot: from its admission until the grab that used it
	// was sent, else until it expired.
	used := map[int]time.Time{}
	for _, o := range outs {
		if o.Code == "OK" {
			used[o.User] = o.Sent
		}
	}
	tickets := make([]Ticket, 0, n)
	for u, at := range admittedAt {
		end := at.Add(r.q.TicketTTL)
		if s, ok := used[u]; ok && s.Before(end) {
			end = s
		}
		tickets = append(tickets, Ticket{User: u, At: at, Ends: end})
	}
	var vs []Violation
	vs = append(vs, CheckAdmittedBuyers(outs, admittedAt)...)
	vs = append(vs, CheckEarlyFirst(arrivals, admittedAt)...)
	vs = append(vs, CheckArrivalOrder(arrivals, admittedAt)...)
	vs = append(vs, CheckPace(times, r.q.AdmitPerSecond)...)
	most, mvs := CheckMostOpen(tickets, r.q.MaxActive)
	qr.MostOpen = most
	return append(vs, mvs...)
}

// admissions reads Redis's record of the room's admissions: each
// admitted user's ticket expiry, less the ticket's lifetime.
func (r *queueRun) admissions(ctx context.Context, redisURL string) (map[int]time.Time, error) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	id, err := strconv.ParseInt(r.voucher, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("voucher id %q: %w", r.voucher, err)
	}
	m, err := rdb.HGetAll(ctx, persistence.AdmissionsKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("read admissions: %w", err)
	}
	out := make(map[int]time.Time, len(m))
	for k, v := range m {
		u, err1 := strconv.Atoi(k)
		ms, err2 := strconv.ParseInt(v, 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("admission %s=%s: %w", k, v, err)
		}
		out[u] = time.UnixMilli(ms).Add(-r.q.TicketTTL)
	}
	return out, nil
}

// createRoom puts the voucher on sale behind a waiting room that opens
// at r.open, the sale beginning ReleaseBefore later.
func (r *queueRun) createRoom(ctx context.Context, admin string) (string, error) {
	in := voucherInput(r.cfg.Stock, 1, r.begin, r.begin.Add(2*time.Hour))
	in["waitingRoom"], in["admitPerSecond"], in["maxActive"] = true, r.q.AdmitPerSecond, r.q.MaxActive
	var out struct {
		CreateVoucher struct{ ID string } `json:"createVoucher"`
	}
	if err := r.a.graphql(ctx, admin, `mutation($in: CreateVoucherInput!) { createVoucher(input: $in) { id } }`,
		map[string]any{"in": in}, &out); err != nil {
		return "", fmt.Errorf("create a voucher with a waiting room: %w", err)
	}
	return out.CreateVoucher.ID, nil
}

// request runs one GraphQL operation and returns its body, when it was
// sent and how long it took. Polls and grabs share the run's concurrency;
// joins (shared true: false) are bounded by their own workers and waves,
// so that arrivals keep their pace however many users wait.
func (r *queueRun) request(ctx context.Context, shared bool, token, query string, vars map[string]any) ([]byte, time.Time, time.Duration, error) {
	if shared {
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, time.Time{}, 0, ctx.Err()
		}
		defer func() { <-r.sem }()
	}
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.a.ep.URLs[0]+"/query", bytes.NewReader(b))
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	sent := time.Now()
	resp, err := r.a.client.Do(req)
	if err != nil {
		return nil, sent, time.Since(sent), err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return body, sent, time.Since(sent), err
}

// placeAnswer reads a place from a GraphQL answer's data.<field>.
func placeAnswer(body []byte, field string) (*place, error) {
	var resp struct {
		Data   map[string]*place `json:"data"`
		Errors []struct {
			Message    string `json:"message"`
			Extensions struct {
				Code string `json:"code"`
			} `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("%w: %.200s", err, body)
	}
	if len(resp.Errors) > 0 {
		return nil, fmt.Errorf("%s (%s)", resp.Errors[0].Message, resp.Errors[0].Extensions.Code)
	}
	return resp.Data[field], nil
}

// errorCode names a failed request: its GraphQL error code, else
// LabelTransport (no answer) or LabelUnreadable.
func errorCode(body []byte, err error) string {
	switch {
	case body == nil && err != nil:
		return LabelTransport
	case err == nil:
		return "no place"
	}
	code, _, _ := ParseAnswer(body)
	return code
}

// join puts u in line, again after an answer without a place (for a
// second or so: UNAVAILABLE, RATE_LIMITED, a lost connection).
func (r *queueRun) join(ctx context.Context, u *queueUser) {
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		body, sent, took, err := r.request(ctx, false, u.token, `mutation($v: ID!) { joinQueue(voucherId: $v) { `+placeFields+` } }`, map[string]any{"v": r.voucher})
		if err == nil {
			var p *place
			if p, err = placeAnswer(body, "joinQueue"); err == nil && p != nil {
				u.arrival = Arrival{User: u.id, Early: p.State == stateEarly, Sent: sent, Answered: sent.Add(took)}
				u.joined = true
				r.sample(sent.Add(took), p.Waiting)
				return
			}
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// wait follows u's place until the sale is over for them.
func (r *queueRun) wait(ctx context.Context, u *queueUser) {
	if u.subscriber {
		if r.subscribe(ctx, u) {
			return
		}
		r.fallbacks.Add(1)
	}
	r.poll(ctx, u)
}

// poll reads u's place at an interval that follows its estimated wait:
// a user far back asks seldom, one near the head often.
func (r *queueRun) poll(ctx context.Context, u *queueUser) {
	for ctx.Err() == nil {
		body, sent, took, err := r.request(ctx, true, u.token, `query($v: ID!) { queuePlace(voucherId: $v) { `+placeFields+` } }`, map[string]any{"v": r.voucher})
		if ctx.Err() != nil {
			return
		}
		r.polls.Add(1)
		var p *place
		if err == nil {
			p, err = placeAnswer(body, "queuePlace")
		}
		if err != nil || p == nil {
			r.pollErrs.Add(1)
			r.mu.Lock()
			r.errCodes[errorCode(body, err)]++
			r.mu.Unlock()
			sleepCtx(ctx, jitter(r.q.PollMin))
			continue
		}
		r.sample(sent.Add(took), p.Waiting)
		switch p.State {
		case stateAdmitted:
			if p.Ticket != nil {
				r.grabAll(ctx, u, *p.Ticket)
				return
			}
		case stateSoldOut, stateClosed:
			u.finished = true
			return
		case stateEarly:
			sleepCtx(ctx, time.Until(r.open)+time.Duration(rand.Int64N(int64(r.q.PollMin))))
			continue
		}
		every := r.q.PollMax
		if p.EstimatedWaitMs != nil {
			every = min(max(time.Duration(*p.EstimatedWaitMs)*time.Millisecond/4, r.q.PollMin), r.q.PollMax)
		}
		sleepCtx(ctx, jitter(every))
	}
}

// jitter spreads d by a quarter either way, so that pollers do not
// march in step.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// grabAll grabs with u's admission ticket once the sale has begun, again
// after an answer that settled nothing, until one does.
func (r *queueRun) grabAll(ctx context.Context, u *queueUser, ticket string) {
	sleepCtx(ctx, time.Until(r.begin))
	for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
		switch code := r.grab(ctx, u, ticket, attempt); code {
		case "NOT_STARTED":
			sleepCtx(ctx, 20*time.Millisecond)
		case "", "UNAVAILABLE", LabelTransport, LabelUnreadable, "error:UNAVAILABLE", "error:RATE_LIMITED", "error:INTERNAL":
			sleepCtx(ctx, 100*time.Millisecond)
		default:
			u.finished = true
			return
		}
	}
}

// grab sends one grab (attempt -1: a probe without a ticket) and records
// its outcome; "" when the deadline came first.
func (r *queueRun) grab(ctx context.Context, u *queueUser, ticket string, attempt int) string {
	vars := map[string]any{"v": r.voucher, "r": fmt.Sprintf("%s-%d-%d", r.runTag, u.id, attempt)}
	if ticket != "" {
		vars["t"] = ticket
	}
	body, sent, took, err := r.request(ctx, true, u.token, ticketGrabQuery, vars)
	if sent.IsZero() {
		return ""
	}
	o := Outcome{User: u.id, Attempt: attempt, Sent: sent, Latency: took, Code: LabelTransport}
	if err == nil {
		o.Code, o.OrderID, _ = ParseAnswer(body)
	}
	if o.Code == "OK" {
		r.okCount.Add(1)
	}
	r.mu.Lock()
	r.outs = append(r.outs, o)
	r.mu.Unlock()
	return o.Code
}

func (r *queueRun) sample(at time.Time, waiting int) {
	r.mu.Lock()
	r.samples = append(r.samples, waitSample{at, waiting})
	r.mu.Unlock()
}

// wsMessage is one graphql-transport-ws message.
type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// subscribe follows u's place over a websocket (graphql-transport-ws)
// until it says ADMITTED (then grabs), SOLD_OUT or CLOSED; false when
// the subscription failed first, and u should poll.
func (r *queueRun) subscribe(ctx context.Context, u *queueUser) bool {
	wsURL := "ws" + strings.TrimPrefix(r.a.ep.URLs[0], "http") + "/query"
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, _, err := websocket.Dial(dctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	cancel()
	if err != nil {
		return false
	}
	defer c.CloseNow()
	send := func(m wsMessage) error {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return c.Write(wctx, websocket.MessageText, b)
	}
	if send(wsMessage{Type: "connection_init", Payload: json.RawMessage(`{"Authorization":"Bearer ` + u.token + `"}`)}) != nil {
		return false
	}
	sub, err := json.Marshal(map[string]any{"query": `subscription($v: ID!) { queueChanged(voucherId: $v) { ` + placeFields + ` } }`,
		"variables": map[string]any{"v": r.voucher}})
	if err != nil {
		return false
	}
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			return ctx.Err() != nil // the deadline ends a follower as it ends a poller
		}
		var m wsMessage
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		switch m.Type {
		case "connection_ack":
			if send(wsMessage{ID: "q", Type: "subscribe", Payload: sub}) != nil {
				return false
			}
		case "ping":
			_ = send(wsMessage{Type: "pong"})
		case "next":
			at := time.Now()
			p, err := placeAnswer(m.Payload, "queueChanged")
			if err != nil || p == nil {
				return false
			}
			r.sample(at, p.Waiting)
			if u.since.IsZero() {
				u.since = at
			}
			switch p.State {
			case stateAdmitted:
				if p.Ticket != nil {
					_ = c.Close(websocket.StatusNormalClosure, "")
					r.grabAll(ctx, u, *p.Ticket)
					return true
				}
			case stateSoldOut, stateClosed:
				u.soldOutAt, u.watched, u.finished = at, true, true
				return true
			}
		case "error", "complete", "connection_error":
			return false
		}
	}
}

// progress prints a line a second until the returned func is called.
func (r *queueRun) progress(start time.Time, users int) func() {
	if r.cfg.Progress == nil {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fmt.Fprintf(r.cfg.Progress, "%s %s: %d users, %d polls, %d OK, %.0fs (room opens in %.1fs, sale begins in %.1fs)\n",
					r.cfg.Endpoint.Name, Queue, users, r.polls.Load(), r.okCount.Load(), time.Since(start).Seconds(),
					time.Until(r.open).Seconds(), time.Until(r.begin).Seconds())
			}
		}
	}()
	return func() { close(stop); <-done }
}

// sleepCtx sleeps d, or less when ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// QueueTimelineWidth is the slice width of a waiting-room sale's
// timeline over span: about 80 slices, each at least 100 ms, so that
// the pacer's ticks and the burst at the sale's begin stay apart.
func QueueTimelineWidth(span time.Duration) time.Duration {
	return max(100*time.Millisecond, (span / 80).Round(10*time.Millisecond))
}

// QueueTimeline cuts a waiting-room sale into slices of width from the
// room's opening (anything before it falls in the first): admissions and
// OK grabs a second, and the line's length as the service last reported
// it in each slice.
func QueueTimeline(open time.Time, admissions []time.Time, outs []Outcome, samples []waitSample, width time.Duration) []QueueBucket {
	if width <= 0 {
		return nil
	}
	var buckets []QueueBucket
	at := func(t time.Time) int {
		i := max(int(t.Sub(open)/width), 0)
		for len(buckets) <= i {
			buckets = append(buckets, QueueBucket{At: time.Duration(len(buckets)) * width, Waiting: -1})
		}
		return i
	}
	perSec := 1 / width.Seconds()
	for _, a := range admissions {
		buckets[at(a)].AdmitPerSecond += perSec
	}
	for _, o := range outs {
		if o.Code == "OK" {
			buckets[at(o.Sent.Add(o.Latency))].OKPerSecond += perSec
		}
	}
	last := map[int]time.Time{}
	for _, s := range samples {
		i := at(s.at)
		if t, ok := last[i]; !ok || s.at.After(t) {
			last[i], buckets[i].Waiting = s.at, s.waiting
		}
	}
	return buckets
}
