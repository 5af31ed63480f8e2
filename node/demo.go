package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"flashsale/config"
	"flashsale/domain"
	"flashsale/httpapi/playground"
	"flashsale/internal/auth"
)

// prepareDemo makes the service usable in one command: it creates three
// demo seckill vouchers if there are none (the first open, so a first
// grab needs nothing; the second behind a grab ticket and a light proof
// of work; the third behind a waiting room) and returns their ids, for
// printBanner's tokens and first operations.
func (a *app) prepareDemo(ctx context.Context) ([]int64, error) {
	// A demo voucher stored but not yet in Redis (its preheat met the
	// request path's short Redis deadline on a busy machine) is listed on
	// the next try and preheated by its first grab: try again rather than
	// fail the start.
	var ids []int64
	var err error
	for attempt := 1; ; attempt++ {
		if ids, err = a.demoVouchers(ctx); err == nil || attempt == 3 {
			break
		}
		a.log.Warn("demo voucher not ready; trying again", "err", err)
		time.Sleep(200 * time.Millisecond)
	}
	return ids, err
}

// demoVouchers returns the demo vouchers' ids, creating those missing.
func (a *app) demoVouchers(ctx context.Context) ([]int64, error) {
	vs, _, err := a.catalog.List(ctx, nil, domain.Page{First: 3})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	demos := []struct {
		title, sub string
		gate       domain.Gate
		room       domain.WaitingRoom
	}{
		{"Demo flash-sale voucher", "100 units, one per person", domain.Gate{}, domain.WaitingRoom{}},
		{"Demo voucher against bots", "100 units, one per person; grabs need a ticket, and a ticket a proof of work", domain.Gate{RequireTicket: true, Challenge: domain.ChallengePOW}, domain.WaitingRoom{}},
		{"Demo voucher with a waiting room", "100 units, one per person; join the line, and grab once admitted (two a second)", domain.Gate{},
			domain.WaitingRoom{Enabled: true, AdmitPerSecond: 2, MaxActive: 10}},
	}
	ids := make([]int64, len(demos))
	for i, d := range demos {
		if i < len(vs) {
			ids[i] = vs[i].ID
			continue
		}
		stock, limit := 100, 1
		begin := time.Now().Add(-time.Minute)
		end := begin.Add(7 * 24 * time.Hour)
		v, err := a.catalog.Create(ctx, domain.NewVoucher{
			ShopID: 1, Title: d.title, SubTitle: &d.sub,
			PayValue: 990, ActualValue: 5000, Type: domain.VoucherSeckill,
			Stock: &stock, BeginAt: &begin, EndAt: &end, PerUserLimit: &limit, Gate: d.gate, Room: d.room,
		})
		if err != nil {
			return nil, fmt.Errorf("demo voucher: %w", err)
		}
		ids[i] = v.ID
	}
	return ids, nil
}

func (a *app) printBanner(w io.Writer, ids []int64) error {
	// As long as tokens may live (JWT_MAX_TTL): a restart prints new ones.
	ttl := a.tokens.MaxTTL()
	admin, err := a.tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, ttl)
	if err != nil {
		return err
	}
	user, err := a.tokens.Issue(auth.Identity{UserID: 1001, Role: auth.RoleUser}, ttl)
	if err != nil {
		return err
	}
	// The operations first and the addresses and tokens last, where a
	// terminal leaves them in sight.
	_, err = fmt.Fprintf(w, `
With the header {"Authorization": "Bearer <token>"}, try (the admin token can do all):
%s
Flash-sale voucher service (embedded mode: in-process Redis, SQLite file %s)

  Playground:  http://%s/   (opens with the operations above and the admin token)
  Console:     http://%s/console   (sign in with the admin token)
  Admin token: %s
  User token:  %s
  More tokens: go run . token --user 7 [--role admin]   (they survive restarts)

`, indent(sampleOperations(ids[0], ids[1], ids[2]), "  "), a.cfg.SQLitePath, displayAddr(a.listener.Addr()), displayAddr(a.listener.Addr()), admin, user)
	return err
}

