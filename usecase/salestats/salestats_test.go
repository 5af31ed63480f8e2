package salestats_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"flashsale/domain"
	"flashsale/usecase/salestats"
)

// memStore keeps what the service adds; fail makes Add fail.
type memStore struct {
	added []domain.SaleSecond
	fail  bool
}

func (m *memStore) Add(_ context.Context, secs []domain.SaleSecond) error {
	if m.fail {
		return errors.New("redis away")
	}
	m.added = append(m.added, secs...)
	return nil
}
func (m *memStore) Second(context.Context, int64, int64) (domain.SaleSecond, int64, error) {
	return domain.SaleSecond{}, 0, nil
}
func (m *memStore) Room(context.Context, int64) (domain.RoomFigures, bool, error) {
	return domain.RoomFigures{}, false, nil
}
func (m *memStore) StoredOrders(context.Context, int64) (int, error) { return 0, nil }

// clock is a settable time.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newService(opts salestats.Options) (*salestats.Service, *memStore, *clock) {
	st := &memStore{}
	c := &clock{now: time.Unix(1_000_000, 0)}
	opts.Now = c.Now
	return salestats.New(st, nil, slog.New(slog.DiscardHandler), opts), st, c
}

// A node adds each ended second once, per voucher, with its counts and
// latencies; the second being counted waits for its end.
func TestFlushAddsEachEndedSecondOnce(t *testing.T) {
	s, st, c := newService(salestats.Options{})
	ok, sold := domain.SaleCodeIndex(domain.SeckillOK), domain.SaleCodeIndex(domain.SeckillSoldOut)
	s.Record(1, ok, time.Millisecond, c.now)
	s.Record(1, sold, 3*time.Millisecond, c.now)
	s.Record(2, domain.SaleForbidden, time.Microsecond, c.now)
	if n, err := s.Flush(t.Context()); n != 0 || err != nil {
		t.Fatalf("flush within the second added %d (%v), want 0", n, err)
	}
	c.now = c.now.Add(time.Second)
	s.Record(1, ok, time.Millisecond, c.now) // the next second's
	if n, err := s.Flush(t.Context()); n != 2 || err != nil {
		t.Fatalf("flush after the second added %d (%v), want the two vouchers' seconds", n, err)
	}
	for _, sec := range st.added {
		switch {
		case sec.VoucherID == 1 && sec.Codes[ok] == 1 && sec.Codes[sold] == 1 && sec.Nodes == 1 && sec.Second == 1_000_000:
			if p99, _ := sec.Quantile(0.99); p99 < 2*time.Millisecond || p99 > 4*time.Millisecond {
				t.Errorf("p99 of 1 ms and 3 ms: %v", p99)
			}
		case sec.VoucherID == 2 && sec.Codes[domain.SaleForbidden] == 1 && sec.Total() == 1:
		default:
			t.Errorf("added %+v", sec)
		}
	}
	if n, _ := s.Flush(t.Context()); n != 0 {
		t.Fatalf("a second flush in the same second added %d", n)
	}
}

// A failed add keeps the seconds for the next flush; a voucher idle for
// IdleAfter is dropped; past MaxVouchers, new vouchers are not counted.
func TestCountersAreBounded(t *testing.T) {
	s, st, c := newService(salestats.Options{MaxVouchers: 2, IdleAfter: 5 * time.Second})
	for v := range int64(3) {
		s.Record(v+1, 0, time.Millisecond, c.now)
	}
	st.fail = true
	c.now = c.now.Add(time.Second)
	if _, err := s.Flush(t.Context()); err == nil {
		t.Fatal("flush with the store away did not fail")
	}
	st.fail = false
	if n, err := s.Flush(t.Context()); n != 2 || err != nil {
		t.Fatalf("flush after the failure added %d (%v), want the two counted vouchers", n, err)
	}
	c.now = c.now.Add(10 * time.Second)
	s.Flush(t.Context()) // drops both, idle
	s.Record(3, 0, time.Millisecond, c.now)
	c.now = c.now.Add(time.Second)
	if n, _ := s.Flush(t.Context()); n != 1 || st.added[len(st.added)-1].VoucherID != 3 {
		t.Fatalf("after the idle ones were dropped, voucher 3 was not counted (%d added)", n)
	}
}

// Quantiles read from the histogram are within a bucket (19 %) of the
// true ones, from microseconds to seconds.
func TestLatencyQuantilesAreWithinABucket(t *testing.T) {
	for _, d := range []time.Duration{3 * time.Microsecond, 150 * time.Microsecond, 7 * time.Millisecond, 2 * time.Second} {
		var sec domain.SaleSecond
		for range 100 {
			sec.Latency[domain.LatencyBucket(d)]++
		}
		got, ok := sec.Quantile(0.5)
		if !ok || float64(got) < 0.8*float64(d) || float64(got) > 1.25*float64(d)+float64(time.Microsecond) {
			t.Errorf("p50 of %v: %v", d, got)
		}
	}
}
