package sale_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"flashsale/bench/sale"
	"flashsale/internal/auth"
)

// fakeRedPackets speaks the red-packet part of the contract
// (createRedPacket, grabRedPacket) from memory: count packets of 100
// cents, one per user. With known false it answers as a schema without
// those fields does.
func fakeRedPackets(t *testing.T, known bool, count int) *httptest.Server {
	tokens := auth.NewTokens(secret)
	var mu sync.Mutex
	grabbed := map[int64]bool{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Query string }
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
		switch {
		case !known:
			_, _ = w.Write([]byte(`{"errors":[{"message":"Cannot query field \"createRedPacket\" on type \"Mutation\".","extensions":{"code":"GRAPHQL_VALIDATION_FAILED"}}],"data":null}`))
		case strings.Contains(req.Query, "createRedPacket"):
			_, _ = w.Write([]byte(`{"data":{"createRedPacket":{"id":"7"}}}`))
		case strings.Contains(req.Query, "grabRedPacket"):
			mu.Lock()
			defer mu.Unlock()
			switch {
			case grabbed[id.UserID]:
				_, _ = w.Write([]byte(`{"data":{"grabRedPacket":{"code":"ALREADY_GRABBED","amountCents":null}}}`))
			case len(grabbed) == count:
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
	return s
}

func TestRedPacketScenarioSpeaksTheContract(t *testing.T) {
	s := fakeRedPackets(t, true, 25)
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

func TestRedPacketScenarioSaysWhenTheTargetHasNone(t *testing.T) {
	s := fakeRedPackets(t, false, 0)
	_, err := sale.Run(t.Context(), sale.Config{
		Endpoint: sale.Endpoint{Name: "fake", API: sale.GraphQL, URLs: []string{s.URL}},
		Scenario: sale.RedPacket, Users: 10, Secret: secret,
	})
	if !errors.Is(err, sale.ErrNoRedPackets) || !strings.Contains(err.Error(), "does not know") {
		t.Errorf("err = %v, want ErrNoRedPackets saying the schema does not know the fields", err)
	}
}
