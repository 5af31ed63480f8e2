package domain_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"flashsale/domain"
)

// TestSplitRedPacketProperties splits many random (total, count) pairs and
// checks every split: the sum is exact, each packet holds at least 1 cent,
// and no packet exceeds twice the mean of what remained when it was drawn.
func TestSplitRedPacketProperties(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 12))
	for i := range 20_000 {
		var count int
		switch i % 4 {
		case 0:
			count = 1 + rnd.IntN(10)
		case 1:
			count = 1 + rnd.IntN(domain.RedPacketMaxCount)
		default:
			count = 1 + rnd.IntN(200)
		}
		var total int64
		switch i % 3 {
		case 0: // the tightest: a cent or a few per packet
			total = int64(count) + rnd.Int64N(int64(count)+1)
		default:
			total = int64(count) + rnd.Int64N(domain.RedPacketMaxCents-int64(count)+1)
		}
		if i%4 == 1 && i%8 != 1 { // keep the big counts few: they dominate the run time
			count = 1 + rnd.IntN(50)
		}
		if total < int64(count) {
			total = int64(count)
		}
		got := domain.SplitRedPacket(total, count, rnd)
		if len(got) != count {
			t.Fatalf("split(%d, %d): %d packets", total, count, len(got))
		}
		left, sum := total, int64(0)
		for j, a := range got {
			if a < 1 {
				t.Fatalf("split(%d, %d): packet %d holds %d cents", total, count, j, a)
			}
			if packets := int64(count - j); a*packets > 2*left {
				t.Fatalf("split(%d, %d): packet %d holds %d, over twice the mean %d/%d", total, count, j, a, left, packets)
			}
			left -= a
			sum += a
		}
		if sum != total {
			t.Fatalf("split(%d, %d): packets sum to %d", total, count, sum)
		}
	}
}

// TestSplitRedPacketDistribution checks the distribution of many splits of
// one red packet: every position's mean is the overall mean (no position
// is favoured), and the first packet is spread evenly over 1 .. 2 × mean
// (the double-average rule), not bunched.
func TestSplitRedPacketDistribution(t *testing.T) {
	t.Parallel()
	const total, count, runs = 10_000, 10, 40_000
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var sums [count]float64
	var quarters [4]int
	for range runs {
		got := domain.SplitRedPacket(total, count, rnd)
		for j, a := range got {
			sums[j] += float64(a)
		}
		quarters[min((got[0]-1)*4/2000, 3)]++
	}
	mean := float64(total) / count
	for j, s := range sums {
		if m := s / runs; math.Abs(m-mean) > 0.03*mean {
			t.Errorf("position %d: mean %.1f cents, want %.0f ± 3%%", j, m, mean)
		}
	}
	for q, n := range quarters {
		if share := float64(n) / runs; math.Abs(share-0.25) > 0.02 {
			t.Errorf("first packet: %.3f of the splits in quarter %d of 1 .. 2000, want 0.25 ± 0.02", share, q)
		}
	}
}

func TestNewRedPacketCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		in    domain.NewRedPacket
		field string
	}{
		{"a valid one passes", domain.NewRedPacket{TotalCents: 100, Count: 100, Expiry: time.Hour}, ""},
		{"no packets", domain.NewRedPacket{TotalCents: 100, Count: 0, Expiry: time.Hour}, "count"},
		{"the most packets pass", domain.NewRedPacket{TotalCents: 1e6, Count: domain.RedPacketMaxCount, Expiry: time.Hour}, ""},
		{"too many packets", domain.NewRedPacket{TotalCents: 1e6, Count: domain.RedPacketMaxCount + 1, Expiry: time.Hour}, "count"},
		{"less than a cent a packet", domain.NewRedPacket{TotalCents: 9, Count: 10, Expiry: time.Hour}, "totalCents"},
		{"over the maximum sum", domain.NewRedPacket{TotalCents: 100_000_001, Count: 10, Expiry: time.Hour}, "totalCents"},
		{"negative sum", domain.NewRedPacket{TotalCents: -5, Count: 1, Expiry: time.Hour}, "totalCents"},
		{"expiry under a second", domain.NewRedPacket{TotalCents: 10, Count: 1, Expiry: 0}, "expiresInSeconds"},
		{"expiry over a week", domain.NewRedPacket{TotalCents: 10, Count: 1, Expiry: 7*24*time.Hour + time.Second}, "expiresInSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.Check()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			de, ok := err.(*domain.Error)
			if !ok || de.Code != domain.CodeBadInput || de.Field != tc.field {
				t.Fatalf("got %v, want BAD_USER_INPUT on %s", err, tc.field)
			}
		})
	}
}
