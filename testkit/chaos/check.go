package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The service's Redis keys and statuses the checks read. They are part of
// what the service promises to operators (docs/ARCHITECTURE.md, docs/contract/db.md), so the suite
// reads them as an outsider would, not through the service's packages.
const (
	// Order statuses that are not live (db.md): cancelled, refunded.
	statusCancelled = 4
	statusRefunded  = 6
)

func logKey(v int64) string   { return fmt.Sprintf("{v%d}:log", v) }
func stockKey(v int64) string { return fmt.Sprintf("{v%d}:stock", v) }
func metaKey(v int64) string  { return fmt.Sprintf("{v%d}:meta", v) }

// lostLoad is the dead-letter reason of an order sold from a Redis load
// that was lost (persistence.DeadLostLoad).
const lostLoad = "lost_load"

func usersKey(v int64) string { return fmt.Sprintf("{v%d}:users", v) }

// documentedErrors are the GraphQL error codes of the public contract.
var documentedErrors = []string{"UNAUTHENTICATED", "FORBIDDEN", "RATE_LIMITED", "BAD_USER_INPUT", "NOT_FOUND", "INTERNAL"}

// drain waits until the voucher's orders have all reached Postgres: its
// order log is empty and the number of its rows and of dead letters has
// not moved for a while. After a Postgres outage the order writer may hold
// a batch in memory that no longer shows in the log (Redis may have lost
// it since), and retries it after a backoff that doubles up to 5 s, so
// about as long as the outage lasted: the wait lasts past that too. It
// gives up after a minute; false then, with the entries still in the log.
func (rn *runner) drain(ctx context.Context, p plan, saleStart time.Time, voucher int64) (bool, int64) {
	const stableFor = 1500 * time.Millisecond
	notBefore := pgRetried(p, saleStart)
	deadline := time.Now().Add(time.Minute)
	var (
		lastRows, lastDead int64 = -1, -1
		since              time.Time
		left               int64
	)
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		xlen, errLog := rn.env.store.XLen(qctx, logKey(voucher)).Result()
		var rows, dead int64
		errRows := rn.env.db.QueryRowContext(qctx, `SELECT count(*) FROM tb_voucher_order WHERE voucher_id = $1`, voucher).Scan(&rows)
		errDead := rn.env.db.QueryRowContext(qctx, `SELECT count(*) FROM tb_order_dead_letter WHERE voucher_id = $1`, voucher).Scan(&dead)
		cancel()
		if err := errors.Join(errLog, errDead, errRows); err != nil {
			since = time.Time{}
		} else {
			left = xlen
			switch {
			case xlen > 0:
				since = time.Time{}
			case rows != lastRows || dead != lastDead || since.IsZero():
				lastRows, lastDead, since = rows, dead, time.Now()
			case time.Since(since) >= stableFor && time.Now().After(notBefore):
				return true, 0
			}
		}
		if time.Now().After(deadline) || !sleep(ctx, 250*time.Millisecond) {
			return false, left
		}
	}
}

