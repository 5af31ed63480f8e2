package graph_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"flashsale/internal/auth"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

const saleStatsSub = `subscription($v: ID!) { saleStats(voucherId: $v) {
  voucherId second grabs { code count } grabsTotal p50Ms p99Ms nodes remaining sold stored answeredOk waiting admitted } }`

type saleStatsEvent struct {
	VoucherID string
	Second    time.Time
	Grabs     []struct {
		Code  string
		Count int
	}
	GrabsTotal int
	P50Ms      *float64
	P99Ms      *float64
	Nodes      int
	Remaining  int
	Sold       int
	Stored     int
	AnsweredOk int
	Waiting    *int
	Admitted   *int
}

func nextSaleStats(tb testing.TB, c *websocket.Conn, id string, within time.Duration) saleStatsEvent {
	tb.Helper()
	var d struct{ SaleStats saleStatsEvent }
	nextData(tb, c, id, within, &d)
	return d.SaleStats
}

// A sale's figures are the cluster's: grabs answered by two nodes are
// counted, by answer, in the figures a subscriber of either node reads,
// once a second, with their latency, the stock and the stored orders.
func TestSaleStatsCountTheGrabsOfEveryNode(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 2)
	const stock = 5
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: stock})
	vid := strconv.FormatInt(v.ID, 10)

	c := nodetest.InitWS(t, nodes[1].http, s.admin(t))
	subscribeWS(t, c, "s", saleStatsSub, map[string]any{"v": vid})
	first := nextSaleStats(t, c, "s", 5*time.Second)
	if first.VoucherID != vid || first.Remaining != stock || first.GrabsTotal != 0 || first.P50Ms != nil || first.Waiting != nil {
		t.Fatalf("first event %+v, want the untouched voucher", first)
	}

	// Eight users, four on each node at once; the figures count what
	// the clients were answered (on the second node, the voucher's segment
	// is the first's: its grabs wait for the lease and may be UNAVAILABLE).
	answered := make(chan string, 8)
	for u := range 8 {
		go func() { answered <- postGrab(t, nodes[u%2].http.URL, s.token(t, int64(100+u), auth.RoleUser), vid) }()
	}
	codes := map[string]int{}
	maxNodes := 0
	var last saleStatsEvent
	deadline := time.Now().Add(6 * time.Second)
	want := map[string]int{}
	var sum int
	for range 8 {
		want[<-answered]++
	}
	for sum < 8 || last.Stored < want["OK"] {
		if time.Now().After(deadline) {
			t.Fatalf("counted %v over the events (at most %d nodes a second), last %+v; the clients were answered %v", codes, maxNodes, last, want)
		}
		last = nextSaleStats(t, c, "s", 3*time.Second)
		for _, g := range last.Grabs {
			codes[g.Code] += g.Count
			sum += g.Count
		}
		maxNodes = max(maxNodes, last.Nodes)
		if last.GrabsTotal > 0 && (last.P50Ms == nil || last.P99Ms == nil || *last.P50Ms > *last.P99Ms || *last.P50Ms <= 0) {
			t.Fatalf("a second with %d grabs has latency p50 %v p99 %v", last.GrabsTotal, last.P50Ms, last.P99Ms)
		}
	}
	for code, n := range codes {
		if n != want[code] {
			t.Errorf("counted %v, want what the clients were answered: %v", codes, want)
			break
		}
	}
	if len(codes) != 10 || want["OK"] < 4 {
		t.Errorf("counted %v: want every answer listed, and at least the first node's four sales", codes)
	}
	if last.Remaining != stock-want["OK"] || last.Sold != want["OK"] || last.AnsweredOk != want["OK"] {
		t.Errorf("last event %+v, want %d sold and answered OK", last, want["OK"])
	}
	t.Logf("at most %d nodes reported in one second", maxNodes)
}

