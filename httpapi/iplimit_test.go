package httpapi_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/internal/auth"
	"flashsale/node"
	"flashsale/testkit/nodetest"
	"flashsale/testkit/testenv"
)

// RATE_IP_PER_SEC limits every request of an address, bad ones included,
// before anything runs; other addresses are not affected. Grabs the node
// knows are left to their voucher actor (here configured without limits),
// which checks the same budget once per batch.
func TestRequestsOverTheIPRateAreRateLimited(t *testing.T) {
	t.Parallel()
	n := startNode(t, map[string]string{"RATE_IP_PER_SEC": "2", "GRAPHQL_COMPILED_GRABS": "false"}, node.Hooks{
		Actors: func(o *actors.Options) { nodetest.Patient(o); o.Limits = nil },
	})
	v := mustVoucher(t, n, testenv.VoucherSpec{Stock: 100})
	vid := strconv.FormatInt(v.ID, 10)
	h := n.GraphQL
	send := func(ip, token, query string) []string {
		_, codes := post(t, h, ip, token, query)
		return codes
	}
	stock := `{ stock(voucherId: "` + vid + `") { remaining } }`
	// Burst 2, then one more every 500 ms; as above, the bound follows the
	// round's duration and a round too slow to show the limit is run again
	// from another address.
	var limitedIP string
	for round := 0; ; round++ {
		ip := "203.0.113." + strconv.Itoa(10+round)
		limitedIP = ip
		limited := 0
		start := time.Now()
		for range 6 {
			switch codes := send(ip, "not-a-token", stock); {
			case slices.Equal(codes, []string{"UNAUTHENTICATED"}):
			case slices.Equal(codes, []string{"RATE_LIMITED"}):
				limited++
			default:
				t.Fatalf("codes %v", codes)
			}
		}
		elapsed := time.Since(start)
		if allowed := 2 + 1 + int(elapsed/(500*time.Millisecond)); 6-limited > allowed || limited > 4 {
			t.Fatalf("%d of 6 requests limited in %v (at most %d admitted)", limited, elapsed, allowed)
		}
		if limited > 0 {
			break
		}
		if elapsed < time.Second || round == 4 {
			t.Fatalf("none of 6 requests limited in %v", elapsed)
		}
	}
	user := n.Token(t, 9, auth.RoleUser)
	if codes := send("203.0.113.8", user, stock); len(codes) != 0 {
		t.Fatalf("another address: %v", codes)
	}
	// A grab whose text this node has validated before is known as a grab
	// before parsing, and left to its actor's budget; the first sight of a
	// text pays the per-IP limit like any other operation.
	grab := `mutation { seckillVoucher(voucherId: "` + vid + `") { code } }`
	// The limited address is limited again right before (time passed
	// since its round, and its budget refills every 500 ms).
	for i := 0; !slices.Equal(send(limitedIP, "not-a-token", stock), []string{"RATE_LIMITED"}); i++ {
		if i == 6 {
			t.Fatal("the limited address is no longer limited after 6 more requests")
		}
	}
	if codes := send(limitedIP, user, grab); !slices.Equal(codes, []string{"RATE_LIMITED"}) {
		t.Fatalf("a grab of a new text from a limited address: %v, want RATE_LIMITED", codes)
	}
	if codes := send("203.0.113.9", user, grab); len(codes) != 0 {
		t.Fatalf("a grab from a fresh address: %v", codes)
	}
	if codes := send(limitedIP, user, grab); len(codes) != 0 {
		t.Fatalf("a known grab was limited per request: %v", codes)
	}
}

// Every per-address request limit counts an IPv6 /64 as one client: a
// third address of a /64 whose burst two others spent is refused before
// parsing, and the next /64 is not.
func TestPerAddressRequestLimitsCountA64AsOneClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		env   map[string]string
		burst int
	}{
		{"SHED_IP_PER_SEC", map[string]string{"SHED_IP_PER_SEC": "1"}, 2},
		{"RATE_IP_PER_SEC", map[string]string{"RATE_IP_PER_SEC": "1"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := startNode(t, tc.env, node.Hooks{}).GraphQL
			for i := range tc.burst + 1 {
				ip := "2001:db8:1:2::" + strconv.Itoa(10+i)
				_, codes := post(t, h, ip, "", "{ __typename }")
				if refused := slices.Equal(codes, []string{"RATE_LIMITED"}); refused != (i == tc.burst) || (!refused && len(codes) > 0) {
					t.Fatalf("request %d from %s: %v; the /64's burst is %d", i, ip, codes, tc.burst)
				}
			}
			if _, codes := post(t, h, "2001:db8:1:3::10", "", "{ __typename }"); len(codes) != 0 {
				t.Fatalf("the next /64: %v", codes)
			}
		})
	}
}
