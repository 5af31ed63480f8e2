package graph_test

import (
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/internal/auth"
)

func TestGrabsOverTheUserRateAreRateLimited(t *testing.T) {
	t.Parallel()
	s := newServerWith(t, func(o *actors.Options) { o.UserRate = 2 })
	in := seckillInput(1, 100)
	in["perUserLimit"] = 50
	v := s.createVoucher(t, in)
	// Burst 2, then one more every 500 ms: a slow round may admit more, so
	// the bound follows the round's duration, and a round too slow to
	// show the limit at all is run again with a fresh user.
	for round := int64(0); ; round++ {
		user := s.token(t, 100+round, auth.RoleUser)
		ok, limited := 0, 0
		start := time.Now()
		for i := 0; i < 6; i++ {
			var out struct{ SeckillVoucher struct{ Code string } }
			errs := s.do(t, user, grabMutation, map[string]any{"id": v.ID}, &out)
			if len(errs) == 0 {
				if out.SeckillVoucher.Code != "OK" {
					t.Fatalf("grab %d: %s", i, out.SeckillVoucher.Code)
				}
				ok++
				continue
			}
			e := wantCode(t, errs, "RATE_LIMITED")
			if ms, _ := e.Extensions["retryAfterMs"].(float64); ms <= 0 {
				t.Fatalf("retryAfterMs %v", e.Extensions["retryAfterMs"])
			}
			limited++
		}
		elapsed := time.Since(start)
		if allowed := 2 + 1 + int(elapsed/(500*time.Millisecond)); ok < 2 || ok > allowed {
			t.Fatalf("%d admitted, %d limited in %v (at most %d allowed)", ok, limited, elapsed, allowed)
		}
		if limited > 0 {
			break
		}
		if elapsed < time.Second || round == 4 {
			t.Fatalf("%d admitted, none limited in %v", ok, elapsed)
		}
	}
	// Another user is not affected.
	var other struct{ SeckillVoucher struct{ Code string } }
	s.mustDo(t, s.token(t, 6, auth.RoleUser), grabMutation, map[string]any{"id": v.ID}, &other)
	if other.SeckillVoucher.Code != "OK" {
		t.Fatalf("other user: %s", other.SeckillVoucher.Code)
	}
}
