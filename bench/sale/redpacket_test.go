package sale_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"flashsale/bench/sale"
	"flashsale/domain"
	"flashsale/internal/auth"
)

// fakeRedPackets speaks the red-packet part of the contract
// (createRedPacket, grabRedPacket) from memory: red packets of packets of
// 100 cents, one per user, ids from 7 up. With known false it answers as
// a schema without those fields does.
func fakeRedPackets(t *testing.T, known bool) (*httptest.Server, *fakeLedger) {
	tokens := auth.NewTokens(secret)
	l := &fakeLedger{grabbed: map[string]map[int64]bool{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Query     string
			Variables struct {
				ID string
				In struct{ TotalCents, Count int }
			}
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, err := tokens.VerifyHeader(r.Header.Get("Authorization"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case !known:
			_, _ = w.Write([]byte(`{"errors":[{"message":"Cannot query field \"createRedPacket\" on type \"Mutation\".","extensions":{"code":"GRAPHQL_VALIDATION_FAILED"}}],"data":null}`))
		case strings.Contains(req.Query, "createRedPacket"):
			rp := fakeRedPacket{ID: strconv.Itoa(7 + len(l.created)), Creator: id.UserID, Count: req.Variables.In.Count, TotalCents: req.Variables.In.TotalCents}
			l.created = append(l.created, rp)
			l.grabbed[rp.ID] = map[int64]bool{}
			_, _ = fmt.Fprintf(w, `{"data":{"createRedPacket":{"id":%q}}}`, rp.ID)
		case strings.Contains(req.Query, "grabRedPacket"):
			rp := slices.IndexFunc(l.created, func(rp fakeRedPacket) bool { return rp.ID == req.Variables.ID })
			grabbed := l.grabbed[req.Variables.ID]
			switch {
			case rp < 0:
				_, _ = w.Write([]byte(`{"data":{"grabRedPacket":{"code":"NOT_FOUND","amountCents":null}}}`))
			case grabbed[id.UserID]:
				_, _ = w.Write([]byte(`{"data":{"grabRedPacket":{"code":"ALREADY_GRABBED","amountCents":null}}}`))
			case len(grabbed) == l.created[rp].Count:
				_, _ = w.Write([]byte(`{"data":{"grabRedPacket":{"code":"EMPTY","amountCents":null}}}`))
			default:
				grabbed[id.UserID] = true
				_, _ = w.Write([]byte(`{"data":{"grabRedPacket":{"code":"OK","amountCents":100}}}`))
			}
		default:
			http.Error(w, "unexpected query", http.StatusBadRequest)
		}
	})
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s, l
}

// fakeLedger is what a fakeRedPackets target was asked.
type fakeLedger struct {
	mu      sync.Mutex
	created []fakeRedPacket
	grabbed map[string]map[int64]bool // red packet id -> users who got a packet
}

type fakeRedPacket struct {
	ID                string
	Creator           int64
	Count, TotalCents int
}

func TestRedPacketScenarioSpeaksTheContract(t *testing.T) {
	s, _ := fakeRedPackets(t, true)
	rep, err := sale.Run(t.Context(), sale.Config{
		Endpoint: sale.Endpoint{Name: "fake", API: sale.GraphQL, URLs: []string{s.URL}},
		Scenario: sale.RedPacket, Users: 50, Attempts: 2, Stock: 25, Concurrency: 8, Secret: secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 || rep.OK != 25 || rep.Expect.TotalCents != 2500 {
		t.Errorf("violations %v, OK %d, total %d; want none, 25, 2500 (codes %v)", rep.Violations, rep.OK, rep.Expect.TotalCents, rep.Codes)
	}
	want := map[string]int{"OK": 25, "EMPTY": 50, "ALREADY_GRABBED": 25}
	for _, c := range rep.Codes {
		if want[c.Code] != c.Count {
			t.Errorf("code %s counted %d, want %d (codes %v)", c.Code, c.Count, want[c.Code], rep.Codes)
		}
	}
}

// A sale of more packets than the service allows in one red packet runs
// on several, as even as can be, each of its own creator, and its users
// grab all of them.
func TestRedPacketScenarioSplitsAStockOverTheLargestRedPacket(t *testing.T) {
	s, l := fakeRedPackets(t, true)
	stock := 2*domain.RedPacketMaxCount + 1
	rep, err := sale.Run(t.Context(), sale.Config{
		Endpoint: sale.Endpoint{Name: "fake", API: sale.GraphQL, URLs: []string{s.URL}},
		Scenario: sale.RedPacket, Users: 30, Attempts: 1, Stock: stock, Concurrency: 8, Secret: secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	counts, creators, packets, total := []int{}, map[int64]bool{}, 0, 0
	for _, rp := range l.created {
		counts = append(counts, rp.Count)
		creators[rp.Creator] = true
		packets += rp.Count
		total += rp.TotalCents
		if n := len(l.grabbed[rp.ID]); n != 10 {
			t.Errorf("red packet %s: %d users got a packet, want 10 (each user grabs one red packet)", rp.ID, n)
		}
	}
	if len(counts) != 3 || slices.Max(counts) > domain.RedPacketMaxCount || slices.Max(counts)-slices.Min(counts) > 1 ||
		packets != stock || len(creators) != 3 || total != 100*stock || int64(total) != rep.Expect.TotalCents {
		t.Errorf("created %v packets (creators %v, %d cents); want %d packets in 3 red packets of at most %d, as even as can be, of distinct creators, %d cents",
			counts, creators, total, stock, domain.RedPacketMaxCount, 100*stock)
	}
	if len(rep.Violations) > 0 || rep.OK != 30 || rep.SaleID != "7,8,9" {
		t.Errorf("violations %v, OK %d, sale %q; want none, 30, 7,8,9", rep.Violations, rep.OK, rep.SaleID)
	}
}

func TestRedPacketScenarioSaysWhenTheTargetHasNone(t *testing.T) {
	s, _ := fakeRedPackets(t, false)
	_, err := sale.Run(t.Context(), sale.Config{
		Endpoint: sale.Endpoint{Name: "fake", API: sale.GraphQL, URLs: []string{s.URL}},
		Scenario: sale.RedPacket, Users: 10, Secret: secret,
	})
	if !errors.Is(err, sale.ErrNoRedPackets) || !strings.Contains(err.Error(), "does not know") {
		t.Errorf("err = %v, want ErrNoRedPackets saying the schema does not know the fields", err)
	}
}
