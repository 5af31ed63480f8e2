package graph_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/graph"
	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/internal/seckill"
	"flashsale/internal/testenv"
	"flashsale/persistence"
)

// gatedStore holds every grab script call until the gate opens: the
// stand-in for a Redis that cannot keep up, so grabs queue on the node.
type gatedStore struct {
	*persistence.Grabs
	gate chan struct{}
}

func (s gatedStore) Grab(ctx context.Context, voucherID int64, seg int, fence int64, grabs []domain.Grab) (domain.BatchOutcome, error) {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return domain.BatchOutcome{}, ctx.Err()
	}
	return s.Grabs.Grab(ctx, voucherID, seg, fence, grabs)
}

func gaugeValue(tb testing.TB, name string) float64 {
	tb.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	tb.Fatalf("no metric %s", name)
	return 0
}

// While grabs queue on the node past SHED_QUEUE_DEPTH, non-core operations
// (vouchers, introspection) are answered UNAVAILABLE at once, while grabs,
// stock and the single voucher are still answered; once the queue has
// drained and stayed low, they are served again.
func TestNonCoreOperationsAreShedWhileGrabsQueue(t *testing.T) {
	s := newServer(t)
	log := slog.New(slog.DiscardHandler)
	gate := make(chan struct{})
	router := actors.NewRouter(gatedStore{persistence.NewGrabs(s.rdb), gate}, testenv.MustOrderIDs(t, s.db), s.catalog, log,
		actors.Options{CallTimeout: 30 * time.Second, GrabTimeout: 30 * time.Second})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(func() { open(); router.Close() })
	h := httpapi.NewHandler(&graph.Resolver{Catalog: s.catalog, Seckill: seckill.New(nil, router)}, httpapi.HandlerOptions{
		Tokens: s.tokens, Log: log, Introspection: graph.IntrospectionPublic,
		Shed: httpapi.LoadShedding{Gauge: router, QueueDepth: 10},
	})
	v := s.createVoucher(t, seckillInput(1, 100))
	later := seckillInput(1, 100)
	later["beginAt"] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	later["endAt"] = time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	notStarted := s.createVoucher(t, later)
	user := s.token(t, 2, auth.RoleUser)
	const ip = "198.51.100.77"
	codes := func(token, query string) string {
		_, c := post(t, h, ip, token, query)
		return strings.Join(c, ",")
	}
	vouchers := `{ vouchers { edges { node { id } } } }`
	if c := codes(user, vouchers); c != "" {
		t.Fatalf("vouchers before the rush: %s", c)
	}

	const rush = 20
	results := make(chan string, rush)
	for i := range rush {
		go func() {
			results <- codes(s.token(t, int64(100+i), auth.RoleUser), `mutation { seckillVoucher(voucherId: "`+v.ID+`") { code } }`)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for queued, _ := router.Load(); queued < rush; queued, _ = router.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("%d grabs queued, want %d", queued, rush)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, tc := range []struct{ name, query, want string }{
		{"vouchers", vouchers, "UNAVAILABLE"},
		{"introspection", `{ __schema { queryType { name } } }`, "UNAVAILABLE"},
		{"stock", `{ stock(voucherId: "` + v.ID + `") { remaining } }`, ""},
		{"voucher", `{ voucher(id: "` + v.ID + `") { id } }`, ""},
		{"a grab decided from memory", `mutation { seckillVoucher(voucherId: "` + notStarted.ID + `") { code } }`, ""},
	} {
		if c := codes(user, tc.query); c != tc.want {
			t.Errorf("%s while grabs queue: codes %q, want %q", tc.name, c, tc.want)
		}
	}
	if g := gaugeValue(t, "flashsale_load_shedding"); g != 1 {
		t.Errorf("flashsale_load_shedding %v while shedding, want 1", g)
	}

	open()
	for range rush {
		if c := <-results; c != "" {
			t.Fatalf("a queued grab: %s", c)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for codes(user, vouchers) != "" {
		if time.Now().After(deadline) {
			t.Fatal("vouchers still shed 10 s after the grabs drained")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if g := gaugeValue(t, "flashsale_load_shedding"); g != 0 {
		t.Errorf("flashsale_load_shedding %v after shedding, want 0", g)
	}
}
