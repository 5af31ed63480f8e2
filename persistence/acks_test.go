package persistence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"flashsale/domain"
	"flashsale/persistence"
	"flashsale/testkit/testenv"
)

// replicated is a primary with one synced replica, real processes.
func replicated(tb testing.TB) (primary, replica *testenv.RedisServer) {
	tb.Helper()
	primary = testenv.MustRedis(tb)
	return primary, testenv.MustReplica(tb, primary)
}

// ackClient is a request-path client of s with room in its read deadline
// for WAIT, as the service builds it.
func ackClient(tb testing.TB, s *testenv.RedisServer) redis.UniversalClient {
	tb.Helper()
	tuning := persistence.RequestTuning(0)
	tuning.Read += 2 * ackTimeout
	c := persistence.SingleTarget(redis.Options{Addr: s.Addr()}).Client(tuning)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// ackTimeout is the tests' acknowledgement timeout: long enough for a
// replica on a loaded machine to answer the primary's GETACK, so that an
// acknowledged batch is not refused by the machine's load.
const ackTimeout = time.Second

// call is a grab call's context, as the voucher actor gives it, with room
// for the acknowledgement.
func call(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond+2*ackTimeout)
	tb.Cleanup(cancel)
	return ctx
}

// A batch answers once the replica holds its sales: each request id is on
// the replica the moment Grab returns. With the replica stopped (SIGSTOP)
// the batch fails with ErrNotAcknowledged, which is not "not sent" (the
// script ran), within the acknowledgement's timeout; retries of the same
// request ids fail alike while it is stopped, and once it is back they
// are answered with the orders first sold, with no second order.
func TestGrabAnswersOnlyWhatTheReplicasHold(t *testing.T) {
	t.Parallel()
	primary, replica := replicated(t)
	db, rdb := testenv.MustPostgres(t), ackClient(t, primary)
	v := testenv.MustVoucher(t, db, rdb, testenv.VoucherSpec{Stock: 10, Limit: 1})
	g, ids := persistence.NewGrabs(rdb), testenv.MustOrderIDs(t, db)
	g.Acks = persistence.Acks{Replicas: 1, Timeout: ackTimeout}
	fence, _, err := g.Claim(t.Context(), v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	onReplica := replica.Client()
	reqKey := fmt.Sprintf("{v%d}:req", v.ID)

	first := testenv.Grabs(t, ids, 1, 2)
	out, err := g.Grab(call(t), v.ID, 0, fence, first)
	if err != nil || fmt.Sprint(codes(out)) != "[OK OK]" {
		t.Fatalf("acknowledged batch: %v %v", codes(out), err)
	}
	for _, gr := range first {
		if got, err := onReplica.HGet(t.Context(), reqKey, gr.RequestID).Result(); err != nil || got != fmt.Sprint(gr.OrderID) {
			t.Fatalf("request %s answered OK but the replica holds %q (%v)", gr.RequestID, got, err)
		}
	}

	replica.Pause()
	paused := true
	defer func() {
		if paused {
			replica.Continue()
		}
	}()
	second := testenv.Grabs(t, ids, 3, 4)
	for attempt := range 2 {
		began := time.Now()
		_, err = g.Grab(call(t), v.ID, 0, fence, second)
		took := time.Since(began)
		if !errors.Is(err, persistence.ErrNotAcknowledged) || errors.Is(err, domain.ErrNotSent) {
			t.Fatalf("attempt %d with the replica stopped: %v, want ErrNotAcknowledged and not ErrNotSent", attempt, err)
		}
		if took < ackTimeout*3/4 || took > 2*ackTimeout {
			t.Errorf("attempt %d took %s, want about the %s acknowledgement timeout", attempt, took, ackTimeout)
		}
	}
	replica.Continue()
	paused = false
	out, err = g.Grab(call(t), v.ID, 0, fence, second)
	if err != nil || fmt.Sprint(codes(out)) != "[OK OK]" {
		t.Fatalf("retry after the replica is back: %v %v", codes(out), err)
	}
	for i, gr := range second {
		if out.Results[i].OrderID != gr.OrderID {
			t.Errorf("request %s answered order %d, first sold as %d", gr.RequestID, out.Results[i].OrderID, gr.OrderID)
		}
	}
	if n, _ := persistence.InFlight(t.Context(), rdb, v.ID); n != 4 || out.State.Remaining != 6 {
		t.Fatalf("order log holds %d and %d remain, want 4 and 6: a retry sold again", n, out.State.Remaining)
	}
}

// A request id sold on one connection and asked again on another (a retry
// after UNAVAILABLE lands on any pooled connection) is acknowledged only
// once the replica holds the first sale. WAIT waits for the replication
// offset its connection reached with its last command, and Redis takes
// that offset after every command, a script that wrote nothing included:
// this test fails on a server that would take it only after writes.
func TestARetryOnAnotherConnectionWaitsForTheFirstSale(t *testing.T) {
	t.Parallel()
	primary, replica := replicated(t)
	db := testenv.MustPostgres(t)
	v := testenv.MustVoucher(t, db, primary.Client(), testenv.VoucherSpec{Stock: 10, Limit: 1})
	ids := testenv.MustOrderIDs(t, db)
	first := persistence.NewGrabs(ackClient(t, primary)) // sells without acknowledgement
	fence, _, err := first.Claim(t.Context(), v.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	replica.Pause()
	defer replica.Continue()
	batch := testenv.Grabs(t, ids, 1)
	if out, err := first.Grab(call(t), v.ID, 0, fence, batch); err != nil || out.Results[0].Code != domain.SeckillOK {
		t.Fatalf("sale: %v %v", codes(out), err)
	}
	retry := persistence.NewGrabs(ackClient(t, primary)) // a connection that wrote nothing
	retry.Acks = persistence.Acks{Replicas: 1, Timeout: 100 * time.Millisecond}
	out, err := retry.Grab(call(t), v.ID, 0, fence, batch)
	if !errors.Is(err, persistence.ErrNotAcknowledged) {
		t.Fatalf("retry of a sale the stopped replica does not hold: %v %v, want ErrNotAcknowledged", codes(out), err)
	}
}

// Red packets: the same acknowledgement for their grab batches, retries
// included.
func TestRedPacketGrabAnswersOnlyWhatTheReplicasHold(t *testing.T) {
	t.Parallel()
	primary, replica := replicated(t)
	db := testenv.MustPostgres(t)
	r := persistence.NewRedPacketRedis(ackClient(t, primary))
	r.Acks = persistence.Acks{Replicas: 1, Timeout: ackTimeout}
	testenv.MustRedPacket(t, persistence.NewRedPacketStore(db, r), 1, []int64{5, 3, 2}, time.Hour)

	out, err := r.Grab(call(t), 1, []domain.RedPacketGrab{{RequestID: "a", UserID: 1}})
	if err != nil || testenv.RedPacketCodes(out) != "OK:5 " {
		t.Fatalf("acknowledged grab: %s %v", testenv.RedPacketCodes(out), err)
	}
	replica.Pause()
	paused := true
	defer func() {
		if paused {
			replica.Continue()
		}
	}()
	batch := []domain.RedPacketGrab{{RequestID: "b", UserID: 2}}
	if _, err := r.Grab(call(t), 1, batch); !errors.Is(err, persistence.ErrNotAcknowledged) {
		t.Fatalf("grab with the replica stopped: %v, want ErrNotAcknowledged", err)
	}
	// A retry on a connection that wrote nothing waits for the first grab.
	other := persistence.NewRedPacketRedis(ackClient(t, primary))
	other.Acks = r.Acks
	if _, err := other.Grab(call(t), 1, batch); !errors.Is(err, persistence.ErrNotAcknowledged) {
		t.Fatalf("retry on another connection with the replica stopped: %v, want ErrNotAcknowledged", err)
	}
	replica.Continue()
	paused = false
	out, err = other.Grab(call(t), 1, batch)
	if err != nil || testenv.RedPacketCodes(out) != "OK:3 " || out.State.Left != 1 {
		t.Fatalf("retry after the replica is back: %s left %d %v, want OK:3 left 1", testenv.RedPacketCodes(out), out.State.Left, err)
	}
}
