package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"flashsale/internal/auth"
	"flashsale/testkit/testenv"
)

// grabRedPacket grabs a packet through the process's GraphQL endpoint.
func (p *process) grabRedPacket(client *http.Client, token, id string) (code string, amount int64, err error) {
	body, _ := json.Marshal(map[string]any{"query": `mutation($id: ID!) { grabRedPacket(id: $id) { code amountCents } }`, "variables": map[string]any{"id": id}})
	req, _ := http.NewRequest(http.MethodPost, p.Base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			GrabRedPacket struct {
				Code        string
				AmountCents *int64
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", 0, err
	}
	g := out.Data.GrabRedPacket
	if g.AmountCents != nil {
		amount = *g.AmountCents
	}
	return g.Code, amount, nil
}

func createRedPacketOn(t *testing.T, p *process, token string, total, count, expires int) string {
	t.Helper()
	out := postQuery(t, p.Base, token, fmt.Sprintf(`mutation { createRedPacket(input: {totalCents: %d, count: %d, expiresInSeconds: %d}) { id } }`, total, count, expires))
	return out["createRedPacket"].(map[string]any)["id"].(string)
}

type grabbedRow struct {
	UserID      int64 `bun:"user_id"`
	AmountCents int64 `bun:"amount_cents"`
}

// storedGrabs reads the red packet's grabs in tb_red_packet_grab: user ->
// cents.
func storedGrabs(t *testing.T, db *bun.DB, id string) map[int64]int64 {
	t.Helper()
	var rows []grabbedRow
	if err := db.NewSelect().Table("tb_red_packet_grab").Column("user_id", "amount_cents").Where("red_packet_id = ?", id).Scan(t.Context(), &rows); err != nil {
		t.Fatal(err)
	}
	out := map[int64]int64{}
	for _, r := range rows {
		out[r.UserID] = r.AmountCents
	}
	return out
}

// TestKillDashNineLosesNoRedPacketGrab kills the service with SIGKILL in
// the middle of a red-packet rush, right after it has answered OKs,
// restarts it, and checks that every packet it answered OK reaches
// tb_red_packet_grab exactly once with its amount, and that the packets
// in the database and those left in Redis add up to the red packet.
func TestKillDashNineLosesNoRedPacketGrab(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the service as a process")
	}
	bin, redisSrv, dbURL, env, tokens := killRig(t)
	creator, _ := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleUser}, time.Hour)
	first := startProcess(t, bin, env)
	const packets, total = 3000, 900_000
	id := createRedPacketOn(t, first, creator, total, packets, 3600)

	var (
		mu     sync.Mutex
		won    = map[int64]int64{}
		wg     sync.WaitGroup
		killed = make(chan struct{})
	)
	client := &http.Client{Timeout: 5 * time.Second}
	for w := range 32 {
		wg.Go(func() {
			for u := int64(w*1000 + 2); u <= int64(w*1000+1001); u++ {
				select {
				case <-killed:
					return
				default:
				}
				tok, _ := tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
				code, amount, err := first.grabRedPacket(client, tok, id)
				if err == nil && code == "OK" {
					mu.Lock()
					won[u] = amount
					mu.Unlock()
				}
			}
		})
	}
	// Kill once the writer is at work too (some grabs in the database),
	// so that the kill finds batches between read and commit.
	db := testenv.MustOpen(t, dbURL)
	ctx := context.Background()
	for {
		mu.Lock()
		n := len(won)
		mu.Unlock()
		persisted, err := db.NewSelect().Table("tb_red_packet_grab").Where("red_packet_id = ?", id).Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n >= 500 && persisted >= 200 {
			break
		}
		if n >= packets {
			t.Fatal("the rush ended before the writer persisted 200 grabs")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.Kill() // SIGKILL, mid-rush
	close(killed)
	wg.Wait()

	startProcess(t, bin, env) // the restarted node re-reads its pending entries
	rdb := redisSrv.Client()
	deadline := time.Now().Add(60 * time.Second)
	for {
		inflight, err := rdb.XLen(ctx, "{rp"+id+"}:log").Result()
		if err != nil {
			t.Fatal(err)
		}
		var rows []grabbedRow
		if err := db.NewSelect().Table("tb_red_packet_grab").Column("user_id", "amount_cents").Where("red_packet_id = ?", id).Scan(ctx, &rows); err != nil {
			t.Fatal(err)
		}
		inDB := make(map[int64]int64, len(rows))
		var sum int64
		for _, r := range rows {
			inDB[r.UserID] = r.AmountCents
			sum += r.AmountCents
		}
		missing := 0
		for u, a := range won {
			if inDB[u] != a {
				missing++
			}
		}
		if missing == 0 && inflight == 0 {
			left, err := rdb.LLen(ctx, "{rp"+id+"}:packets").Result()
			if err != nil {
				t.Fatal(err)
			}
			leftCents, _ := rdb.HGet(ctx, "{rp"+id+"}:meta", "left").Int64()
			if int(left)+len(rows) != packets || leftCents+sum != total {
				t.Fatalf("%d packets in the database + %d in redis != %d, or %d + %d cents != %d", len(rows), left, packets, sum, leftCents, total)
			}
			t.Logf("%d packets answered OK before the kill, %d in the database", len(won), len(rows))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d OK'd packets missing from the database (%d in flight)", missing, inflight)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRedPacketExpiryRefundsOnceWithTwoNodes runs two nodes on one Redis
// and database, each with a refund service ticking every 50 ms: a red
// packet grabbed through both is refunded once (one log line across both
// nodes, one refund record with exactly the unclaimed packets and cents),
// and its Redis state is removed.
func TestRedPacketExpiryRefundsOnceWithTwoNodes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the service as processes")
	}
	bin, redisSrv, dbURL, env, tokens := killRig(t)
	env["LOG_LEVEL"] = "info" // the refund's log line is counted
	env["RED_PACKET_REFUND_INTERVAL"], env["RED_PACKET_REFUND_GRACE"] = "50ms", "50ms"
	creator, _ := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleUser}, time.Hour)
	a, b := startProcess(t, bin, env), startProcess(t, bin, env)
	const packets, total = 10, 1000
	id := createRedPacketOn(t, a, creator, total, packets, 3)
	client := &http.Client{Timeout: 5 * time.Second}
	var grabbed int64
	for u := int64(2); u <= 5; u++ {
		node := a
		if u%2 == 0 {
			node = b
		}
		tok, _ := tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
		code, amount, err := node.grabRedPacket(client, tok, id)
		if err != nil || code != "OK" {
			t.Fatalf("grab of user %d: %s %v", u, code, err)
		}
		grabbed += amount
	}
	db := testenv.MustOpen(t, dbURL)
	ctx := context.Background()
	var refund struct {
		Cents *int64     `bun:"refund_cents"`
		Count *int       `bun:"refund_count"`
		Time  *time.Time `bun:"refund_time"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := db.NewSelect().Table("tb_red_packet").Column("refund_cents", "refund_count", "refund_time").Where("id = ?", id).Scan(ctx, &refund); err != nil {
			t.Fatal(err)
		}
		if refund.Time != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("red packet not refunded 30 s after it expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if *refund.Cents != total-grabbed || *refund.Count != packets-4 {
		t.Fatalf("refunded %d cents and %d packets, want %d and %d", *refund.Cents, *refund.Count, total-grabbed, packets-4)
	}
	time.Sleep(500 * time.Millisecond) // ten more refund ticks on each node
	if n := strings.Count(a.Output(), "red packet refunded") + strings.Count(b.Output(), "red packet refunded"); n != 1 {
		t.Fatalf("%d refund log lines across the two nodes, want 1", n)
	}
	if n, err := redisSrv.Client().Exists(ctx, "{rp"+id+"}:meta", "{rp"+id+"}:packets", "{rp"+id+"}:users").Result(); err != nil || n != 0 {
		t.Fatalf("%d red packet keys left in redis (%v)", n, err)
	}
	for _, node := range []*process{a, b} { // one node's actor knew it, the other's loads it
		if code, _, err := node.grabRedPacket(client, creator, id); err != nil || code != "EXPIRED" {
			t.Fatalf("grab after the refund: %s %v, want EXPIRED", code, err)
		}
	}
}

// TestRedPacketRefundWaitsForAGrabHeldAcrossARedisWipe plays, against the
// built service, a red packet whose grab answered OK is held by the
// red-packet writer (Postgres refuses connections) when the red packet
// expires and Redis is killed and started empty; then Postgres comes
// back. The refund must count that grab: grabbed + refunded = total, the
// grab answered OK is in the database, nothing dead-lettered. Before, the
// refund found nothing in Redis to wait for, refunded the total less the
// one grab in the table, and the held grab came on top.
func TestRedPacketRefundWaitsForAGrabHeldAcrossARedisWipe(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the service as a process")
	}
	bin, redisSrv, dbURL, env, tokens := killRig(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pgProxy := testenv.MustProxy(t, u.Host)
	u.Host = pgProxy.Addr()
	env["DATABASE_URL"] = u.String()
	env["RED_PACKET_REFUND_INTERVAL"] = "100ms"
	node := startProcess(t, bin, env)
	creator, _ := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleUser}, time.Hour)
	const total, packets = 500, 5
	id := createRedPacketOn(t, node, creator, total, packets, 6)
	db := testenv.MustOpen(t, dbURL) // direct, not through the proxy
	ctx := context.Background()
	client := &http.Client{Timeout: 5 * time.Second}
	grab := func(user int64) int64 {
		tok, _ := tokens.Issue(auth.Identity{UserID: user, Role: auth.RoleUser}, time.Hour)
		code, amount, err := node.grabRedPacket(client, tok, id)
		if err != nil || code != "OK" {
			t.Fatalf("grab of user %d: %s %v", user, code, err)
		}
		return amount
	}
	grabs := func() map[int64]int64 { return storedGrabs(t, db, id) }
	ok := map[int64]int64{2: grab(2)}
	eventually(t, "the first grab persisted", 10*time.Second, func() bool { return len(grabs()) == 1 })

	pgProxy.Down()
	ok[3] = grab(3)
	rdb := redisSrv.Client()
	eventually(t, "the writer to hold the second grab", 10*time.Second, func() bool {
		p, err := rdb.XPending(ctx, "{rp"+id+"}:log", "persist").Result()
		return err == nil && p.Count == 1
	})
	var expires time.Time
	if err := db.NewSelect().Table("tb_red_packet").Column("expire_time").Where("id = ?", id).Scan(ctx, &expires); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(expires) + 1500*time.Millisecond) // past the expiry and the refund's grace
	redisSrv.Restart()
	pgProxy.Up()

	var refund struct {
		Cents *int64     `bun:"refund_cents"`
		Count *int       `bun:"refund_count"`
		Time  *time.Time `bun:"refund_time"`
	}
	eventually(t, "the refund", 60*time.Second, func() bool {
		err := db.NewSelect().Table("tb_red_packet").Column("refund_cents", "refund_count", "refund_time").Where("id = ?", id).Scan(ctx, &refund)
		return err == nil && refund.Time != nil
	})
	// The writer, if it still held the grab, retries within its longest
	// pause and an attempt (5 s): give it that before judging.
	time.Sleep(6 * time.Second)
	in := grabs()
	var grabbed int64
	for _, a := range in {
		grabbed += a
	}
	if grabbed+*refund.Cents != total || len(in)+*refund.Count != packets {
		t.Fatalf("paid out %d cents in %d packets (grabs %v, refund %d cents in %d packets) of %d in %d",
			grabbed+*refund.Cents, len(in)+*refund.Count, in, *refund.Cents, *refund.Count, total, packets)
	}
	for u, a := range ok {
		if in[u] != a {
			t.Errorf("user %d was answered OK with %d cents; the database holds %v", u, a, in)
		}
	}
	if n, err := db.NewSelect().Table("tb_order_dead_letter").Where("key LIKE ?", "{rp"+id+"}:log/%").Count(ctx); err != nil || n != 0 {
		t.Errorf("%d grabs dead-lettered (%v)", n, err)
	}
}
