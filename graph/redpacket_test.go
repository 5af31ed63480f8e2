package graph_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"flashsale/internal/auth"
)

const (
	createRedPacketMutation = `mutation($in: CreateRedPacketInput!) {
  createRedPacket(input: $in) { id creatorId totalCents count remainingCount remainingCents expiresAt }
}`
	grabRedPacketMutation = `mutation($id: ID!, $req: String) { grabRedPacket(id: $id, requestId: $req) { code amountCents message } }`
	redPacketQuery        = `query($id: ID!) { redPacket(id: $id) { id creatorId totalCents count remainingCount remainingCents expiresAt } }`
)

type redPacketData struct {
	ID             string    `json:"id"`
	CreatorID      string    `json:"creatorId"`
	TotalCents     int64     `json:"totalCents"`
	Count          int       `json:"count"`
	RemainingCount int       `json:"remainingCount"`
	RemainingCents int64     `json:"remainingCents"`
	ExpiresAt      time.Time `json:"expiresAt"`
}

type grabRedPacketData struct {
	Code        string `json:"code"`
	AmountCents *int64 `json:"amountCents"`
	Message     string `json:"message"`
}

func (s *testServer) createRedPacket(tb testing.TB, user int64, total int64, count int, expires int) redPacketData {
	tb.Helper()
	var out struct{ CreateRedPacket redPacketData }
	s.mustDo(tb, s.token(tb, user, auth.RoleUser), createRedPacketMutation,
		map[string]any{"in": map[string]any{"totalCents": total, "count": count, "expiresInSeconds": expires}}, &out)
	return out.CreateRedPacket
}

func (s *testServer) grabRedPacket(tb testing.TB, token, id, req string) grabRedPacketData {
	tb.Helper()
	vars := map[string]any{"id": id}
	if req != "" {
		vars["req"] = req
	}
	var out struct{ GrabRedPacket grabRedPacketData }
	s.mustDo(tb, token, grabRedPacketMutation, vars, &out)
	return out.GrabRedPacket
}

