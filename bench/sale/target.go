package sale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"flashsale/domain"
	"flashsale/internal/auth"
	"flashsale/usecase/gate"
)

// API is the language a target speaks.
type API string

const (
	// GraphQL is the service's contract (POST /query).
	GraphQL API = "graphql"
	// Plain is the reference designs' plain HTTP API (package
	// bench/reference).
	Plain API = "plain"
)

// Endpoint is one system under test.
type Endpoint struct {
	// Name labels the endpoint in reports: "service", "reference", ...
	Name string
	API  API
	// URLs are the base URLs (http://host:port) of its nodes; grabs go
	// round robin over them.
	URLs []string
	// DatabaseURL, when set, is read after the sale for its orders.
	DatabaseURL string
	// PID is the local server process whose CPU time is measured; 0: the
	// process listening on the first URL's port, when there is one on
	// this machine.
	PID int
	// RedisURL, when set, is the target's Redis: its CPU time and command
	// count per request are measured.
	RedisURL string
	// NoStock marks a target without stock (the ceiling): only answers
	// are checked.
	NoStock bool
}

// ErrNoRedPackets reports a target whose API has no red packets.
var ErrNoRedPackets = errors.New("the target has no red packets")

// api talks to an endpoint outside the attack: set-up and checks.
type api struct {
	ep     Endpoint
	client *http.Client
}

func (a api) post(ctx context.Context, url, token string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return a.do(req, out)
}

func (a api) do(req *http.Request, out any) error {
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", req.Method, req.URL.Path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: %w: %s", req.Method, req.URL.Path, err, b)
	}
	return nil
}

// graphql runs one operation and decodes data into out.
func (a api) graphql(ctx context.Context, token, query string, vars map[string]any, out any) error {
	var resp struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message    string         `json:"message"`
			Extensions map[string]any `json:"extensions"`
		} `json:"errors"`
	}
	if err := a.post(ctx, a.ep.URLs[0]+"/query", token, map[string]any{"query": query, "variables": vars}, &resp); err != nil {
		return err
	}
	if len(resp.Errors) > 0 {
		msgs := make([]string, len(resp.Errors))
		for i, e := range resp.Errors {
			msgs[i] = fmt.Sprintf("%s (%v)", e.Message, e.Extensions["code"])
		}
		return fmt.Errorf("graphql: %s", strings.Join(msgs, "; "))
	}
	return json.Unmarshal(resp.Data, out)
}

// createVoucher puts a seckill voucher with stock units on sale and
// returns its id.
func (a api) createVoucher(ctx context.Context, admin string, stock, perUser, segments int, tickets bool, challenge string) (string, error) {
	if a.ep.API == Plain {
		var out struct{ ID string }
		if err := a.post(ctx, a.ep.URLs[0]+"/vouchers", admin, map[string]int{"stock": stock}, &out); err != nil {
			return "", fmt.Errorf("create voucher: %w", err)
		}
		return out.ID, nil
	}
	now := time.Now()
	in := voucherInput(stock, perUser, now.Add(-time.Minute), now.Add(time.Hour))
	if segments > 0 {
		in["segments"] = segments
	}
	if tickets {
		in["requireTicket"] = true
		if challenge != "" {
			in["challenge"] = challenge
		}
	}
	var out struct {
		CreateVoucher struct{ ID string } `json:"createVoucher"`
	}
	err := a.graphql(ctx, admin, `mutation($in: CreateVoucherInput!) { createVoucher(input: $in) { id } }`,
		map[string]any{"in": in}, &out)
	if err != nil {
		return "", fmt.Errorf("create voucher: %w", err)
	}
	return out.CreateVoucher.ID, nil
}

// voucherInput is createVoucher's input for a seckill voucher on sale
// from begin to end.
func voucherInput(stock, perUser int, begin, end time.Time) map[string]any {
	return map[string]any{
		"shopId": "1", "title": "seckill-bench", "payValue": 100, "actualValue": 1000,
		"type": "SECKILL", "stock": stock, "perUserLimit": perUser,
		"beginAt": begin.UTC().Format(time.RFC3339Nano), "endAt": end.UTC().Format(time.RFC3339Nano),
	}
}

