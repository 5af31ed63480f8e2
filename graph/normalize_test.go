package graph_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/internal/auth"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

// A normalized client cache (Apollo's InMemoryCache, urql's Graphcache)
// keys an object by __typename and id: a voucher's seckill answers the
// voucher's id wherever it appears, a stock update is the voucher's id
// too, and a stock update's seckill carries the update's own remaining,
// so the update lands on the cached object.
func TestSeckillInfoIsOneObjectPerVoucher(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	v := s.createVoucher(t, seckillInput(1, 10))
	user := s.token(t, 2, auth.RoleUser)
	if code := s.grab(t, 2, v.ID, "", ""); code != "OK" {
		t.Fatalf("grab: %s", code)
	}
	const q = `query($v: ID!) {
  voucher(id: $v) { id seckill { id remaining initialStock perUserLimit beginAt endAt segments requireTicket challenge } }
  vouchers(first: 100) { edges { node { id seckill { id } } } }
  stock(voucherId: $v) { id voucherId remaining sold seckill { id remaining initialStock perUserLimit beginAt endAt segments requireTicket challenge } }
}`
	type info struct {
		ID                                    string
		Remaining, InitialStock, PerUserLimit int
		BeginAt, EndAt                        time.Time
		Segments                              int
		RequireTicket                         bool
		Challenge                             string
	}
	var out struct {
		Voucher struct {
			ID      string
			Seckill info
		}
		Vouchers struct {
			Edges []struct {
				Node struct {
					ID      string
					Seckill *struct{ ID string }
				}
			}
		}
		Stock struct {
			ID, VoucherID   string
			Remaining, Sold int
			Seckill         info
		}
	}
	s.mustDo(t, user, q, map[string]any{"v": v.ID}, &out)
	if out.Voucher.Seckill.ID != v.ID || out.Stock.Seckill.ID != v.ID || out.Stock.ID != v.ID {
		t.Fatalf("seckill ids %q (voucher) and %q (stock), stock's id %q; want the voucher's %q", out.Voucher.Seckill.ID, out.Stock.Seckill.ID, out.Stock.ID, v.ID)
	}
	listed := false
	for _, e := range out.Vouchers.Edges {
		if e.Node.ID == v.ID {
			listed = e.Node.Seckill != nil && e.Node.Seckill.ID == v.ID
		}
	}
	if !listed {
		t.Fatalf("voucher %s not listed with its seckill id: %+v", v.ID, out.Vouchers)
	}
	st := out.Stock
	if st.Seckill.Remaining != st.Remaining || st.Remaining != 9 || st.Seckill.InitialStock != st.Remaining+st.Sold {
		t.Fatalf("stock %+v: its seckill must carry its own remaining (9) and initialStock", st)
	}
	want := out.Voucher.Seckill
	want.Remaining, want.InitialStock = st.Seckill.Remaining, st.Seckill.InitialStock
	if got := st.Seckill; !got.BeginAt.Equal(want.BeginAt) || !got.EndAt.Equal(want.EndAt) {
		t.Fatalf("stock's seckill times %v..%v, want the voucher's %v..%v", got.BeginAt, got.EndAt, want.BeginAt, want.EndAt)
	}
	got := st.Seckill
	got.BeginAt, got.EndAt, want.BeginAt, want.EndAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Fatalf("stock's seckill %+v, want the voucher's terms %+v", got, want)
	}
}

// A stockChanged event carries seckill { id remaining } equal to the
// event's own stock, so a client cache updates Voucher.seckill.remaining
// from the event alone.
func TestStockChangedCarriesTheSeckillToCache(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 1)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 5})
	vid := strconv.FormatInt(v.ID, 10)
	c := nodetest.InitWS(t, nodes[0].http, s.token(t, 2, auth.RoleUser))
	subscribeWS(t, c, "s", `subscription($v: ID!) { stockChanged(voucherId: $v) { id voucherId remaining seckill { __typename id remaining } } }`, map[string]any{"v": vid})
	type event struct {
		StockChanged struct {
			ID        string
			VoucherID string
			Remaining int
			Seckill   struct {
				Typename  string `json:"__typename"`
				ID        string
				Remaining int
			}
		}
	}
	check := func(e event, remaining int) {
		t.Helper()
		sc := e.StockChanged
		if sc.ID != vid || sc.Remaining != remaining || sc.Seckill.Typename != "SeckillInfo" || sc.Seckill.ID != vid || sc.Seckill.Remaining != remaining {
			t.Fatalf("event %+v, want remaining %d on SeckillInfo %s", sc, remaining, vid)
		}
	}
	var first event
	nextData(t, c, "s", time.Second, &first)
	check(first, 5)
	if res := nodes[0].router.Grab(context.Background(), domain.GrabRequest{VoucherID: v.ID, UserID: 3}); res.Code != domain.SeckillOK {
		t.Fatalf("grab: %s", res.Code)
	}
	var next event
	nextData(t, c, "s", 5*time.Second, &next)
	check(next, 4)
}

