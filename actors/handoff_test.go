package actors_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flashsale/actors"
	"flashsale/domain"
	"flashsale/testkit/testenv"
)

// recordingStore stands in for Redis where a test needs a batch held in
// flight or a failure on cue: it sells everything and records who it sold
// to. Its gate holds batches in flight.
type recordingStore struct {
	gate
	failState bool        // State fails (a reload cannot read Redis)
	stale     atomic.Bool // every batch is refused as superseded
	// untilDeadline holds each batch until its call's deadline has passed
	// and sells it anyway, like a reply that arrives late.
	untilDeadline bool

	mu   sync.Mutex
	sold []int64
}

func (s *recordingStore) Claim(context.Context, int64, int) (int64, domain.VoucherState, error) {
	return 1, liveState(), nil
}

func (s *recordingStore) Refence(context.Context, int64, int, int64) (int64, domain.VoucherState, bool, error) {
	return 2, liveState(), false, nil
}

func (s *recordingStore) State(context.Context, int64) (domain.VoucherState, error) {
	if s.failState {
		return domain.VoucherState{}, errors.New("redis blip")
	}
	return liveState(), nil
}

func (s *recordingStore) Grab(ctx context.Context, _ int64, _ int, _ int64, g []domain.Grab) (domain.BatchOutcome, error) {
	if s.untilDeadline {
		<-ctx.Done()
	}
	s.hold()
	if s.stale.Load() {
		return domain.BatchOutcome{Stale: true}, nil
	}
	out := domain.BatchOutcome{State: liveState()}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range g {
		s.sold = append(s.sold, x.UserID)
		out.Results = append(out.Results, domain.GrabResult{Code: domain.SeckillOK, OrderID: x.OrderID})
	}
	return out, nil
}

func (s *recordingStore) soldTo(user int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.sold, user)
}

func grabAsync(r *actors.Router, ctx context.Context, voucher, user int64) <-chan domain.GrabResult {
	res := make(chan domain.GrabResult, 1)
	go func() { res <- r.Grab(ctx, domain.GrabRequest{VoucherID: voucher, UserID: user}) }()
	return res
}

// A caller told UNAVAILABLE because it stopped waiting must be able to
// trust it: its grab never reaches Redis afterwards.
func TestAGrabWhoseCallerGaveUpIsNeverSold(t *testing.T) {
	t.Parallel()
	st := &recordingStore{gate: gate{entered: make(chan struct{}, 1), release: make(chan struct{})}}
	r := actors.NewRouter(st, &seqIDs{}, nil, quiet, actors.Options{})
	t.Cleanup(r.Stop)
	t.Cleanup(st.open) // runs before r.Close, even when the test fails
	first := grabAsync(r, context.Background(), 1, 1)
	<-st.entered // user 1's batch is held in flight; user 2 queues behind it
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if got := r.Grab(ctx, domain.GrabRequest{VoucherID: 1, UserID: 2}); got.Code != domain.SeckillUnavailable {
		t.Fatalf("user 2 gave up but got %s", got.Code)
	}
	st.open() // user 2 gave up while user 1's batch was held
	if got := <-first; got.Code != domain.SeckillOK {
		t.Fatalf("user 1: %s", got.Code)
	}
	if got := r.Grab(context.Background(), domain.GrabRequest{VoucherID: 1, UserID: 3}); got.Code != domain.SeckillOK {
		t.Fatalf("user 3: %s", got.Code)
	}
	if st.soldTo(2) {
		t.Fatal("user 2 was told UNAVAILABLE, yet the grab was sold afterwards")
	}
}

// A caller whose grab is already in a script call when its own wait ends
// gets the script's answer, not an UNAVAILABLE that may hide an order.
func TestAGrabInFlightIsAnsweredWithItsOutcome(t *testing.T) {
	t.Parallel()
	// The store answers when the batch's deadline has passed. The batch
	// started after the caller began to wait, with the same timeout, so
	// the caller's own wait has ended by then, and the answer comes well
	// within the bound on a batch in flight (2 × GrabTimeout more). The
	// activation must take the grab within that timeout: 1 s rather than
	// 200 ms, which a busy machine under -race could overrun.
	st := &recordingStore{untilDeadline: true}
	r := actors.NewRouter(st, &seqIDs{}, nil, quiet, actors.Options{GrabTimeout: time.Second, BatchTimeout: time.Second, CallTimeout: time.Second})
	t.Cleanup(r.Stop)
	if got := r.Grab(context.Background(), domain.GrabRequest{VoucherID: 1, UserID: 1}); got.Code != domain.SeckillOK || got.OrderID == 0 {
		t.Fatalf("the store sold the grab, the caller got %s", got.Code)
	}
}

// failingStore fails every batch (Redis stalled past the call's deadline),
// after its gate; it counts the batches that reached it.
type failingStore struct {
	gate
	calls atomic.Int32
}

func (*failingStore) Claim(context.Context, int64, int) (int64, domain.VoucherState, error) {
	return 1, liveState(), nil
}

func (*failingStore) Refence(context.Context, int64, int, int64) (int64, domain.VoucherState, bool, error) {
	return 2, liveState(), false, nil
}

func (*failingStore) State(context.Context, int64) (domain.VoucherState, error) {
	return liveState(), nil
}

