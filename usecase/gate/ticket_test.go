package gate

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"flashsale/domain"
)

var testKey = KeyFrom("test-secret")

func TestTicketVerify(t *testing.T) {
	t.Parallel()
	tickets := NewTickets(testKey)
	now := time.Now()
	const user, voucher = 42, 7
	valid := tickets.Issue(user, voucher, now.Add(time.Minute))
	tampered := []byte(valid)
	tampered[5] ^= 1 // a bit of the user id: base64url keeps it a valid character
	if tampered[5] == '-' || tampered[5] == '_' || strings.ContainsRune("+/=", rune(tampered[5])) {
		t.Fatalf("tampering made an odd character %q", tampered[5])
	}
	// The last character's two low bits are past the 41 bytes: a lenient
	// decoder ignores them.
	spare := []byte(valid)
	spare[len(spare)-1] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", spare[len(spare)-1])^1]
	cases := []struct {
		name   string
		ticket string
		user   int64
		vouch  int64
		want   error
	}{
		{name: "valid for its user and voucher", ticket: valid, user: user, vouch: voucher},
		{name: "missing", ticket: "", user: user, vouch: voucher, want: domain.ErrTicketInvalid},
		{name: "another user's", ticket: valid, user: user + 1, vouch: voucher, want: domain.ErrTicketInvalid},
		{name: "for another voucher", ticket: valid, user: user, vouch: voucher + 1, want: domain.ErrTicketInvalid},
		{name: "expired", ticket: tickets.Issue(user, voucher, now.Add(-time.Millisecond)), user: user, vouch: voucher, want: domain.ErrTicketExpired},
		{name: "signed with another key", ticket: NewTickets(KeyFrom("other")).Issue(user, voucher, now.Add(time.Minute)), user: user, vouch: voucher, want: domain.ErrTicketInvalid},
		{name: "tampered", ticket: string(tampered), user: user, vouch: voucher, want: domain.ErrTicketInvalid},
		{name: "tampered in the unused bits", ticket: string(spare), user: user, vouch: voucher, want: domain.ErrTicketInvalid},
		{name: "garbage of the right length", ticket: strings.Repeat("A", TicketLen), user: user, vouch: voucher, want: domain.ErrTicketInvalid},
		{name: "not base64", ticket: strings.Repeat("*", TicketLen), user: user, vouch: voucher, want: domain.ErrTicketInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tickets.Verify(tc.ticket, tc.user, tc.vouch, now); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// A ticket check may cost 2 µs of CPU, a small share of a grab; the
// benchmark below measures it (about 0.3 µs here), as performance targets
// are measured, never timed in a unit test. What this test holds is the
// shape of that cost: two small allocations, no map, cache or store.
func TestTicketVerifyAllocatesTwice(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop its keyed hashes at random")
	}
	tickets := NewTickets(testKey)
	now := time.Now()
	ticket := tickets.Issue(42, 7, now.Add(time.Minute))
	allocs := testing.AllocsPerRun(100, func() {
		if err := tickets.Verify(ticket, 42, 7, now); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("a ticket check allocates %.0f times, want at most 2", allocs)
	}
}

func BenchmarkTicketVerify(b *testing.B) {
	tickets := NewTickets(testKey)
	now := time.Now()
	ticket := tickets.Issue(42, 7, now.Add(time.Minute))
	b.ReportAllocs()
	for b.Loop() {
		if err := tickets.Verify(ticket, 42, 7, now); err != nil {
			b.Fatal(err)
		}
	}
}

func TestChallenge(t *testing.T) {
	t.Parallel()
	c := NewChallenges(NewTickets(testKey))
	now := time.Now()
	const user, voucher, d = 42, 7, 12
	ch := c.Issue(user, voucher, d, now.Add(time.Minute))
	nonce, err := Solve(ch, -1)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Difficulty(ch); err != nil || got != d {
		t.Fatalf("difficulty %d, %v", got, err)
	}
	if _, digest, err := c.Verify(ch, nonce, user, voucher, now); err != nil || digest == "" {
		t.Fatalf("solved challenge refused: %v", err)
	}
	// Find a nonce that does not solve it (most do not).
	wrong := "x"
	for LeadingZeroBits(sha256.Sum256([]byte(ch+wrong))) >= d {
		wrong += "x"
	}
	forged := strings.Replace(ch, ".12.", ".0.", 1) // difficulty 0: any nonce passes the work, not the signature
	cases := []struct {
		name             string
		challenge, nonce string
		user, voucher    int64
		at               time.Time
	}{
		{name: "wrong nonce", challenge: ch, nonce: wrong, user: user, voucher: voucher, at: now},
		{name: "another user's challenge", challenge: ch, nonce: nonce, user: user + 1, voucher: voucher, at: now},
		{name: "another voucher's challenge", challenge: ch, nonce: nonce, user: user, voucher: voucher + 1, at: now},
		{name: "expired", challenge: ch, nonce: nonce, user: user, voucher: voucher, at: now.Add(time.Minute)},
		{name: "forged difficulty", challenge: forged, nonce: "1", user: user, voucher: voucher, at: now},
		{name: "empty nonce", challenge: ch, nonce: "", user: user, voucher: voucher, at: now},
		{name: "no challenge", challenge: "hello", nonce: nonce, user: user, voucher: voucher, at: now},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := c.Verify(tc.challenge, tc.nonce, tc.user, tc.voucher, tc.at); !errors.Is(err, domain.ErrChallengeWrong) {
				t.Fatalf("got %v, want ErrChallengeWrong", err)
			}
		})
	}
}

// A wrong nonce is refused after one SHA-256 (and no signature check):
// guessing costs the server what it costs the guesser.
func TestWrongNonceCostsOneHash(t *testing.T) {
	t.Parallel()
	tickets := NewTickets(testKey)
	c := NewChallenges(tickets)
	hashes := 0
	c.sum = func(b []byte) [sha256.Size]byte { hashes++; return sha256.Sum256(b) }
	macs := 0
	tickets.macs.New = func() any { macs++; return nil } // a MAC would panic on the nil hash
	now := time.Now()
	// Issued by another node with the same key; 24 bits: "0" solves it
	// once in 16 million.
	ch := NewChallenges(NewTickets(testKey)).Issue(1, 2, 24, now.Add(time.Minute))
	if _, _, err := c.Verify(ch, "0", 1, 2, now); !errors.Is(err, domain.ErrChallengeWrong) {
		t.Fatalf("got %v", err)
	}
	if hashes != 1 || macs != 0 {
		t.Fatalf("a wrong nonce cost %d hashes and %d MACs, want 1 and 0", hashes, macs)
	}
}