// TestRedPacketRushThroughGraphQL is the rush a red packet is made for:
// 5,000 users each grab a 1,000-packet red packet twice, all at once,
// through the GraphQL handler. Exactly 1,000 grabs are OK, to distinct
// users, their amounts (each at least 1 cent) sum to the total, every other
// answer is EMPTY or ALREADY_GRABBED, and once the writer drained,
// tb_red_packet_grab holds exactly the packets the OK answers named.
func TestRedPacketRushThroughGraphQL(t *testing.T) {
	t.Parallel()
	const users, packets, total = 5000, 1000, 123_457
	s := newServer(t)
	rp := s.createRedPacket(t, 99, total, packets, 3600)
	if rp.RemainingCount != packets || rp.RemainingCents != total || rp.CreatorID != "99" {
		t.Fatalf("created %+v", rp)
	}
	type job struct {
		user   int64
		code   string
		amount int64
	}
	jobs := make([]job, 0, 2*users)
	for u := range int64(users) {
		jobs = append(jobs, job{user: 1000 + u}, job{user: 1000 + u})
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	tokens := make(map[int64]string, users)
	for _, j := range jobs {
		if tokens[j.user] == "" {
			tokens[j.user] = s.token(t, j.user, auth.RoleUser)
		}
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				j := &jobs[i]
				rec := s.post(tokens[j.user], grabRedPacketMutation, map[string]any{"id": rp.ID})
				var resp struct {
					Data   struct{ GrabRedPacket grabRedPacketData }
					Errors []gqlError
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp.Errors) > 0 {
					t.Errorf("grab: %v %s", err, rec.Body.String())
					continue
				}
				j.code = resp.Data.GrabRedPacket.Code
				if a := resp.Data.GrabRedPacket.AmountCents; a != nil {
					j.amount = *a
				}
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()

	won := map[int64]int64{}
	var sum int64
	counts := map[string]int{}
	for _, j := range jobs {
		counts[j.code]++
		switch j.code {
		case "OK":
			if _, dup := won[j.user]; dup {
				t.Fatalf("user %d got two packets", j.user)
			}
			if j.amount < 1 {
				t.Fatalf("user %d got %d cents", j.user, j.amount)
			}
			won[j.user] = j.amount
			sum += j.amount
		case "EMPTY", "ALREADY_GRABBED":
		default:
			t.Fatalf("unexpected answer %q for user %d", j.code, j.user)
		}
	}
	if len(won) != packets || sum != total {
		t.Fatalf("%d OK (%v) summing to %d cents, want %d summing to %d", len(won), counts, sum, packets, total)
	}
	for _, j := range jobs { // a winner's other grab says what they got
		if j.code == "ALREADY_GRABBED" && j.amount != won[j.user] {
			t.Fatalf("user %d told ALREADY_GRABBED with %d cents, won %d", j.user, j.amount, won[j.user])
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.rpWriter.WaitDrained(ctx); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		UserID      int64 `bun:"user_id"`
		AmountCents int64 `bun:"amount_cents"`
	}
	if err := s.db.NewSelect().TableExpr("tb_red_packet_grab").Column("user_id", "amount_cents").
		Where("red_packet_id = ?", rp.ID).Scan(t.Context(), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != packets {
		t.Fatalf("database holds %d grabs, want %d", len(rows), packets)
	}
	for _, r := range rows {
		if won[r.UserID] != r.AmountCents {
			t.Fatalf("database: user %d got %d cents, the answer said %d", r.UserID, r.AmountCents, won[r.UserID])
		}
	}
	var after struct{ RedPacket redPacketData }
	s.mustDo(t, s.token(t, 5, auth.RoleUser), redPacketQuery, map[string]any{"id": rp.ID}, &after)
	if after.RedPacket.RemainingCount != 0 || after.RedPacket.RemainingCents != 0 {
		t.Fatalf("after the rush: %+v", after.RedPacket)
	}
}

func TestRedPacketGrabOutcomes(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	rp := s.createRedPacket(t, 1, 10, 2, 3600)
	u2, u3, u4 := s.token(t, 2, auth.RoleUser), s.token(t, 3, auth.RoleUser), s.token(t, 4, auth.RoleUser)
	first := s.grabRedPacket(t, u2, rp.ID, "k1")
	if first.Code != "OK" || first.AmountCents == nil {
		t.Fatalf("first grab: %+v", first)
	}
	if again := s.grabRedPacket(t, u2, rp.ID, "k1"); again.Code != "OK" || *again.AmountCents != *first.AmountCents {
		t.Fatalf("retry with the same key: %+v, want OK with %d", again, *first.AmountCents)
	}
	if other := s.grabRedPacket(t, u2, rp.ID, ""); other.Code != "ALREADY_GRABBED" || *other.AmountCents != *first.AmountCents {
		t.Fatalf("second grab: %+v", other)
	}
	if second := s.grabRedPacket(t, u3, rp.ID, ""); second.Code != "OK" || *second.AmountCents+*first.AmountCents != 10 {
		t.Fatalf("last packet: %+v", second)
	}
	if late := s.grabRedPacket(t, u4, rp.ID, ""); late.Code != "EMPTY" || late.AmountCents != nil {
		t.Fatalf("after the last packet: %+v", late)
	}
	if unknown := s.grabRedPacket(t, u4, "424242", ""); unknown.Code != "NOT_FOUND" {
		t.Fatalf("unknown red packet: %+v", unknown)
	}
	short := s.createRedPacket(t, 1, 10, 2, 1)
	time.Sleep(1100 * time.Millisecond)
	if expired := s.grabRedPacket(t, u4, short.ID, ""); expired.Code != "EXPIRED" {
		t.Fatalf("expired red packet: %+v", expired)
	}
}

// A user with ten open red packets (the default quota) gets RATE_LIMITED
// for an eleventh, with a retryAfterMs until the earliest one's refund
// and a message that says why, and nothing is stored; once one of the ten
// is fully grabbed, the same request passes.
func TestRedPacketQuotaThroughGraphQL(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	creator := s.token(t, 5, auth.RoleUser)
	var first redPacketData
	for i := range 10 {
		rp := s.createRedPacket(t, 5, 20, 2, 3600+i)
		if i == 0 {
			first = rp
		}
	}
	in := map[string]any{"in": map[string]any{"totalCents": 20, "count": 2, "expiresInSeconds": 3600}}
	var out struct{ CreateRedPacket *redPacketData }
	e := wantCode(t, s.do(t, creator, createRedPacketMutation, in, &out), "RATE_LIMITED")
	if out.CreateRedPacket != nil {
		t.Fatalf("refused, yet created %+v", out.CreateRedPacket)
	}
	want := "you have 10 open red packets, the limit per user is 10: one frees up once it is fully grabbed, " +
		"or at the latest when the earliest expires (" + first.ExpiresAt.UTC().Format(time.RFC3339) + ") and its rest is refunded to you"
	if e.Message != want {
		t.Errorf("message %q, want %q", e.Message, want)
	}
	ms, _ := e.Extensions["retryAfterMs"].(float64)
	if until := time.Until(first.ExpiresAt); time.Duration(ms)*time.Millisecond < until || time.Duration(ms)*time.Millisecond > until+time.Minute {
		t.Errorf("retryAfterMs %v, want the %s until the earliest expiry and its refund", e.Extensions["retryAfterMs"], until)
	}
	if n, err := s.db.NewSelect().TableExpr("tb_red_packet").Where("creator_id = 5").Count(t.Context()); err != nil || n != 10 {
		t.Fatalf("user 5 has %d red packets (%v), want 10", n, err)
	}

	for u := int64(20); u < 22; u++ {
		if g := s.grabRedPacket(t, s.token(t, u, auth.RoleUser), first.ID, ""); g.Code != "OK" {
			t.Fatalf("grab of user %d: %+v", u, g)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.rpWriter.WaitDrained(ctx); err != nil {
		t.Fatal(err)
	}
	s.mustDo(t, creator, createRedPacketMutation, in, &out)
	wantCode(t, s.do(t, creator, createRedPacketMutation, in, nil), "RATE_LIMITED")
}

func TestRedPacketBadInput(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	user := s.token(t, 2, auth.RoleUser)
	for _, tc := range []struct {
		name  string
		in    map[string]any
		field string
	}{
		{"no packets", map[string]any{"totalCents": 10, "count": 0}, "count"},
		{"over 5,000 packets", map[string]any{"totalCents": 1_000_000, "count": 5_001}, "count"},
		{"less than a cent a packet", map[string]any{"totalCents": 5, "count": 6}, "totalCents"},
		{"a negative sum", map[string]any{"totalCents": -100, "count": 1}, "totalCents"},
		{"over 100,000,000 cents", map[string]any{"totalCents": 100_000_001, "count": 1}, "totalCents"},
		{"a zero expiry", map[string]any{"totalCents": 10, "count": 1, "expiresInSeconds": 0}, "expiresInSeconds"},
		{"a negative expiry", map[string]any{"totalCents": 10, "count": 1, "expiresInSeconds": -2147483648}, "expiresInSeconds"},
		{"over a week", map[string]any{"totalCents": 10, "count": 1, "expiresInSeconds": 604_801}, "expiresInSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := wantCode(t, s.do(t, user, createRedPacketMutation, map[string]any{"in": tc.in}, nil), "BAD_USER_INPUT")
			if e.Extensions["field"] != tc.field {
				t.Fatalf("field %v, want %s (%s)", e.Extensions["field"], tc.field, e.Message)
			}
		})
	}
	n, err := s.db.NewSelect().TableExpr("tb_red_packet").Count(t.Context())
	if err != nil || n != 0 {
		t.Fatalf("bad input created %d red packets (%v)", n, err)
	}
	t.Run("an unknown red packet is NOT_FOUND", func(t *testing.T) {
		wantCode(t, s.do(t, user, redPacketQuery, map[string]any{"id": "987654"}, nil), "NOT_FOUND")
	})
	t.Run("a bad request id", func(t *testing.T) {
		wantCode(t, s.do(t, user, grabRedPacketMutation, map[string]any{"id": "1", "req": ""}, nil), "BAD_USER_INPUT")
	})
	t.Run("no token", func(t *testing.T) {
		wantCode(t, s.do(t, "", grabRedPacketMutation, map[string]any{"id": "1"}, nil), "UNAUTHENTICATED")
	})
}
