package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/internal/seckill"
	"flashsale/internal/testenv"
	"flashsale/persistence"
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
func BenchmarkGrab(b *testing.B) {
	s := newServer(b)
	log := slog.New(slog.DiscardHandler)
	const users = 4096
	tokens := make([]string, users)
	for i := range tokens {
		tokens[i], _ = s.tokens.Issue(auth.Identity{UserID: int64(i + 1), Role: auth.RoleUser}, time.Hour)
	}
	impls := []struct {
		name string
		make func(rdb *redis.Client) (seckill.Router, func())
		// tickets: the voucher requires grab tickets, the handler has the
		// gate and every grab carries its user's ticket.
		tickets bool
	}{
		{"batched", func(rdb *redis.Client) (seckill.Router, func()) {
			r := actors.NewRouter(persistence.NewGrabs(rdb), testenv.MustOrderIDs(b, s.db), s.catalog, log, actors.Options{})
			return r, r.Close
		}, false},
		{"batched+rate-limits", func(rdb *redis.Client) (seckill.Router, func()) {
			r := actors.NewRouter(persistence.NewGrabs(rdb), testenv.MustOrderIDs(b, s.db), s.catalog, log, actors.Options{
				UserRate: 1000,
			})
			return r, r.Close
		}, false},
		{"batched+tickets", func(rdb *redis.Client) (seckill.Router, func()) {
			r := actors.NewRouter(persistence.NewGrabs(rdb), testenv.MustOrderIDs(b, s.db), s.catalog, log, actors.Options{})
			return r, r.Close
		}, true},
		{"per-request-reference", func(rdb *redis.Client) (seckill.Router, func()) {
			return &perRequest{grabs: persistence.NewGrabs(rdb), rdb: rdb}, func() {}
		}, false},
	}
	for _, phase := range []string{"in-stock", "sold-out"} {
		for _, impl := range impls {
			b.Run(phase+"/"+impl.name, func(b *testing.B) {
				in := seckillInput(1, 100_000_000)
				in["perUserLimit"] = 1000
				if phase == "sold-out" {
					in["stock"] = 1
				}
				in["requireTicket"] = impl.tickets
				v := s.createVoucher(b, in)
				vid, _ := strconv.ParseInt(v.ID, 10, 64)
				var cnt testenv.Counter
				rdb := redis.NewClient(&redis.Options{Addr: s.redis.Addr(), PoolSize: 256})
				rdb.AddHook(&cnt)
				defer rdb.Close()
				grabber, closeFn := impl.make(rdb)
				defer closeFn()
				if p, ok := grabber.(*perRequest); ok {
					p.fence, _, _ = p.grabs.Claim(context.Background(), vid, 0)
				}
				if phase == "sold-out" {
					if res := grabber.Grab(context.Background(), domain.GrabRequest{VoucherID: vid, UserID: 999_999}); res.Code != domain.SeckillOK {
						b.Fatalf("selling the last unit: %s", res.Code)
					}
				}
				resolver := &graph.Resolver{Catalog: s.catalog, Seckill: seckill.New(nil, grabber)}
				if impl.tickets {
					resolver.Gate = s.gate
					resolver.Seckill = seckill.New(s.gate, grabber)
				}
				bodies := make([][]byte, users)
				for i := range bodies {
					bodies[i], _ = json.Marshal(map[string]any{"query": grabMutation, "variables": map[string]any{"id": v.ID}})
					if impl.tickets {
						ticket := s.gate.Tickets().Issue(int64(i+1), vid, time.Now().Add(time.Hour))
						bodies[i], _ = json.Marshal(map[string]any{"query": ticketGrabMutation, "variables": map[string]any{"id": v.ID, "ticket": ticket}})
					}
				}
				h := httpapi.NewHandler(resolver, httpapi.HandlerOptions{Tokens: s.tokens, Log: log})
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
