package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flashsale/httpapi"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

// heldIPLimit stands for RATE_IP_PER_SEC's Redis check, which admission
// makes after the anonymous budget: it holds every request from one
// address there until released, and counts the calls from every address.
type heldIPLimit struct {
	holdIP  string
	entered chan struct{}
	release chan struct{}

	mu    sync.Mutex
	calls map[string]int
}

func (l *heldIPLimit) IPEnabled() bool { return true }

func (l *heldIPLimit) AllowIP(ctx context.Context, ip string) (time.Duration, error) {
	l.mu.Lock()
	l.calls[ip]++
	l.mu.Unlock()
	if ip == l.holdIP {
		l.entered <- struct{}{}
		select {
		case <-l.release:
		case <-ctx.Done():
		}
	}
	return 0, nil
}

func (l *heldIPLimit) callsFrom(ip string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[ip]
}

// With the anonymous budget held full (one slot, taken by an anonymous
// request that waits inside admission), a request without a valid token
// is answered 429 RATE_LIMITED at once, before admission sees it (so
// before any parse: its text is one the shape check would refuse with
// another code), while a signed-in user's requests run as usual; once the
// slot is free, anonymous requests are served again.
func TestAnonymousBudgetRefusesAnonymousRequestsAndNotSignedInOnes(t *testing.T) {
	t.Parallel()
	const holder, flooder, shopper = "192.0.2.10", "192.0.2.20", "192.0.2.30"
	limit := &heldIPLimit{holdIP: holder, entered: make(chan struct{}, 1), release: make(chan struct{}), calls: map[string]int{}}
	release := sync.OnceFunc(func() { close(limit.release) })
	n := startNode(t, map[string]string{
		"ANON_MAX_IN_FLIGHT": "1", "ANON_WAIT": "0s", // no wait: refused at once
		"INTROSPECTION": "token", "GRAPHQL_COMPILED_GRABS": "false",
	}, node.Hooks{HTTP: func(o *httpapi.HandlerOptions) { o.IPLimit = limit }})
	t.Cleanup(release) // before the node stops: the holder's request ends
	h := n.GraphQL
	v := mustVoucher(t, n, testenv.VoucherSpec{Stock: 10})
	vid := strconv.FormatInt(v.ID, 10)
	user := n.Token(t, 7, auth.RoleUser)
	hostile := "{ __typename" + strings.Repeat(" @x", 990) + " }"
	if _, codes := post(t, h, flooder, "", hostile); strings.Join(codes, ",") != "BAD_USER_INPUT" {
		t.Fatalf("the hostile text with the budget free: %v, want the shape check's BAD_USER_INPUT", codes)
	}

	held := make(chan rawAnswer, 1)
	go func() { held <- postRaw(h, holder, "", `{ __typename }`) }()
	<-limit.entered // the holder is past the gate, in admission: the slot is taken

	before := limit.callsFrom(flooder)
	for _, tc := range []struct{ name, token, query string }{
		{"no token, a text the shape check refuses", "", hostile},
		{"no token, a plain one", "", `{ __typename }`},
		{"a token with a bad signature", forge(user), `{ __typename }`},
		{"not a bearer token", "Basic dXNlcjpwYXNz", `{ __typename }`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := postRaw(h, flooder, tc.token, tc.query)
			if a.status != http.StatusTooManyRequests || a.codes() != "RATE_LIMITED" || a.header.Get("Retry-After") == "" || a.retryAfterMs() <= 0 {
				t.Fatalf("status %d, codes %s, Retry-After %q, retryAfterMs %v; want 429 RATE_LIMITED with both",
					a.status, a.codes(), a.header.Get("Retry-After"), a.retryAfterMs())
			}
		})
	}
	if n := limit.callsFrom(flooder) - before; n != 0 {
		t.Fatalf("admission saw %d refused anonymous requests; the budget must refuse them before", n)
	}

	// A signed-in user keeps their own path: a query and a grab run.
	var got struct {
		Voucher struct{ ID string }
	}
	if errs := doFrom(t, h, shopper, user, `query($v: ID!) { voucher(id: $v) { id } }`, map[string]any{"v": vid}, &got); len(errs) > 0 || got.Voucher.ID != vid {
		t.Fatalf("a signed-in query beside the full budget: %v, %+v", errs, got)
	}
	var grab struct {
		SeckillVoucher struct{ Code string }
	}
	if errs := doFrom(t, h, shopper, user, `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code } }`, map[string]any{"v": vid}, &grab); len(errs) > 0 || grab.SeckillVoucher.Code != "OK" {
		t.Fatalf("a signed-in grab beside the full budget: %v, %+v", errs, grab)
	}

	release()
	if a := <-held; a.status != http.StatusOK || a.codes() != "" {
		t.Fatalf("the holder: status %d, codes %s", a.status, a.codes())
	}
	if a := postRaw(h, flooder, "", `{ __typename }`); a.status != http.StatusOK || a.codes() != "" {
		t.Fatalf("anonymous once the slot is free: status %d, codes %s", a.status, a.codes())
	}
}

// rawAnswer is an answer as the client sees it; postRaw is safe to call
// from any goroutine (it does not fail the test itself).
type rawAnswer struct {
	status int
	header http.Header
	body   []byte
}

func postRaw(h http.Handler, ip, token, query string) rawAnswer {
	body, _ := json.Marshal(map[string]any{"query": query})
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.RemoteAddr = ip + ":4321"
	req.Header.Set("Content-Type", "application/json")
	switch {
	case strings.Contains(token, " "):
		req.Header.Set("Authorization", token)
	case token != "":
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rawAnswer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func (a rawAnswer) errors() []nodetest.Error {
	var resp struct{ Errors []nodetest.Error }
	_ = json.Unmarshal(a.body, &resp)
	return resp.Errors
}

func (a rawAnswer) codes() string {
	var out []string
	for _, e := range a.errors() {
		out = append(out, e.Code())
	}
	return strings.Join(out, ",")
}

func (a rawAnswer) retryAfterMs() float64 {
	for _, e := range a.errors() {
		if ms, ok := e.Extensions["retryAfterMs"].(float64); ok {
			return ms
		}
	}
	return 0
}

// doFrom runs one operation with variables from ip and decodes its data.
func doFrom(tb testing.TB, h http.Handler, ip, token, query string, vars map[string]any, out any) []nodetest.Error {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, postRequest(ip, token, map[string]any{"query": query, "variables": vars}))
	var resp struct {
		Data   json.RawMessage
		Errors []nodetest.Error
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		tb.Fatalf("%v: %.200s", err, rec.Body.String())
	}
	if len(resp.Data) > 0 && string(resp.Data) != "null" {
		if err := json.Unmarshal(resp.Data, out); err != nil {
			tb.Fatal(err)
		}
	}
	return resp.Errors
}

// forge changes a token's signature.
func forge(token string) string {
	i := strings.LastIndexByte(token, '.')
	sig := []byte(token[i+1:])
	if sig[0] == 'A' {
		sig[0] = 'B'
	} else {
		sig[0] = 'A'
	}
	return token[:i+1] + string(sig)
}
