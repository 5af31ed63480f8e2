package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"flashsale/usecase/gate"
)

// api speaks the service's public GraphQL contract over HTTP, as a client
// would: the suite judges the service only by what it answers and what it
// stores.
type api struct {
	http *http.Client
}

func newAPI(conns int) *api {
	return &api{http: &http.Client{
		// Far above the 500 ms the design allows a grab while a store is
		// down: an answer later than this is a hang, and its outcome is
		// unknown.
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: conns,
			DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		},
	}}
}

func (a *api) close() { a.http.CloseIdleConnections() }

// gqlError is one entry of a response's errors.
type gqlError struct {
	Message    string         `json:"message"`
	Extensions map[string]any `json:"extensions"`
}

func (e gqlError) code() string {
	c, _ := e.Extensions["code"].(string)
	return c
}

// errNotSent marks a request that never reached the service (its
// connection was refused): nothing can have happened.
var errNotSent = errors.New("not sent")

// errNoTicket marks a grab not sent because its user's grab ticket (or
// the challenge before it) could not be had.
var errNoTicket = errors.New("no grab ticket")

// do posts one operation and decodes data into out. A GraphQL error is
// returned as *gqlErrors; a transport failure wraps errNotSent when the
// request surely never arrived.
func (a *api) do(ctx context.Context, base, token, query string, vars map[string]any, out any) error {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/query", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := a.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w: %w", errNotSent, err)
		}
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	var env struct {
		Data   json.RawMessage `json:"data"`
		Errors []gqlError      `json:"errors"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return &badResponse{status: resp.StatusCode, body: truncate(string(raw), 200)}
	}
	if len(env.Errors) > 0 {
		return &gqlErrors{list: env.Errors}
	}
	if resp.StatusCode != http.StatusOK {
		return &badResponse{status: resp.StatusCode, body: truncate(string(raw), 200)}
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return &badResponse{status: resp.StatusCode, body: truncate(string(raw), 200)}
	}
	return nil
}

// gqlErrors is a response that carried GraphQL errors.
type gqlErrors struct{ list []gqlError }

func (e *gqlErrors) Error() string {
	parts := make([]string, len(e.list))
	for i, g := range e.list {
		parts[i] = g.code() + ": " + g.Message
	}
	return "graphql: " + strings.Join(parts, "; ")
}

// codes lists the errors' extensions.code values.
func (e *gqlErrors) codes() []string {
	out := make([]string, len(e.list))
	for i, g := range e.list {
		out[i] = g.code()
	}
	return out
}

// badResponse is an answer that is no GraphQL response at all.
type badResponse struct {
	status int
	body   string
}

func (e *badResponse) Error() string {
	return fmt.Sprintf("HTTP %d, not a GraphQL answer: %q", e.status, e.body)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// grabAnswer is what one seckillVoucher call came back with.
type grabAnswer struct {
	Code    string // SeckillCode; "" when the call got no such answer
	OrderID string
	Err     error // transport failure, GraphQL errors or a malformed answer
}

const (
	grabQuery      = `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code orderId } }`
	grabQueryWithR = `mutation($v: ID!, $r: String) { seckillVoucher(voucherId: $v, requestId: $r) { code orderId } }`
	grabQueryWithT = `mutation($v: ID!, $r: String, $t: String) { seckillVoucher(voucherId: $v, requestId: $r, ticket: $t) { code orderId } }`
)

// grab asks for one unit; requestID "" sends none (the schema may not
// have the argument), ticket "" sends no grab ticket.
func (a *api) grab(ctx context.Context, base, token, voucherID, requestID, ticket string) grabAnswer {
	q, vars := grabQuery, map[string]any{"v": voucherID}
	if requestID != "" {
		q, vars["r"] = grabQueryWithR, requestID
	}
	if ticket != "" {
		q, vars["t"] = grabQueryWithT, ticket
		if requestID == "" {
			vars["r"] = nil
		}
	}
	var out struct {
		SeckillVoucher struct {
			Code    string  `json:"code"`
			OrderID *string `json:"orderId"`
		} `json:"seckillVoucher"`
	}
	if err := a.do(ctx, base, token, q, vars, &out); err != nil {
		return grabAnswer{Err: err}
	}
	ans := grabAnswer{Code: out.SeckillVoucher.Code}
	if out.SeckillVoucher.OrderID != nil {
		ans.OrderID = *out.SeckillVoucher.OrderID
	}
	return ans
}

// voucherSpec is a seckill voucher to create.
type voucherSpec struct {
	Stock, Limit int
	Begin, End   time.Time
	// RequireTicket makes every grab need a grab ticket; POW makes a
	// ticket need a solved proof-of-work challenge.
	RequireTicket, POW bool
	// Room puts the sale behind a waiting room admitting AdmitPerSecond
	// users a second with at most MaxActive tickets open.
	Room                      bool
	AdmitPerSecond, MaxActive int
}

// ticket asks for the caller's grab ticket of a voucher and returns it
// with its expiry; with pow it first asks for a challenge and solves it,
// as a client does.
func (a *api) ticket(ctx context.Context, base, token, voucherID string, pow bool) (string, time.Time, error) {
	vars := map[string]any{"v": voucherID}
	if pow {
		const cq = `query($v: ID!) { seckillChallenge(voucherId: $v) { challenge } }`
		var ch struct {
			SeckillChallenge struct {
				Challenge string `json:"challenge"`
			} `json:"seckillChallenge"`
		}
		if err := a.do(ctx, base, token, cq, vars, &ch); err != nil {
			return "", time.Time{}, fmt.Errorf("challenge: %w", err)
		}
		nonce, err := gate.Solve(ch.SeckillChallenge.Challenge, -1)
		if err != nil {
			return "", time.Time{}, fmt.Errorf("solve the challenge: %w", err)
		}
		vars["c"], vars["n"] = ch.SeckillChallenge.Challenge, nonce
	}
	const q = `query($v: ID!, $c: String, $n: String) { seckillTicket(voucherId: $v, challenge: $c, nonce: $n) { ticket expiresAt } }`
	var out struct {
		SeckillTicket struct {
			Ticket    string    `json:"ticket"`
			ExpiresAt time.Time `json:"expiresAt"`
		} `json:"seckillTicket"`
	}
	if err := a.do(ctx, base, token, q, vars, &out); err != nil {
		return "", time.Time{}, fmt.Errorf("grab ticket: %w", err)
	}
	return out.SeckillTicket.Ticket, out.SeckillTicket.ExpiresAt, nil
}

// createVoucher creates a seckill voucher as admin and returns its id.
func (a *api) createVoucher(ctx context.Context, base, admin string, v voucherSpec) (string, error) {
	const q = `mutation($in: CreateVoucherInput!) { createVoucher(input: $in) { id } }`
	in := map[string]any{
		"shopId": "1", "title": "chaos", "payValue": 100, "actualValue": 200, "type": "SECKILL",
		"stock": v.Stock, "perUserLimit": v.Limit,
		"beginAt": v.Begin.UTC().Format(time.RFC3339), "endAt": v.End.UTC().Format(time.RFC3339),
	}
	if v.RequireTicket {
		in["requireTicket"] = true
	}
	if v.POW {
		in["challenge"] = "POW"
	}
	if v.Room {
		in["waitingRoom"], in["admitPerSecond"], in["maxActive"] = true, v.AdmitPerSecond, v.MaxActive
	}
	var out struct {
		CreateVoucher struct{ ID string } `json:"createVoucher"`
	}
	if err := a.do(ctx, base, admin, q, map[string]any{"in": in}, &out); err != nil {
		return "", fmt.Errorf("create voucher: %w", err)
	}
	return out.CreateVoucher.ID, nil
}

// liveStock is the service's own view of a voucher after the sale.
type liveStock struct {
	Remaining, Sold, Initial, Limit int
}

// stock reads the voucher's live stock (Redis, preheated again if Redis
// lost it) and its seckill figures through the API.
func (a *api) stock(ctx context.Context, base, admin, voucherID string) (liveStock, error) {
	const q = `query($v: ID!) { stock(voucherId: $v) { remaining sold } voucher(id: $v) { seckill { initialStock perUserLimit } } }`
	var out struct {
		Stock struct {
			Remaining, Sold int
		} `json:"stock"`
		Voucher struct {
			Seckill struct {
				InitialStock, PerUserLimit int
			} `json:"seckill"`
		} `json:"voucher"`
	}
	if err := a.do(ctx, base, admin, q, map[string]any{"v": voucherID}, &out); err != nil {
		return liveStock{}, fmt.Errorf("read stock of voucher %s: %w", voucherID, err)
	}
	return liveStock{Remaining: out.Stock.Remaining, Sold: out.Stock.Sold,
		Initial: out.Voucher.Seckill.InitialStock, Limit: out.Voucher.Seckill.PerUserLimit}, nil
}

// supportsRequestID tells whether seckillVoucher takes a requestId: from
// the schema by introspection, or, where introspection is switched off,
// by trying it on a voucher that does not exist.
func (a *api) supportsRequestID(ctx context.Context, base, token string) (bool, error) {
	const q = `{ __type(name: "Mutation") { fields { name args { name } } } }`
	var out struct {
		Type *struct {
			Fields []struct {
				Name string
				Args []struct{ Name string }
			}
		} `json:"__type"`
	}
	err := a.do(ctx, base, token, q, nil, &out)
	if err == nil && out.Type != nil {
		for _, f := range out.Type.Fields {
			if f.Name != "seckillVoucher" {
				continue
			}
			for _, arg := range f.Args {
				if arg.Name == "requestId" {
					return true, nil
				}
			}
			return false, nil
		}
		return false, errors.New("schema has no seckillVoucher")
	}
	var ge *gqlErrors
	if err != nil && !errors.As(err, &ge) {
		return false, fmt.Errorf("introspect schema: %w", err)
	}
	ans := a.grab(ctx, base, token, "0", "chaos-probe", "")
	if errors.As(ans.Err, &ge) {
		for _, g := range ge.list {
			if strings.Contains(g.Message, "requestId") {
				return false, nil
			}
		}
	}
	if ans.Err != nil && !errors.As(ans.Err, &ge) {
		return false, fmt.Errorf("probe requestId: %w", ans.Err)
	}
	return true, nil
}