// pgRetried is when an order writer that held orders through the round's
// Postgres outages has retried them: its backoff doubles up to 5 s, so
// about as long after an outage as the outage lasted.
func pgRetried(p plan, saleStart time.Time) time.Time {
	at := time.Now()
	for _, f := range p.faults {
		if back := f.pgBack(); back > 0 {
			at = later(at, saleStart.Add(back+min(f.pgDown(), 5*time.Second)+time.Second))
		}
	}
	return at
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// orderRow is a tb_voucher_order row as the checks see it; created is
// when Redis sold it (the grab script's clock, this machine's).
type orderRow struct {
	id, user, voucher int64
	status            int
	created           time.Time
}

func (o orderRow) live() bool { return o.status != statusCancelled && o.status != statusRefunded }

// deadLetter is a row of tb_order_dead_letter; stamp is the Redis load
// the order was sold from.
type deadLetter struct {
	order, user int64
	reason      string
	stamp       string
}

// state is what the stores and the API hold once the round drained.
type state struct {
	drained bool
	logLeft int64
	rows    []orderRow         // the voucher's rows
	byID    map[int64]orderRow // rows under the ids answered OK, of any voucher
	// tb_seckill_voucher
	initial, dbStock, dbLimit int
	// through the API (Redis, preheated again if it lost the voucher)
	api liveStock
	// Redis, read directly; nil when the key is missing
	redisStock *int
	redisUsers map[int64]int
	redisStamp string       // the load Redis holds
	dead       []deadLetter // of this voucher, from every load
	// breakerTrips counts the times a node's Redis breaker opened during
	// the round: with none, every store was up as the nodes saw it.
	breakerTrips int
}

// collect reads the round's outcome from Postgres, Redis and the API.
func (rn *runner) collect(ctx context.Context, voucher int64, okIDs []int64) (state, error) {
	var st state
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := rn.env.db.QueryContext(ctx, `SELECT id, user_id, voucher_id, status, create_time FROM tb_voucher_order WHERE voucher_id = $1 OR id = ANY($2)`, voucher, okIDs)
	if err != nil {
		return st, fmt.Errorf("read orders: %w", err)
	}
	st.byID = map[int64]orderRow{}
	for rows.Next() {
		var o orderRow
		if err := rows.Scan(&o.id, &o.user, &o.voucher, &o.status, &o.created); err != nil {
			rows.Close()
			return st, fmt.Errorf("read orders: %w", err)
		}
		if o.voucher == voucher {
			st.rows = append(st.rows, o)
		}
		st.byID[o.id] = o
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return st, fmt.Errorf("read orders: %w", err)
	}
	err = rn.env.db.QueryRowContext(ctx, `SELECT initial_stock, stock, per_user_limit FROM tb_seckill_voucher WHERE voucher_id = $1`, voucher).
		Scan(&st.initial, &st.dbStock, &st.dbLimit)
	if err != nil {
		return st, fmt.Errorf("read seckill voucher: %w", err)
	}
	// The API first: if Redis lost the voucher, reading its stock loads it
	// again, and the identity below is then checked on the reload.
	id := strconv.FormatInt(voucher, 10)
	for try := 0; ; try++ {
		if st.api, err = rn.api.stock(ctx, rn.env.nodes[0].Base, rn.env.admin, id); err == nil || try == 10 {
			break
		}
		sleep(ctx, 300*time.Millisecond)
	}
	if err != nil {
		return st, err
	}
	if n, err := rn.env.store.Get(ctx, stockKey(voucher)).Int(); err == nil {
		st.redisStock = &n
	} else if !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("read redis stock: %w", err)
	}
	if st.redisStamp, err = rn.env.store.HGet(ctx, metaKey(voucher), "life").Result(); err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("read redis load stamp: %w", err)
	}
	users, err := rn.env.store.HGetAll(ctx, usersKey(voucher)).Result()
	if err != nil {
		return st, fmt.Errorf("read redis user counts: %w", err)
	}
	st.redisUsers = map[int64]int{}
	for u, n := range users {
		uid, err1 := strconv.ParseInt(u, 10, 64)
		c, err2 := strconv.Atoi(n)
		if err := errors.Join(err1, err2); err != nil {
			return st, fmt.Errorf("redis user count %q=%q: %w", u, n, err)
		}
		st.redisUsers[uid] = c
	}
	if err := rn.dead.poll(ctx); err != nil {
		return st, err
	}
	st.dead = rn.dead.list()
	return st, nil
}

// violation is one broken promise.
type violation struct {
	check  string
	detail string
}

