package graph_test

import (
	"fmt"
	"testing"
	"time"
)

// A voucher's segments: set at creation (1..64, default 1), changed by an
// admin only while the sale is PAUSED, written to Postgres and to the
// voucher's metadata in Redis, and the sale goes on exactly after the
// change, with users grabbing through the new segments.
func TestVoucherSegmentsChangeOnlyWhilePaused(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	admin := s.admin(t)
	const segmentsOf = `query($id: ID!) { voucher(id: $id) { seckill { segments } } }`
	const set = `mutation($id: ID!, $n: Int!) { setVoucherSegments(voucherId: $id, segments: $n) { id seckill { segments } } }`
	const status = `mutation($id: ID!, $st: VoucherStatus!) { setVoucherStatus(id: $id, status: $st) { status } }`

	for _, bad := range []int{0, 65} {
		in := seckillInput(1, 10)
		in["segments"] = bad
		wantCode(t, s.do(t, admin, createSeckill, map[string]any{"in": in}, nil), "BAD_USER_INPUT")
	}
	in := seckillInput(1, 100)
	in["segments"] = 2
	v := s.createVoucher(t, in)
	var got struct {
		Voucher struct{ Seckill struct{ Segments int } }
	}
	s.mustDo(t, admin, segmentsOf, map[string]any{"id": v.ID}, &got)
	if got.Voucher.Seckill.Segments != 2 {
		t.Fatalf("segments %d after creation, want 2", got.Voucher.Seckill.Segments)
	}
	grab := func(from, to int64) map[string]int {
		codes := map[string]int{}
		for u := from; u < to; u++ {
			var out struct{ SeckillVoucher struct{ Code string } }
			s.mustDo(t, s.token(t, u, "user"), grabMutation, map[string]any{"id": v.ID}, &out)
			codes[out.SeckillVoucher.Code]++
		}
		return codes
	}
	if c := grab(100, 140); c["OK"] != 40 {
		t.Fatalf("before the change: %v", c)
	}

	// A running sale keeps its segments; a user may not change them.
	wantCode(t, s.do(t, admin, set, map[string]any{"id": v.ID, "n": 8}, nil), "BAD_USER_INPUT")
	wantCode(t, s.do(t, s.token(t, 7, "user"), set, map[string]any{"id": v.ID, "n": 8}, nil), "FORBIDDEN")
	s.mustDo(t, admin, status, map[string]any{"id": v.ID, "st": "PAUSED"}, nil)
	wantCode(t, s.do(t, admin, set, map[string]any{"id": v.ID, "n": 65}, nil), "BAD_USER_INPUT")
	s.mustDo(t, admin, set, map[string]any{"id": v.ID, "n": 8}, nil)
	s.mustDo(t, admin, segmentsOf, map[string]any{"id": v.ID}, &got)
	if got.Voucher.Seckill.Segments != 8 {
		t.Fatalf("segments %d after the change, want 8", got.Voucher.Seckill.Segments)
	}
	if n, err := s.rdb.HGet(t.Context(), fmt.Sprintf("{v%s}:meta", v.ID), "segs").Int(); err != nil || n != 8 {
		t.Fatalf("redis metadata segs %d (%v), want 8", n, err)
	}
	s.mustDo(t, admin, status, map[string]any{"id": v.ID, "st": "ACTIVE"}, nil)

	// The sale goes on exactly: users 100..139 keep their one order each
	// whatever segment they map to now, and the rest sells out. An
	// activation that cached PAUSED answers so until the resume's
	// announcement reaches it (pub/sub, milliseconds; longer on a loaded
	// machine): a PAUSED answer changes nothing, so the grab is asked again.
	resumed := time.Now().Add(5 * time.Second)
	c := map[string]int{}
	for u := int64(100); u < 260; u++ {
		for {
			code := grab(u, u+1)
			if code["PAUSED"] == 0 || time.Now().After(resumed) {
				for k, n := range code {
					c[k] += n
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if c["OK"] != 60 || c["LIMIT_REACHED"] != 40 || c["SOLD_OUT"] != 60 {
		t.Fatalf("after the change: %v, want 60 OK, 40 LIMIT_REACHED, 60 SOLD_OUT", c)
	}
	used := 0 // segments whose activation claimed a fencing token
	for seg := 1; seg < 8; seg++ {
		if n, _ := s.rdb.Get(t.Context(), fmt.Sprintf("{v%s}:fence:%d", v.ID, seg)).Int(); n > 0 {
			used++
		}
	}
	if used < 5 {
		t.Errorf("grabs went through %d of segments 1..7 after the change to 8", used)
	}
}