func (s *failingStore) Grab(context.Context, int64, int, int64, []domain.Grab) (domain.BatchOutcome, error) {
	s.calls.Add(1)
	s.hold()
	return domain.BatchOutcome{}, errors.New("i/o timeout")
}

// A stall costs the grabs queued behind a failing batch that batch's
// deadline, not one more of their own: they never reached Redis, so they
// are answered UNAVAILABLE with it instead of forming the next batch
// against a Redis that just failed.
func TestGrabsQueuedBehindAFailedBatchAreAnsweredWithIt(t *testing.T) {
	t.Parallel()
	st := &failingStore{gate: gate{entered: make(chan struct{}, 1), release: make(chan struct{})}}
	// One attempt per batch, so that calls count batches.
	r := actors.NewRouter(st, &seqIDs{}, nil, quiet, actors.Options{Attempts: 1, GrabTimeout: 10 * time.Second})
	t.Cleanup(r.Stop)
	t.Cleanup(st.open) // runs before r.Close, even when the test fails
	res := []<-chan domain.GrabResult{grabAsync(r, context.Background(), 1, 1)}
	<-st.entered // user 1's batch is held in flight; users 2-6 queue behind it
	for u := int64(2); u <= 6; u++ {
		res = append(res, grabAsync(r, context.Background(), 1, u))
	}
	testenv.WaitFor(t, "users 2-6 wait behind the batch", func() bool { return actors.Queued(r, 1) == 6 })
	st.open()
	for u, ch := range res {
		if got := <-ch; got.Code != domain.SeckillUnavailable {
			t.Errorf("user %d: %s, want UNAVAILABLE", u+1, got.Code)
		}
	}
	if n := st.calls.Load(); n != 1 {
		t.Errorf("%d batches reached the failing store, want 1: the queued grabs went on to a batch of their own", n)
	}
}

// A reload that fails while a batch is in flight must not strand the
// grabs that queued behind the batch.
func TestAFailedReloadStillSendsTheWaitingGrabs(t *testing.T) {
	t.Parallel()
	st := &recordingStore{gate: gate{entered: make(chan struct{}, 1), release: make(chan struct{})}, failState: true}
	r := actors.NewRouter(st, &seqIDs{}, nil, quiet, actors.Options{GrabTimeout: 2 * time.Second})
	t.Cleanup(r.Stop)
	t.Cleanup(st.open) // runs before r.Close, even when the test fails
	first := grabAsync(r, context.Background(), 1, 1)
	<-st.entered // user 1's batch is held in flight
	r.Changed(1) // the reload waits for the batch, then fails
	second := grabAsync(r, context.Background(), 1, 2)
	testenv.WaitFor(t, "user 2 waits behind the batch", func() bool { return actors.Queued(r, 1) == 2 })
	st.open()
	for u, res := range []<-chan domain.GrabResult{first, second} {
		if got := <-res; got.Code != domain.SeckillOK {
			t.Fatalf("user %d: %s", u+1, got.Code)
		}
	}
}

// Close must not race with actors that retire (and leave the router's
// map) while it waits for them; -race checks it.
func TestCloseWhileActorsRetire(t *testing.T) {
	t.Parallel()
	const vouchers = 50
	st := &recordingStore{gate: gate{entered: make(chan struct{}, vouchers), release: make(chan struct{})}}
	st.stale.Store(true) // every activation finds itself superseded and retires
	r := actors.NewRouter(st, &seqIDs{}, nil, quiet, actors.Options{GrabTimeout: time.Second})
	t.Cleanup(st.open)
	var wg sync.WaitGroup
	for v := int64(1); v <= vouchers; v++ {
		wg.Go(func() { r.Grab(context.Background(), domain.GrabRequest{VoucherID: v, UserID: 1}) })
	}
	for range vouchers {
		<-st.entered // every voucher's first batch is held in flight
	}
	closed := make(chan struct{})
	go func() { r.Stop(); close(closed) }()
	testenv.WaitFor(t, "Close has begun", func() bool { return actors.Closing(r) })
	st.open() // the actors retire while Close waits for them
	<-closed
	wg.Wait()
}

// Grabs of many distinct ids cannot make a node run actors without bound.
func TestActorCapAnswersUnavailable(t *testing.T) {
	t.Parallel()
	r := actors.NewRouter(&recordingStore{}, &seqIDs{}, nil, quiet, actors.Options{MaxActors: 2})
	t.Cleanup(r.Stop)
	for v := int64(1); v <= 2; v++ {
		if got := r.Grab(context.Background(), domain.GrabRequest{VoucherID: v, UserID: 1}); got.Code != domain.SeckillOK {
			t.Fatalf("voucher %d: %s", v, got.Code)
		}
	}
	if got := r.Grab(context.Background(), domain.GrabRequest{VoucherID: 3, UserID: 1}); got.Code != domain.SeckillUnavailable {
		t.Fatalf("a third actor over the cap: %s", got.Code)
	}
	if got := r.Grab(context.Background(), domain.GrabRequest{VoucherID: 1, UserID: 2}); got.Code != domain.SeckillOK {
		t.Fatalf("a running actor still serves: %s", got.Code)
	}
}
