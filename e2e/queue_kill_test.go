package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"flashsale/internal/auth"
)

// placeQuery answers a user's place: joinQueue or queuePlace.
func placeQuery(client *http.Client, base, token, query, voucherID string) (state string, position int, err error) {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": map[string]any{"id": voucherID}})
	req, _ := http.NewRequest(http.MethodPost, base+"/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Data map[string]*struct {
			State    string
			Position *int
		}
		Errors []struct{ Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", 0, err
	}
	if len(out.Errors) > 0 {
		return "", 0, fmt.Errorf("%s", out.Errors[0].Message)
	}
	for _, p := range out.Data {
		if p == nil {
			return "", 0, nil // no place
		}
		if p.Position != nil {
			position = *p.Position
		}
		return p.State, position, nil
	}
	return "", 0, fmt.Errorf("no data")
}

// A node killed with SIGKILL while users join its waiting room loses no
// place: every join it answered has its place on another node, the
// places numbered 1 to the number waiting, none twice. (The room is
// paused, so that nobody leaves the line meanwhile.) With the join script
// not writing the place, joins answer no place and it fails.
func TestANodeKilledMidQueueLosesNoPlace(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the service as processes")
	}
	bin, _, _, env, tokens := killRig(t)
	admin, _ := tokens.Issue(auth.Identity{UserID: 1, Role: auth.RoleAdmin}, time.Hour)
	first, second := startProcess(t, bin, env), startProcess(t, bin, env)
	created := postQuery(t, first.Base, admin, `mutation { createVoucher(input: {shopId: "1", title: "q", payValue: 1, actualValue: 2, type: SECKILL, stock: 10,
  beginAt: "2026-01-01T00:00:00Z", endAt: "2099-01-01T00:00:00Z", waitingRoom: true, admitPerSecond: 1, maxActive: 1}) { id } }`)
	voucherID := created["createVoucher"].(map[string]any)["id"].(string)
	postQuery(t, first.Base, admin, `mutation { setWaitingRoom(voucherId: "`+voucherID+`", paused: true) { id } }`)

	const join = `mutation($id: ID!) { joinQueue(voucherId: $id) { state position } }`
	var (
		mu     sync.Mutex
		joined []int64
		wg     sync.WaitGroup
		killed = make(chan struct{})
	)
	client := &http.Client{Timeout: 5 * time.Second}
	for w := range 16 {
		wg.Go(func() {
			for u := int64(w*1000 + 1); ; u++ {
				select {
				case <-killed:
					return
				default:
				}
				tok, _ := tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
				if state, _, err := placeQuery(client, first.Base, tok, join, voucherID); err == nil && state != "" {
					mu.Lock()
					joined = append(joined, u)
					mu.Unlock()
				}
			}
		})
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		mu.Lock()
		n := len(joined)
		mu.Unlock()
		if n >= 300 {
			break
		}
		if time.Now().After(deadline) {
			close(killed)
			wg.Wait()
			t.Fatalf("%d joins answered with a place in 30 s, want 300", n)
		}
		time.Sleep(time.Millisecond)
	}
	first.Kill() // SIGKILL, mid-queue
	close(killed)
	wg.Wait()

	const place = `query($id: ID!) { queuePlace(voucherId: $id) { state position } }`
	seen := map[int]int64{}
	for _, u := range joined {
		tok, _ := tokens.Issue(auth.Identity{UserID: u, Role: auth.RoleUser}, time.Hour)
		state, pos, err := placeQuery(client, second.Base, tok, place, voucherID)
		switch {
		case err != nil:
			t.Fatalf("user %d's place on the other node: %v", u, err)
		case state != "WAITING" || pos < 1:
			t.Fatalf("user %d, whose join the killed node answered, on the other node: state %q position %d", u, state, pos)
		case seen[pos] != 0:
			t.Fatalf("users %d and %d both at position %d", seen[pos], u, pos)
		}
		seen[pos] = u
	}
	// The joins in flight at the kill may have their places too: the
	// positions of those answered are distinct, within the line.
	tok, _ := tokens.Issue(auth.Identity{UserID: joined[0], Role: auth.RoleUser}, time.Hour)
	var out struct {
		Data struct{ QueuePlace struct{ Waiting int } }
	}
	postGraphQL(t, second.Base, tok, map[string]any{"query": `query($id: ID!) { queuePlace(voucherId: $id) { waiting } }`, "variables": map[string]any{"id": voucherID}}, &out)
	if w := out.Data.QueuePlace.Waiting; w < len(joined) {
		t.Fatalf("%d waiting on the other node, but the killed one answered %d joins", w, len(joined))
	}
	for pos := range seen {
		if pos > out.Data.QueuePlace.Waiting {
			t.Fatalf("position %d beyond the %d waiting", pos, out.Data.QueuePlace.Waiting)
		}
	}
	t.Logf("%d joins answered before the kill, %d waiting after it", len(joined), out.Data.QueuePlace.Waiting)
}
