package actors

import (
	"context"
	"testing"
	"time"
)

// slowLease is a segment lease whose renewal takes 100 ms unless its
// context ends first.
type slowLease struct{ extendErr chan error }

func (l *slowLease) Extend(ctx context.Context) error {
	select {
	case <-time.After(100 * time.Millisecond):
		l.extendErr <- nil
		return nil
	case <-ctx.Done():
		l.extendErr <- ctx.Err()
		return ctx.Err()
	}
}
func (l *slowLease) Release(context.Context) {}
func (l *slowLease) TTL() time.Duration      { return 3 * time.Second }

// A renewal in flight when the activation stops (a lease.Keeper's Stop
// cancels the renewal's context) runs to its end: cut short, internal/
// node's segment lease takes the failure for a lease lost for want of
// Redis and skips its release, and the segment's next host waits out the
// TTL. The renewal's own deadline still bounds it.
func TestASegmentLeaseRenewalIsNotCutByTheActivationsStop(t *testing.T) {
	t.Parallel()
	l := &slowLease{extendErr: make(chan error, 2)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := (heldLease{l}).Renew(ctx); err != nil {
		t.Fatalf("a renewal whose caller stopped: %v, want it to finish", err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if err := (heldLease{l}).Renew(short); err == nil {
		t.Fatal("a renewal past its deadline succeeded: the deadline no longer bounds it")
	}
}
