package graph_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/graph"
	"flashsale/graph/model"
	"flashsale/httpapi"
	"flashsale/internal/auth"
)

// outcomeSeckill answers each voucher id with a scripted grab outcome,
// and a grab with the ticket "forged" with the gate's refusal.
type outcomeSeckill struct{}

var scriptedGrabs = map[int64]domain.GrabResult{
	1: {Code: domain.SeckillOK, OrderID: 7301234567890123456},
	2: {Code: domain.SeckillSoldOut},
	3: {Code: domain.SeckillNotFound},
	4: {Code: domain.SeckillNotStarted},
	5: {Code: domain.SeckillEnded},
	6: {Code: domain.SeckillPaused},
	7: {Code: domain.SeckillLimitReached},
	8: {Code: domain.SeckillUnavailable},
	9: {Code: domain.SeckillRateLimited, RetryAfter: 1500 * time.Millisecond},
}

func (outcomeSeckill) Grab(_ context.Context, req domain.GrabRequest, ticket string) (domain.GrabResult, error) {
	if ticket == "forged" {
		return domain.GrabResult{}, domain.Errorf(domain.CodeForbidden, "this voucher needs a valid grab ticket")
	}
	return scriptedGrabs[req.VoucherID], nil
}

// A grab's answer comes on one of two channels, as the contract says:
// business outcomes as data.seckillVoucher.code, and refusals of the
// request (UNAUTHENTICATED, FORBIDDEN, RATE_LIMITED with retryAfterMs,
// BAD_USER_INPUT) as exactly one error with data null. The two sets of
// codes never overlap for a grab, so a client reads its outcome in one
// place as errors[0].extensions.code, else data.seckillVoucher.code. The
// compiled grab path and gqlgen's executor answer every case alike.
func TestGrabOutcomesComeOnTheirContractChannel(t *testing.T) {
	t.Parallel()
	tokens := auth.NewTokens(testSecret)
	user, err := tokens.Issue(auth.Identity{UserID: 42, Role: auth.RoleUser}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := &graph.Resolver{Seckill: outcomeSeckill{}}
	opts := httpapi.HandlerOptions{Tokens: tokens, Log: slog.New(slog.DiscardHandler)}
	executor := httpapi.NewHandler(r, opts)
	opts.CompiledGrabs = true
	compiled := httpapi.NewHandler(r, opts)
	const (
		plain    = `mutation($id: ID!, $ticket: String, $req: String) { seckillVoucher(voucherId: $id, ticket: $ticket, requestId: $req) { code orderId message } }`
		fragment = `mutation($id: ID!, $ticket: String, $req: String) { seckillVoucher(voucherId: $id, ticket: $ticket, requestId: $req) { ... on SeckillResult { code orderId message } } }`
	)
	type answer struct {
		Data *struct {
			SeckillVoucher *struct {
				Code    string
				OrderID *string
			}
		}
		Errors []gqlError
	}
	send := func(h http.Handler, query, token string, vars map[string]any) (answer, string) {
		b, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
		req := httptest.NewRequest(http.MethodPost, "/query", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var a answer
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
			t.Fatalf("%v: %s", err, rec.Body.String())
		}
		return a, rec.Body.String()
	}
	// The error codes a grab may answer: none is a SeckillCode.
	errorCodes := []string{"UNAUTHENTICATED", "FORBIDDEN", "RATE_LIMITED", "BAD_USER_INPUT", "INTERNAL"}
	for _, c := range model.AllSeckillCode {
		if slices.Contains(errorCodes, string(c)) {
			t.Fatalf("%s is both a SeckillCode and a grab's error code: one place cannot tell them apart", c)
		}
	}
	for _, tc := range []struct {
		name  string
		token string
		vars  map[string]any
		code  string
		data  bool
	}{
		{"OK", user, map[string]any{"id": "1"}, "OK", true},
		{"SOLD_OUT", user, map[string]any{"id": "2"}, "SOLD_OUT", true},
		{"NOT_FOUND", user, map[string]any{"id": "3"}, "NOT_FOUND", true},
		{"NOT_STARTED", user, map[string]any{"id": "4"}, "NOT_STARTED", true},
		{"ENDED", user, map[string]any{"id": "5"}, "ENDED", true},
		{"PAUSED", user, map[string]any{"id": "6"}, "PAUSED", true},
		{"LIMIT_REACHED", user, map[string]any{"id": "7"}, "LIMIT_REACHED", true},
		{"UNAVAILABLE", user, map[string]any{"id": "8"}, "UNAVAILABLE", true},
		{"RATE_LIMITED", user, map[string]any{"id": "9"}, "RATE_LIMITED", false},
		{"the gate's FORBIDDEN", user, map[string]any{"id": "1", "ticket": "forged"}, "FORBIDDEN", false},
		{"UNAUTHENTICATED", "", map[string]any{"id": "1"}, "UNAUTHENTICATED", false},
		{"BAD_USER_INPUT", user, map[string]any{"id": "1", "req": ""}, "BAD_USER_INPUT", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bodies []string
			for _, h := range []struct {
				name, query string
				handler     http.Handler
			}{
				{"compiled", plain, compiled},
				{"executor", plain, executor},
				{"executor, fragment", fragment, compiled},
			} {
				a, raw := send(h.handler, h.query, tc.token, tc.vars)
				bodies = append(bodies, raw)
				if tc.data {
					if len(a.Errors) != 0 || a.Data == nil || a.Data.SeckillVoucher == nil || a.Data.SeckillVoucher.Code != tc.code {
						t.Fatalf("%s: %s, want data.seckillVoucher.code %s and no error", h.name, raw, tc.code)
					}
					if (tc.code == "OK") != (a.Data.SeckillVoucher.OrderID != nil) {
						t.Fatalf("%s: %s: orderId must be set exactly when OK", h.name, raw)
					}
					continue
				}
				if len(a.Errors) != 1 || a.Errors[0].code() != tc.code || (a.Data != nil && a.Data.SeckillVoucher != nil) {
					t.Fatalf("%s: %s, want one %s error and no data", h.name, raw, tc.code)
				}
				ms, hasRetry := a.Errors[0].Extensions["retryAfterMs"].(float64)
				if (tc.code == "RATE_LIMITED") != hasRetry || (hasRetry && ms != 1500) {
					t.Fatalf("%s: %s: retryAfterMs (1500) must come with RATE_LIMITED only", h.name, raw)
				}
			}
			if bodies[0] != bodies[1] {
				t.Fatalf("compiled and executor answers differ:\n%s\n%s", bodies[0], bodies[1])
			}
		})
	}
}
