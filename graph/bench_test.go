package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
	"flashsale/usecase/seckill"
)

// perRequest is the reference: the seeds' design, one order-id round trip
// (an INCR, as the seeds' counter) and one single-grab script call per
// request, no batching, no memory.
type perRequest struct {
	grabs *persistence.Grabs
	rdb   *redis.Client
	fence int64
	seq   atomic.Int64
}

func (p *perRequest) Grab(ctx context.Context, g domain.GrabRequest) domain.GrabResult {
	voucherID, userID := g.VoucherID, g.UserID
	id, err := p.rdb.Incr(ctx, "ref:order-id").Result()
	if err != nil {
		return domain.GrabResult{Code: domain.SeckillUnavailable}
	}
	req := "ref:" + strconv.FormatInt(p.seq.Add(1), 10)
	out, err := p.grabs.Grab(ctx, voucherID, 0, p.fence, []domain.Grab{{RequestID: req, UserID: userID, OrderID: id}})
	if err != nil || out.Stale || len(out.Results) != 1 {
		return domain.GrabResult{Code: domain.SeckillUnavailable}
	}
	return out.Results[0]
}

// BenchmarkGrab measures grabs through the whole GraphQL handler
// in-process (JWT, parsing, resolver, actor, Redis) against a private
// redis-server, for our batched router and for the per-request reference,
// while stock lasts and after sell-out. It reports Redis commands per grab.
// Each implementation is a node of its own over one database and Redis
// (the reference's grabs replace its router: node.Hooks.Grabber), with
// gqlgen's executor for every grab (GRAPHQL_COMPILED_GRABS=false), as the
// figures in docs/BENCHMARKS.md were measured; the grab scripts run on a
// client that counts them.
func BenchmarkGrab(b *testing.B) {
	s := newServer(b)
	const users = 4096
	tokens := make([]string, users)
	for i := range tokens {
		tokens[i], _ = s.tokens.Issue(auth.Identity{UserID: int64(i + 1), Role: auth.RoleUser}, time.Hour)
	}
	type impl struct {
		name string
		env  map[string]string
		// tickets: the voucher requires grab tickets and every grab
		// carries its user's ticket.
		tickets   bool
		reference bool
	}
	type started struct {
		node *testServer
		// grabber sells the sold-out phase's last unit; ref is the
		// reference, nil for the router.
		grabber seckill.Router
		ref     *perRequest
		cnt     *testenv.Counter
	}
	startImpl := func(im impl) started {
		var cnt testenv.Counter
		rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr(), PoolSize: 256})
		rdb.AddHook(&cnt)
		b.Cleanup(func() { _ = rdb.Close() })
		env := map[string]string{"GRAPHQL_COMPILED_GRABS": "false"}
		maps.Copy(env, im.env)
		set := setup{dbURL: s.dbURL, redis: s.redis, gate: testGateOptions, env: env}
		st := started{cnt: &cnt}
		if im.reference {
			st.ref = &perRequest{grabs: persistence.NewGrabs(rdb), rdb: rdb}
			set.hooks.Grabber = func(seckill.Router) seckill.Router { return st.ref }
		} else {
			set.grabClient = func(*testServer) redis.UniversalClient { return rdb }
		}
		st.node = launch(b, set)
		st.grabber = st.node.router
		if st.ref != nil {
			st.grabber = st.ref
		}
		return st
	}
	impls := []impl{
		{name: "batched"},
		{name: "batched+rate-limits", env: map[string]string{"RATE_USER_PER_SEC": "1000"}},
		{name: "batched+tickets", tickets: true},
		{name: "per-request-reference", reference: true},
	}
	nodes := map[string]started{}
	for _, im := range impls {
		nodes[im.name] = startImpl(im)
	}
	for _, phase := range []string{"in-stock", "sold-out"} {
		for _, impl := range impls {
			b.Run(phase+"/"+impl.name, func(b *testing.B) {
				st := nodes[impl.name]
				in := seckillInput(1, 100_000_000)
				in["perUserLimit"] = 1000
				if phase == "sold-out" {
					in["stock"] = 1
				}
				in["requireTicket"] = impl.tickets
				v := s.createVoucher(b, in)
				vid, _ := strconv.ParseInt(v.ID, 10, 64)
				if st.ref != nil {
					st.ref.fence, _, _ = st.ref.grabs.Claim(context.Background(), vid, 0)
				}
				if phase == "sold-out" {
					if res := st.grabber.Grab(context.Background(), domain.GrabRequest{VoucherID: vid, UserID: 999_999}); res.Code != domain.SeckillOK {
						b.Fatalf("selling the last unit: %s", res.Code)
					}
				}
				bodies := make([][]byte, users)
				for i := range bodies {
					bodies[i], _ = json.Marshal(map[string]any{"query": grabMutation, "variables": map[string]any{"id": v.ID}})
					if impl.tickets {
						ticket := st.node.gate.Tickets().Issue(int64(i+1), vid, time.Now().Add(time.Hour))
						bodies[i], _ = json.Marshal(map[string]any{"query": ticketGrabMutation, "variables": map[string]any{"id": v.ID, "ticket": ticket}})
					}
				}
				h := st.node.handler
				cnt := st.cnt
				want := map[string]string{"in-stock": `"OK"`, "sold-out": `"SOLD_OUT"`}[phase]
				var next atomic.Int64
				start, startTrips := cnt.Commands.Load(), cnt.RoundTrips.Load()
				b.SetParallelism(32)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := next.Add(1)
						req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(bodies[i%users]))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Authorization", "Bearer "+tokens[i%users])
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, req)
						if !bytes.Contains(rec.Body.Bytes(), []byte(want)) {
							b.Errorf("answer %s, want %s", rec.Body.String(), want)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(cnt.Commands.Load()-start)/float64(b.N), "redis-cmds/grab")
				b.ReportMetric(float64(cnt.RoundTrips.Load()-startTrips)/float64(b.N), "round-trips/grab")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "grabs/s")
			})
		}
	}
}
