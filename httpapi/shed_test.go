package httpapi_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

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
	// The grab scripts run through a proxy that can hold their replies:
	// the stand-in for a Redis that cannot keep up, so grabs queue on the
	// node.
	rs := testenv.MustRedis(t)
	proxy := testenv.MustProxy(t, rs.Addr())
	grabs := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { _ = grabs.Close() })
	n := nodetest.Start(t, nodetest.Options{Redis: rs, Env: map[string]string{"SHED_QUEUE_DEPTH": "10", "GRAPHQL_COMPILED_GRABS": "false"}, Hooks: node.Hooks{
		Actors:     func(o *actors.Options) { o.CallTimeout, o.GrabTimeout = 30*time.Second, 30*time.Second },
		GrabClient: func(redis.UniversalClient) redis.UniversalClient { return grabs },
	}})
	t.Cleanup(proxy.Resume) // before the node stops: its queued grabs are answered
	router := n.Router
	v := mustVoucher(t, n, testenv.VoucherSpec{Stock: 100})
	notStarted := mustVoucher(t, n, testenv.VoucherSpec{Stock: 100, Begin: time.Now().Add(time.Hour), End: time.Now().Add(2 * time.Hour)})
	vid, notStartedID := strconv.FormatInt(v.ID, 10), strconv.FormatInt(notStarted.ID, 10)
	// Both vouchers are loaded by a first grab before the replies are
	// held: from then on only the grab scripts wait.
	for _, w := range []struct {
		voucher int64
		want    domain.SeckillCode
	}{{v.ID, domain.SeckillOK}, {notStarted.ID, domain.SeckillNotStarted}} {
		if res := router.Grab(context.Background(), domain.GrabRequest{VoucherID: w.voucher, UserID: 99}); res.Code != w.want {
			t.Fatalf("first grab of voucher %d: %s, want %s", w.voucher, res.Code, w.want)
		}
	}
	proxy.Stall()
	user := n.Token(t, 2, auth.RoleUser)
	const ip = "198.51.100.77"
	codes := func(token, query string) string {
		_, c := post(t, n.GraphQL, ip, token, query)
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
			results <- codes(n.Token(t, int64(100+i), auth.RoleUser), `mutation { seckillVoucher(voucherId: "`+vid+`") { code } }`)
		}()
	}
	testenv.WaitFor(t, strconv.Itoa(rush)+" grabs queue on the node", func() bool { queued, _ := router.Load(); return queued >= rush })
	for _, tc := range []struct{ name, query, want string }{
		{"vouchers", vouchers, "UNAVAILABLE"},
		{"introspection", `{ __schema { queryType { name } } }`, "UNAVAILABLE"},
		{"stock", `{ stock(voucherId: "` + vid + `") { remaining } }`, ""},
		{"voucher", `{ voucher(id: "` + vid + `") { id } }`, ""},
		{"a grab decided from memory", `mutation { seckillVoucher(voucherId: "` + notStartedID + `") { code } }`, ""},
	} {
		if c := codes(user, tc.query); c != tc.want {
			t.Errorf("%s while grabs queue: codes %q, want %q", tc.name, c, tc.want)
		}
	}
	if g := gaugeValue(t, "flashsale_load_shedding"); g != 1 {
		t.Errorf("flashsale_load_shedding %v while shedding, want 1", g)
	}

	proxy.Resume()
	for range rush {
		if c := <-results; c != "" {
			t.Fatalf("a queued grab: %s", c)
		}
	}
	testenv.WaitFor(t, "vouchers are served again after the grabs drained", func() bool { return codes(user, vouchers) == "" })
	if g := gaugeValue(t, "flashsale_load_shedding"); g != 0 {
		t.Errorf("flashsale_load_shedding %v after shedding, want 0", g)
	}
}