// termsCatalog answers the stock of voucher 7 and counts the voucher
// reads; termsGate counts the reads of the node's cached terms.
type termsCatalog struct {
	graph.Catalog
	gets atomic.Int64
}

func (c *termsCatalog) Stock(_ context.Context, id int64) (domain.StockLevel, error) {
	return domain.StockLevel{VoucherID: id, Initial: 10, Remaining: 4, At: time.Now()}, nil
}

func (c *termsCatalog) Get(_ context.Context, id int64) (domain.Voucher, error) {
	c.gets.Add(1)
	return domain.Voucher{ID: id, Type: domain.VoucherSeckill, Seckill: &domain.Seckill{InitialStock: 99, Remaining: 99, PerUserLimit: 3, Segments: 2}}, nil
}

type termsGate struct {
	graph.Gate
	reads atomic.Int64
}

func (g *termsGate) Now() time.Time { return time.Now() }

func (g *termsGate) Terms(_ context.Context, _ int64) (domain.Seckill, error) {
	g.reads.Add(1)
	return domain.Seckill{PerUserLimit: 3, Segments: 2}, nil
}

// resolverOnly is gqlgen's executor over r behind the token check, with
// nothing of the HTTP edge (httpapi) in front: a resolver's answers over
// stand-ins a node does not have (a server without a gate).
func resolverOnly(r *graph.Resolver, tokens *auth.Tokens) http.Handler {
	srv := handler.New(graph.NewExecutableSchema(graph.Config{Resolvers: r}))
	srv.AddTransport(transport.POST{})
	return tokens.Middleware(srv)
}

// A stock update's seckill is built from the update itself when the
// selection asks only for what it carries (what a cache needs: no read
// at all), and takes the voucher's terms from the gate's per-node cache
// (never the database) when it asks for more; a server without a gate
// reads them from the catalog.
func TestStockSeckillReadsTermsOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	tokens := auth.NewTokens(testSecret)
	user, err := tokens.Issue(auth.Identity{UserID: 2, Role: auth.RoleUser}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	post := func(h http.Handler, query string) string {
		b, _ := json.Marshal(map[string]any{"query": query})
		req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+user)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Body.String()
	}
	const (
		cached = `{ stock(voucherId: 7) { seckill { __typename id remaining initialStock } } }`
		terms  = `{ stock(voucherId: 7) { seckill { id remaining perUserLimit segments } } }`
	)
	for _, tc := range []struct {
		name               string
		withGate           bool
		query, want        string
		wantGets, wantGate int64
	}{
		{"cache fields read nothing", true, cached, `{"data":{"stock":{"seckill":{"__typename":"SeckillInfo","id":"7","remaining":4,"initialStock":10}}}}`, 0, 0},
		{"terms come from the gate's cache", true, terms, `{"data":{"stock":{"seckill":{"id":"7","remaining":4,"perUserLimit":3,"segments":2}}}}`, 0, 1},
		{"without a gate, cache fields read nothing", false, cached, `{"data":{"stock":{"seckill":{"__typename":"SeckillInfo","id":"7","remaining":4,"initialStock":10}}}}`, 0, 0},
		{"without a gate, terms come from the catalog", false, terms, `{"data":{"stock":{"seckill":{"id":"7","remaining":4,"perUserLimit":3,"segments":2}}}}`, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cat, gate := &termsCatalog{}, &termsGate{}
			r := &graph.Resolver{Catalog: cat}
			if tc.withGate {
				r.Gate = gate
			}
			if got := post(resolverOnly(r, tokens), tc.query); got != tc.want {
				t.Fatalf("answer %s\nwant   %s", got, tc.want)
			}
			if cat.gets.Load() != tc.wantGets || gate.reads.Load() != tc.wantGate {
				t.Fatalf("catalog reads %d, gate reads %d; want %d and %d", cat.gets.Load(), gate.reads.Load(), tc.wantGets, tc.wantGate)
			}
		})
	}
}