// The console's fields are the admin's: a user's subscription to a sale's
// figures and their look at another user's orders are refused, an admin
// reads any user's orders.
func TestConsoleFieldsAreAdminOnly(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 1)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 3})
	vid := strconv.FormatInt(v.ID, 10)
	user := s.token(t, 42, auth.RoleUser)

	c := nodetest.InitWS(t, nodes[0].http, user)
	subscribeWS(t, c, "s", saleStatsSub, map[string]any{"v": vid})
	m := nodetest.ReadUntil(t, c, "error", "next")
	if !strings.Contains(string(m.Payload), `"FORBIDDEN"`) || strings.Contains(string(m.Payload), `"saleStats"`) {
		t.Fatalf("a user's saleStats got %s %s, want FORBIDDEN", m.Type, m.Payload)
	}

	var grab struct {
		SeckillVoucher struct{ Code, OrderID string }
	}
	s.mustDo(t, user, `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code orderId } }`, map[string]any{"v": vid}, &grab)
	if grab.SeckillVoucher.Code != "OK" {
		t.Fatalf("grab: %+v", grab)
	}
	const q = `query($u: ID!) { userOrders(userId: $u) { edges { node { id userId voucherId status } } } }`
	wantCode(t, s.do(t, user, q, map[string]any{"u": "42"}, nil), "FORBIDDEN")
	var out struct {
		UserOrders struct {
			Edges []struct {
				Node struct{ ID, UserID, VoucherID, Status string }
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(out.UserOrders.Edges) == 0 && time.Now().Before(deadline) {
		s.mustDo(t, s.admin(t), q, map[string]any{"u": "42"}, &out)
		time.Sleep(50 * time.Millisecond)
	}
	if len(out.UserOrders.Edges) != 1 || out.UserOrders.Edges[0].Node.ID != grab.SeckillVoucher.OrderID || out.UserOrders.Edges[0].Node.UserID != "42" {
		t.Fatalf("an admin's userOrders of user 42: %+v, want order %s", out.UserOrders, grab.SeckillVoucher.OrderID)
	}
	var none struct{ UserOrders struct{ Edges []any } }
	s.mustDo(t, s.admin(t), q, map[string]any{"u": "43"}, &none)
	if len(none.UserOrders.Edges) != 0 {
		t.Fatalf("user 43 has no orders, got %v", none.UserOrders.Edges)
	}
}

// postGrab grabs over HTTP at a node's /query and returns the answer's
// code (FORBIDDEN for the gate's refusal).
func postGrab(tb testing.TB, base, token, voucherID string) string {
	tb.Helper()
	body, _ := json.Marshal(map[string]any{"query": `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }`, "variables": map[string]any{"v": voucherID}})
	req, _ := http.NewRequest(http.MethodPost, base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			SeckillVoucher *struct{ Code string }
		}
		Errors []gqlError
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		tb.Error(err)
		return ""
	}
	if out.Data.SeckillVoucher != nil {
		return out.Data.SeckillVoucher.Code
	}
	if len(out.Errors) > 0 {
		return out.Errors[0].code()
	}
	return ""
}

// Every node of the cluster is in the view, each with the segments it
// hosts and its Redis settings, within a couple of seconds of its start;
// a user may not see it.
func TestClusterNodesListsEveryNode(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 2)
	v := testenv.MustVoucher(t, s.db, s.rdb, testenv.VoucherSpec{Stock: 3})
	vid := strconv.FormatInt(v.ID, 10)
	postGrab(t, nodes[0].http.URL, s.token(t, 7, auth.RoleUser), vid)

	const q = `{ clusterNodes { id httpAddr member members segments redisMode redis primaries ackReplicas ackTimeoutMs ackAof held { voucherId why } at } }`
	wantCode(t, s.do(t, s.token(t, 7, auth.RoleUser), q, nil, nil), "FORBIDDEN")
	type node struct {
		ID, HTTPAddr, RedisMode, Redis string
		Segments, Primaries            []string
		AckReplicas                    int
		At                             time.Time
	}
	var out struct{ ClusterNodes []node }
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mustDo(t, s.admin(t), q, nil, &out)
		hosting := 0
		for _, n := range out.ClusterNodes {
			if slices.Contains(n.Segments, vid+"/0") {
				hosting++
			}
		}
		if len(out.ClusterNodes) == 2 && hosting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster view %+v: want both nodes, one hosting segment %s/0", out.ClusterNodes, vid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range out.ClusterNodes {
		if n.ID == "" || n.HTTPAddr == "" || n.RedisMode != "single" || n.Redis != s.redis.Addr() || len(n.Primaries) != 1 || time.Since(n.At) > 5*time.Second {
			t.Errorf("node %+v: want its id, address, Redis and a fresh report", n)
		}
	}
	if out.ClusterNodes[0].ID == out.ClusterNodes[1].ID {
		t.Errorf("both nodes report as %s", out.ClusterNodes[0].ID)
	}
}

// A voucher with a waiting room shows it: the users waiting and those
// admitted; one without shows neither.
func TestSaleStatsShowTheWaitingRoom(t *testing.T) {
	t.Parallel()
	s, nodes := newLiveNodes(t, 1)
	v := s.createVoucher(t, roomInput(5, 100, 1000))
	for u := range 3 {
		s.joinQueue(t, int64(200+u), v.ID)
	}
	c := nodetest.InitWS(t, nodes[0].http, s.admin(t))
	subscribeWS(t, c, "s", saleStatsSub, map[string]any{"v": v.ID})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev := nextSaleStats(t, c, "s", 3*time.Second)
		if ev.Waiting == nil || ev.Admitted == nil {
			t.Fatalf("a voucher with a waiting room: %+v, want its figures", ev)
		}
		if *ev.Waiting+*ev.Admitted == 3 && *ev.Admitted > 0 {
			t.Logf("waiting %d, admitted %d", *ev.Waiting, *ev.Admitted)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %d, admitted %d: want the three users, admitted at the room's pace", *ev.Waiting, *ev.Admitted)
		}
	}
}
