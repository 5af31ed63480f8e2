package graph_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"flashsale/actors"
	"flashsale/internal/auth"
	"flashsale/persistence"
)

func TestGrabsOverTheUserRateAreRateLimited(t *testing.T) {
	s := newServerWith(t, func(rdb *redis.Client) actors.Options {
		return actors.Options{Limits: persistence.NewRateLimits(rdb, 2, 0, 0)}
	})
	in := seckillInput(1, 100)
	in["perUserLimit"] = 50
	v := s.createVoucher(t, in)
	user := s.token(t, 5, auth.RoleUser)
	ok, limited := 0, 0
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
	if ok < 2 || ok > 3 || limited == 0 { // burst 2, plus at most one refill during the loop
		t.Fatalf("%d admitted, %d limited", ok, limited)
	}
	// Another user is not affected.
	var other struct{ SeckillVoucher struct{ Code string } }
	s.mustDo(t, s.token(t, 6, auth.RoleUser), grabMutation, map[string]any{"id": v.ID}, &other)
	if other.SeckillVoucher.Code != "OK" {
		t.Fatalf("other user: %s", other.SeckillVoucher.Code)
	}
}