// outcome is a round's verdict and its figures.
type outcome struct {
	violations []violation
	okAnswers  int // OK answers, counting a retry's repeat once
	sold       int // live rows
	lost       int // OK'd orders gone from Redis and never in Postgres (allowed only when Redis was wiped)
	unsettled  int // grabs whose outcome stayed unknown
	dead       int // dead-lettered orders of the voucher
	// deadReasons counts the dead letters by reason, for -v.
	deadReasons map[string]int
	gqlErrors   int // GraphQL errors answered to grabs
	unavail     int // UNAVAILABLE answers
	// lastUnavail: how long after Redis served again (after the round's
	// Redis fault) the last grab answered UNAVAILABLE was sent (0: none
	// after it, or no such fault); firstOK: how long after it the first
	// grab sent since was answered OK (-1: none sold), when measured
	lastUnavail time.Duration
	firstOK     time.Duration
	// backAt is when Redis served again; probes are the probe grabs'
	// answers, for a verbose report.
	backAt   time.Time
	probes   []answer
	measured bool
	maxTook  time.Duration
	answers  map[string]int // answers by code or error, for -v
	rpOK     int            // packets of the round's red packet in the database
	rpRefund int64          // cents its refund handed back
	// fallback rounds: grabs the database fallback answered OK, and
	// whether the breaker was seen open during the stall
	fallbackOK    int
	breakerOpened bool
	// room: a queue round's waiting-room figures (judgeQueue).
	room *roomFigures
}

func (o *outcome) add(check, format string, args ...any) {
	o.violations = append(o.violations, violation{check, fmt.Sprintf(format, args...)})
}

