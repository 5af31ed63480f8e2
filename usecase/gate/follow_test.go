package gate

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"flashsale/domain"
)

// blockStore is the shared blocklist, changed by the test.
type blockStore struct {
	Store // only Blocks is called here
	mu    sync.Mutex
	all   []domain.Block
}

func (s *blockStore) Blocks(context.Context) ([]domain.Block, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]domain.Block(nil), s.all...), nil
}

func (s *blockStore) add(b domain.Block) {
	s.mu.Lock()
	s.all = append(s.all, b)
	s.mu.Unlock()
}

// feed is a subscription the test writes announcements into.
type feed chan domain.Announcement

func (f feed) Next(ctx context.Context) (domain.Announcement, error) {
	select {
	case <-ctx.Done():
		return domain.Announcement{}, ctx.Err()
	case an := <-f:
		return an, nil
	}
}

// A blocklist change announced by another node, and a re-read after
// announcements were missed, reach this node's blocklist at once (the
// refresh is an hour away here); follow ends with its context.
func TestFollowReloadsTheBlocklistOnAnnouncements(t *testing.T) {
	t.Parallel()
	store := &blockStore{}
	s := New(store, nil, slog.New(slog.DiscardHandler), Options{Key: []byte("k"), Refresh: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := make(feed)
	followed := make(chan error, 1)
	go func() { followed <- s.follow(ctx, f) }()

	for _, tc := range []struct {
		name string
		user int64
		an   domain.Announcement
	}{
		{"blocklist changed", 1, domain.Announcement{Kind: domain.BlocklistChanged}},
		{"announcements missed", 2, domain.Announcement{Kind: domain.Missed}},
	} {
		store.add(domain.Block{UserID: tc.user})
		f <- tc.an
		f <- domain.Announcement{Kind: domain.GateChanged} // applied once the one before is
		if !s.blocked(tc.user, "192.0.2.1", 7, time.Now()) {
			t.Fatalf("%s: user %d not blocked after the announcement", tc.name, tc.user)
		}
	}
	cancel()
	if err := <-followed; err != nil {
		t.Fatalf("follow ended with %v after its context ended, want nil", err)
	}
}