// sampleOperations is what a visitor wants to try first, on voucher id: look,
// create a voucher (admin), grab, pay, and watch the stock live; then, on
// voucher gated, the way past the grab gate: the server's clock, a
// challenge, a ticket, a grab with it; and on voucher room, its waiting
// room: join, watch the place, grab with the admission's ticket. The
// banner prints it and the playground opens with it;
// TestSampleOperationsAreValid checks it against the schema.
func sampleOperations(id, gated, room int64) string {
	return fmt.Sprintf(`# Run one operation at a time: the play button asks which.
query Vouchers {
  vouchers(first: 10) { edges { node { id title seckill { remaining initialStock } } } }
}

# Admin only.
mutation CreateVoucher {
  createVoucher(input: {shopId: "1", title: "Ten off", payValue: 100, actualValue: 1000,
    type: SECKILL, stock: 10, beginAt: "2026-01-01T00:00:00Z", endAt: "2099-01-01T00:00:00Z"}) { id }
}

mutation Grab {
  seckillVoucher(voucherId: "%d") { code orderId message }
}

# Variables: {"orderId": "<the orderId Grab answered>"}
mutation Pay($orderId: ID!) {
  payOrder(orderId: $orderId) { id status paidAt }
}

# The current stock at once, then every change (grab in another tab).
subscription WatchStock {
  stockChanged(voucherId: "%d") { remaining sold soldOut }
}

# Voucher %d keeps bots out: a grab needs a ticket, a ticket a proof of work.
query Countdown {
  serverTime
  voucher(id: "%d") { seckill { requireTicket challenge startsInMs endsInMs } }
}

query Challenge {
  seckillChallenge(voucherId: "%d") { challenge difficulty expiresAt }
}

# In a terminal: go run . solve '<challenge>'   prints the nonce.
# Variables: {"challenge": "<challenge>", "nonce": "<nonce>"}
query Ticket($challenge: String, $nonce: String) {
  seckillTicket(voucherId: "%d", challenge: $challenge, nonce: $nonce) { ticket expiresAt }
}

# Variables: {"ticket": "<the ticket Ticket answered>"}
mutation GrabWithTicket($ticket: String) {
  seckillVoucher(voucherId: "%d", ticket: $ticket) { code orderId message }
}

# Voucher %d has a waiting room: join its line once, watch your place,
# and grab with the ticket your admission brings.
mutation JoinQueue {
  joinQueue(voucherId: "%d") { state position waiting estimatedWaitMs ticket expiresAt }
}

subscription WatchPlace {
  queueChanged(voucherId: "%d") { state position waiting estimatedWaitMs ticket expiresAt }
}

# Variables: {"ticket": "<the ticket of your admission>"}
mutation GrabWhenAdmitted($ticket: String) {
  seckillVoucher(voucherId: "%d", ticket: $ticket) { code orderId message }
}
`, id, id, gated, gated, gated, gated, gated, room, room, room, room)
}

// indent prefixes every non-empty line of s.
func indent(s, prefix string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}

// playgroundOptions opens the playground with the sample operations, and in
// embedded mode, listening on loopback only, with a demo admin token in
// its headers. Never in real mode: whoever loads the page gets the token.
func playgroundOptions(cfg config.Config, tokens *auth.Tokens) ([]playground.Option, error) {
	opts := []playground.Option{playground.WithQuery(sampleOperations(demoVoucherID, demoGatedVoucherID, demoRoomVoucherID))}
	if !cfg.Embedded() || !cfg.Demo || !loopback(cfg.HTTPAddr) {
		return opts, nil
	}
	tok, err := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, tokens.MaxTTL())
	if err != nil {
		return nil, err
	}
	return append(opts, playground.WithHeaders(map[string]string{"Authorization": "Bearer " + tok})), nil
}

// demoVoucherID is the demo voucher's id in a new embedded database (the
// first voucher created); the playground's page is made before it is.
const demoVoucherID = 1

// demoGatedVoucherID is the second demo voucher's, the one behind the gate.
const demoGatedVoucherID = 2

// demoRoomVoucherID is the third demo voucher's, the one with a waiting
// room.
const demoRoomVoucherID = 3

// loopback reports whether a listen address accepts local connections only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