// judge checks every promise the suite can see from outside.
func judge(p plan, answers []answer, st state, requestIDs bool) outcome {
	o := outcome{answers: map[string]int{}}
	if !st.drained {
		o.add("not-drained", "%d orders still in the order log after a minute", st.logLeft)
	}

	// What the clients were told.
	type reqKey struct {
		user int64
		key  string
	}
	okOwner := map[int64]answer{}         // order id -> first answer OK'ing it
	okByKey := map[reqKey][]answer{}      // request -> its OK answers
	decidedByKey := map[reqKey][]answer{} // request -> every deciding answer
	settled := map[reqKey]bool{}
	openByUser := map[int64]int{}
	for _, a := range answers {
		k := reqKey{a.user, a.key}
		if !requestIDs { // every attempt is a request of its own
			k.key = fmt.Sprintf("%s#%d", a.key, a.at)
		}
		o.maxTook = max(o.maxTook, a.took)
		o.answers[a.phase+":"+a.label()]++
		var ge *gqlErrors
		var br *badResponse
		// With every store up, a ticket is always to be had. A node whose
		// breaker opened took Redis to be down (on a machine too loaded
		// to answer within the request deadlines) and refused rightly.
		if errors.Is(a.Err, errNoTicket) && len(p.faults) == 0 && st.breakerTrips == 0 {
			o.add("ticket", "user %d got no grab ticket with no fault injected: %v", a.user, a.Err)
		}
		switch {
		case errors.As(a.Err, &ge):
			o.gqlErrors++
			for _, c := range ge.codes() {
				if !slices.Contains(documentedErrors, c) {
					o.add("error", "user %d got an undocumented GraphQL error: %v", a.user, ge)
				}
				if c == "FORBIDDEN" { // every grab carries the user's own valid ticket when one is needed, and nobody is blocked
					o.add("ticket", "user %d's grab was refused: %v", a.user, ge)
				}
			}
		case errors.As(a.Err, &br):
			o.add("error", "user %d: %v", a.user, br)
		}
		switch a.Code {
		case "", codeSoldOut, codeLimitReached:
		case codeUnavailable:
			o.unavail++
		case codeOK:
			if a.OrderID == "" {
				o.add("wrong-code", "user %d answered OK without an orderId", a.user)
			}
		default:
			o.add("wrong-code", "user %d answered %s for an active voucher in stock", a.user, a.Code)
		}
		if a.decided() && a.Code != "" {
			settled[k] = true
			decidedByKey[k] = append(decidedByKey[k], a)
		}
		if a.Code != codeOK || a.OrderID == "" {
			continue
		}
		id, err := strconv.ParseInt(a.OrderID, 10, 64)
		if err != nil {
			o.add("wrong-code", "user %d answered OK with order id %q", a.user, a.OrderID)
			continue
		}
		okByKey[k] = append(okByKey[k], a)
		first, seen := okOwner[id]
		if !seen {
			okOwner[id] = a
			continue
		}
		if first.user != a.user || (requestIDs && first.key != a.key) || (!requestIDs && first.at != a.at) {
			o.add("dup-id", "order %d answered OK to user %d (request %s) and to user %d (request %s)", id, first.user, first.key, a.user, a.key)
		}
	}
	// A request is open when some answer to it leaves open whether it
	// sold (UNAVAILABLE, a lost reply, an error) and none decides it.
	for _, a := range answers {
		k := reqKey{a.user, a.key}
		if !requestIDs {
			k.key = fmt.Sprintf("%s#%d", a.key, a.at)
		}
		if !a.decided() && !settled[k] {
			settled[k] = true // count each open request once
			openByUser[a.user]++
			o.unsettled++
		}
	}
	o.okAnswers = len(okOwner)

	// OK'd orders against the table. An order that is not there is gone
	// for the checks below; only Redis losing its data excuses that, and
	// only for an order that vanished with it: one the database refused
	// (dead-lettered) was sold beyond what the service could keep, unless
	// its reason is that it was sold from a Redis load that was lost (an
	// order writer held it in memory past the reload's hold): that order
	// vanished with Redis's data too.
	lost := map[int64]bool{}
	okPerUser := map[int64]int{} // OK'd orders per user, less those Redis lost
	for _, id := range slices.Sorted(maps.Keys(okOwner)) {
		a := okOwner[id]
		row, ok := st.byID[id]
		switch {
		case !ok:
			lost[id] = true
			reason, refused := deadReason(st.dead, id)
			if refused && (reason != lostLoad || p.ordersKept()) {
				o.add("refused", "order %d answered OK to user %d was dead-lettered: %s", id, a.user, reason)
				okPerUser[a.user]++
			} else if o.lost++; p.ordersKept() {
				o.add("lost", "order %d answered OK to user %d is not in tb_voucher_order", id, a.user)
				okPerUser[a.user]++
			}
		case row.user != a.user || row.voucher != p.voucher:
			o.add("wrong-owner", "order %d answered OK to user %d is stored for user %d, voucher %d", id, a.user, row.user, row.voucher)
		default:
			okPerUser[a.user]++
		}
	}
	excused := 0
	if !p.ordersKept() {
		excused = o.lost
	}
	if n := o.okAnswers - excused; n > p.stock {
		o.add("oversell", "%d orders answered OK (not counting %d Redis lost), stock %d", n, excused, p.stock)
	}
	for _, u := range slices.Sorted(maps.Keys(okPerUser)) {
		if n := okPerUser[u]; n > p.limit {
			o.add("user-limit", "user %d answered OK for %d orders (not counting those Redis lost), perUserLimit %d", u, n, p.limit)
		}
	}
	// A request answered OK must be answered the same order every time
	// it is asked again once it sold, and never anything else that decides
	// it — unless its order was lost with Redis's data. Only sales are
	// remembered: an answer such as SOLD_OUT to a request sent before the
	// sale (by its order's create time, plus a few milliseconds for the two
	// clocks' readings) was a former attempt, not a wrong retry.
	for k, oks := range okByKey {
		want := oks[0].OrderID
		id, _ := strconv.ParseInt(want, 10, 64)
		if lost[id] {
			continue
		}
		soldAt := st.byID[id].created
		for _, a := range decidedByKey[k] {
			if a.Code != codeOK && !soldAt.IsZero() && a.sent.Before(soldAt.Add(5*time.Millisecond)) {
				continue
			}
			if a.Code != codeOK || a.OrderID != want {
				got := a.Code
				if a.Code == codeOK {
					got += " order " + a.OrderID
				}
				o.add("retry", "user %d request %s: OK order %s, and %s in the %s phase", k.user, k.key, want, got, a.phase)
			}
		}
	}

	// One order per request id: however often a request is asked, every
	// OK answer names the same order. Only an order lost with Redis's data
	// (where Redis was wiped, and not refused by the database but for
	// having been sold from a lost load) leaves its request free to sell
	// again; the retry check above does not see a request whose first OK
	// named a lost or refused order, this one does.
	if requestIDs {
		for _, k := range slices.SortedFunc(maps.Keys(okByKey), func(a, b reqKey) int { return cmp.Or(cmp.Compare(a.user, b.user), cmp.Compare(a.key, b.key)) }) {
			var orders []string
			for _, a := range okByKey[k] {
				id, _ := strconv.ParseInt(a.OrderID, 10, 64)
				if lost[id] && !p.ordersKept() {
					if reason, refused := deadReason(st.dead, id); !refused || reason == lostLoad {
						continue
					}
				}
				if !slices.Contains(orders, a.OrderID) {
					orders = append(orders, a.OrderID)
				}
			}
			if len(orders) > 1 {
				o.add("request-orders", "user %d request %s answered OK with orders %v", k.user, k.key, orders)
			}
		}
	}

	// The table on its own.
	live := 0
	livePerUser := map[int64]int{}
	phantomPerUser := map[int64][]int64{}
	for _, r := range st.rows {
		if !r.live() {
			continue
		}
		live++
		livePerUser[r.user]++
		if a, ok := okOwner[r.id]; !ok || a.user != r.user {
			phantomPerUser[r.user] = append(phantomPerUser[r.user], r.id)
		}
	}
	o.sold = live
	if live > p.stock {
		o.add("oversell", "%d live orders in tb_voucher_order, stock %d", live, p.stock)
	}
	for _, u := range slices.Sorted(maps.Keys(livePerUser)) {
		if n := livePerUser[u]; n > p.limit {
			o.add("user-limit", "user %d holds %d live orders, perUserLimit %d", u, n, p.limit)
		}
	}
	// A row nobody was told about is a phantom, unless its user has a
	// grab whose answer was lost (a node killed mid-request, a reply the
	// service could not give): that grab may have sold it.
	for _, u := range slices.Sorted(maps.Keys(phantomPerUser)) {
		ids := phantomPerUser[u]
		if len(ids) > openByUser[u] {
			o.add("phantom", "user %d holds orders %v never answered OK to them (%d of their grabs left open)", u, ids, openByUser[u])
		}
	}
	if st.initial != p.stock || st.dbLimit != p.limit || st.api.Initial != p.stock {
		o.add("db-identity", "created stock %d limit %d; tb_seckill_voucher says %d/%d, the API says initialStock %d", p.stock, p.limit, st.initial, st.dbLimit, st.api.Initial)
	}
	if st.initial != st.dbStock+live {
		o.add("db-identity", "initial_stock %d != stock %d + live orders %d", st.initial, st.dbStock, live)
	}

	// Redis against the table (promise 5, docs/ARCHITECTURE.md): what Redis still
	// sells, plus what is sold, in flight or refused, is the stock. Only
	// the dead letters of the load Redis holds took a unit of it: a reload
	// starts again from the table.
	o.dead = len(st.dead)
	current, deadPerUser := 0, map[int64]int{}
	for _, d := range st.dead {
		if o.deadReasons == nil {
			o.deadReasons = map[string]int{}
		}
		o.deadReasons[d.reason]++
		if d.stamp != "" && d.stamp == st.redisStamp {
			current++
			deadPerUser[d.user]++
		}
	}
	// Where Redis kept everything, the database refuses nothing Redis
	// sold: a dead letter there is an order Redis should never have sold,
	// or one entry of an order taken for another (an id collision).
	if o.dead > 0 && p.durable() {
		o.add("dead-letter", "%d orders dead-lettered in a round where Redis lost nothing (%s)", o.dead, summary(o.deadReasons))
	}
	// Where the database fallback sold, nothing may be dead-lettered at
	// all (the fallback sells nothing Redis may still sell, and the
	// re-sync counts no order twice), so a dead letter excuses no unit:
	// remaining + live = initial, and per user Redis counts the live rows.
	if p.fallback {
		current, deadPerUser = 0, map[int64]int{}
	}
	remaining, where := st.api.Remaining, "API"
	if st.redisStock != nil {
		remaining, where = *st.redisStock, "Redis"
	}
	if st.drained && st.initial != remaining+live+current {
		o.add("redis-identity", "initial %d != remaining %d (%s) + live %d + in flight 0 + dead-lettered from this load %d%s", st.initial, remaining, where, live, current, fallbackNote(p))
	}
	if st.drained && st.redisStock != nil {
		users := maps.Clone(st.redisUsers)
		for u := range livePerUser {
			users[u] += 0
		}
		for u := range deadPerUser {
			users[u] += 0
		}
		for _, u := range slices.Sorted(maps.Keys(users)) {
			if users[u] != livePerUser[u]+deadPerUser[u] {
				o.add("redis-identity", "user %d: Redis counts %d orders, %d live in tb_voucher_order and %d dead-lettered from this load%s",
					u, users[u], livePerUser[u], deadPerUser[u], fallbackNote(p))
			}
		}
	}
	sort.SliceStable(o.violations, func(i, j int) bool { return o.violations[i].check < o.violations[j].check })
	return o
}