// createRedPacket creates a red packet of count packets summing to
// totalCents and returns its id. A target whose schema has no red
// packets yields ErrNoRedPackets with the target's own words.
func (a api) createRedPacket(ctx context.Context, token string, totalCents int64, count int) (string, error) {
	if a.ep.API == Plain {
		return "", ErrNoRedPackets
	}
	var out struct {
		CreateRedPacket struct{ ID string } `json:"createRedPacket"`
	}
	err := a.graphql(ctx, token, `mutation($in: CreateRedPacketInput!) { createRedPacket(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"totalCents": totalCents, "count": count, "expiresInSeconds": 3600}}, &out)
	if err != nil {
		switch msg := err.Error(); {
		case strings.Contains(msg, "Cannot query field") || strings.Contains(msg, "Unknown type"):
			return "", fmt.Errorf("%w: its schema does not know createRedPacket/grabRedPacket (%v)", ErrNoRedPackets, err)
		case strings.Contains(msg, "NOT_IMPLEMENTED"):
			return "", fmt.Errorf("%w: its schema has createRedPacket but the target answers that it is not implemented (%v)", ErrNoRedPackets, err)
		}
		return "", fmt.Errorf("create red packet: %w", err)
	}
	return out.CreateRedPacket.ID, nil
}

// createRedPackets creates red packets of count packets in all, 100 cents
// each, as few as the service's largest red packet allows
// (domain.RedPacketMaxCount), of sizes that differ by at most one, and
// returns their ids. Each has a creator of its own, the ids just below
// firstCreator: one user may have only a few open red packets (the
// service's quota), and a red packet a sale leaves not fully grabbed
// stays open until it expires, an hour later.
func (a api) createRedPackets(ctx context.Context, tokens *auth.Tokens, firstCreator int64, count int) ([]string, error) {
	n := (count + domain.RedPacketMaxCount - 1) / domain.RedPacketMaxCount
	ids := make([]string, n)
	for i := range ids {
		packets := count / n
		if i < count%n {
			packets++
		}
		creator, err := tokens.Issue(auth.Identity{UserID: firstCreator - 1 - int64(i), Role: auth.RoleUser}, time.Hour)
		if err != nil {
			return nil, err
		}
		if ids[i], err = a.createRedPacket(ctx, creator, int64(packets)*100, packets); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// remaining asks the target for the voucher's live stock.
func (a api) remaining(ctx context.Context, token, voucherID string) (int, error) {
	if a.ep.API == Plain {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.ep.URLs[0]+"/stock/"+voucherID, nil)
		if err != nil {
			return 0, err
		}
		var out struct{ Remaining int }
		err = a.do(req, &out)
		return out.Remaining, err
	}
	var out struct {
		Stock struct{ Remaining int } `json:"stock"`
	}
	err := a.graphql(ctx, token, `query($v: ID!) { stock(voucherId: $v) { remaining } }`, map[string]any{"v": voucherID}, &out)
	return out.Stock.Remaining, err
}

// Grab documents, fixed so that the service's query cache sees one text.
const (
	grabQuery = `mutation($v: ID!, $r: String) { seckillVoucher(voucherId: $v, requestId: $r) { code orderId } }`
	// grabQueryNoKey is for targets whose schema has no requestId.
	grabQueryNoKey  = `mutation($v: ID!) { seckillVoucher(voucherId: $v) { code orderId } }`
	grabPacketQuery = `mutation($id: ID!) { grabRedPacket(id: $id) { code amountCents } }`
)

// grabTarget is the request of one attempt.
func (a api) grabTarget(base, id, token string, user, attempt int, redPacket, requestIDs bool, runTag string) vegeta.Target {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	if a.ep.API == Plain {
		return vegeta.Target{Method: http.MethodPost, URL: requestKey(base+"/seckill/"+id, user, attempt), Header: h}
	}
	h.Set("Content-Type", "application/json")
	var body []byte
	switch {
	case redPacket:
		body, _ = json.Marshal(map[string]any{"query": grabPacketQuery, "variables": map[string]any{"id": id}})
	case requestIDs:
		key := fmt.Sprintf("%s-%d-%d", runTag, user, attempt)
		body, _ = json.Marshal(map[string]any{"query": grabQuery, "variables": map[string]any{"v": id, "r": key}})
	default:
		body, _ = json.Marshal(map[string]any{"query": grabQueryNoKey, "variables": map[string]any{"v": id}})
	}
	return vegeta.Target{Method: http.MethodPost, URL: requestKey(base+"/query", user, attempt), Header: h, Body: body}
}

// ticketGrabQuery is a grab with a grab ticket.
const ticketGrabQuery = `mutation($v: ID!, $r: String, $t: String) { seckillVoucher(voucherId: $v, requestId: $r, ticket: $t) { code orderId } }`

// ticketBody is the body of a grab that carries ticket.
func ticketBody(voucherID, ticket string, requestIDs bool, key string) []byte {
	vars := map[string]any{"v": voucherID, "t": ticket}
	if requestIDs {
		vars["r"] = key
	}
	body, _ := json.Marshal(map[string]any{"query": ticketGrabQuery, "variables": vars})
	return body
}

// tickets takes one grab ticket per user (their tokens in order), solving
// the proof of work first when the voucher asks for one, with workers
// requests at once. It fails at the first refusal: a load run without
// tickets would only measure FORBIDDEN.
func (a api) tickets(ctx context.Context, voucherID string, tokens []string, challenge string, workers int) ([]string, error) {
	out := make([]string, len(tokens))
	var next atomic.Int64
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tokens) || ctx.Err() != nil {
					return
				}
				t, err := a.ticket(ctx, voucherID, tokens[i], challenge)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				out[i] = t
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, fmt.Errorf("grab tickets: %w", first)
	}
	return out, nil
}

func (a api) ticket(ctx context.Context, voucherID, token, challenge string) (string, error) {
	vars := map[string]any{"v": voucherID}
	query := `query($v: ID!) { seckillTicket(voucherId: $v) { ticket } }`
	if strings.EqualFold(challenge, "POW") {
		var ch struct {
			SeckillChallenge struct {
				Challenge  string `json:"challenge"`
				Difficulty int    `json:"difficulty"`
			} `json:"seckillChallenge"`
		}
		if err := a.graphql(ctx, token, `query($v: ID!) { seckillChallenge(voucherId: $v) { challenge difficulty } }`, vars, &ch); err != nil {
			return "", fmt.Errorf("challenge: %w", err)
		}
		nonce, err := gate.Solve(ch.SeckillChallenge.Challenge, ch.SeckillChallenge.Difficulty)
		if err != nil {
			return "", fmt.Errorf("solve the challenge: %w", err)
		}
		vars["c"], vars["n"] = ch.SeckillChallenge.Challenge, nonce
		query = `query($v: ID!, $c: String, $n: String) { seckillTicket(voucherId: $v, challenge: $c, nonce: $n) { ticket } }`
	}
	var out struct {
		SeckillTicket struct{ Ticket string } `json:"seckillTicket"`
	}
	if err := a.graphql(ctx, token, query, vars, &out); err != nil {
		return "", err
	}
	return out.SeckillTicket.Ticket, nil
}