// deadReason says why an order was dead-lettered, if it was.
func deadReason(dead []deadLetter, id int64) (string, bool) {
	for _, d := range dead {
		if d.order == id {
			return d.reason, true
		}
	}
	return "", false
}

func fallbackNote(p plan) string {
	if p.fallback {
		return " (a fallback round: dead letters excuse no unit)"
	}
	return ""
}

// availabilityBound is, per Redis fault, how long after Redis serves again
// (the restart, the promotion as the suite's own poll of the sentinels
// sees it, the killed Cluster primary back as its shard's replica and
// acknowledging a write, the flush, the policy back to noeviction, the
// slot moved) grabs may still answer UNAVAILABLE. What loses nothing must
// sell again within 1 s: a restart from appendfsync always files, a
// Sentinel failover, a Cluster failover, an evicting policy that evicted
// nothing, a Cluster slot moved to another primary. A loss (a wipe, a
// flush, a restart from an older copy) within 2 s: the reload holds its
// sales until every order writer and every selling node has handed back
// what it holds of the lost load. The round's probe (see probe) asks
// every probeEvery after it, so a node that still refuses past the bound
// meets a grab.
var availabilityBound = map[faultKind]time.Duration{
	faultRedisKill:          time.Second,
	faultPrimaryKill:        time.Second,
	faultClusterPrimaryKill: time.Second,
	faultRedisEvict:         time.Second,
	faultClusterMigrate:     time.Second,
	faultRedisWipe:          2 * time.Second,
	faultRedisFlush:         2 * time.Second,
	faultRedisRollback:      2 * time.Second,
}

// judgeAvailability records how soon after back the first grab was
// answered OK (o.firstOK: from back to that answer; -1 when no grab sent
// after back sold, as when the stock was gone), and adds a violation when
// a grab sent later than bound after back was answered UNAVAILABLE:
// Redis served, and the nodes still refused to sell.
func judgeAvailability(o *outcome, answers []answer, back time.Time, bound time.Duration) {
	if back.IsZero() {
		return
	}
	o.measured, o.firstOK, o.backAt = true, -1, back
	for _, a := range answers {
		if a.phase == "probe" {
			o.probes = append(o.probes, a)
		}
	}
	var late int
	var last time.Duration
	for _, a := range answers {
		switch {
		case a.sent.Before(back):
		case a.Code == codeOK:
			if at := a.sent.Add(a.took).Sub(back); o.firstOK < 0 || at < o.firstOK {
				o.firstOK = at
			}
		case a.Code == codeUnavailable:
			o.lastUnavail = max(o.lastUnavail, a.sent.Sub(back))
			if a.sent.Sub(back) > bound {
				late++
				last = max(last, a.sent.Sub(back))
			}
		}
	}
	if late > 0 {
		o.add("availability", "%d grabs answered UNAVAILABLE though sent more than %s after redis served again, the last %.1fs after it",
			late, bound, last.Seconds())
	}
}
