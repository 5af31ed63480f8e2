package redpackets_test

import (
	"strings"
	"testing"
	"time"

	"flashsale/usecase/redpackets"
)

// Forty creates of one user race through two services on two connection
// pools (two nodes) with a daily limit of 5 and room for many open red
// packets: exactly 5 pass, every other is RATE_LIMITED, and the database
// holds 5. Three rounds, a user each.
func TestConcurrentCreatesNeverPassTheDailyLimit(t *testing.T) {
	t.Parallel()
	const limit, racers = 5, 40
	nodes, g := twoNodes(t, redpackets.Config{MaxOpenPerUser: 1000, MaxPerUserPerDay: limit})
	for round := range 3 {
		creator := int64(200 + round)
		if created, limited := raceCreates(t, nodes, creator, racers); created != limit || limited != racers-limit {
			t.Fatalf("round %d: %d created, %d refused of %d racing creates, want %d and %d", round, created, limited, racers, limit, racers-limit)
		}
		if n := g.redPacketsOf(t, creator); n != limit {
			t.Fatalf("round %d: user %d has %d red packets in the database, want %d", round, creator, n, limit)
		}
	}
}

// Over the daily limit a create is told, in retryAfterMs, when the oldest
// of the day leaves it, and its message says so; with both bounds
// reached, the answer is the one that frees later.
func TestTheDailyLimitSaysWhenTheNextCreatePasses(t *testing.T) {
	t.Parallel()
	g := newQuotaRig(t)

	t.Run("the day alone", func(t *testing.T) {
		s := g.service(redpackets.Config{MaxOpenPerUser: 1000, MaxPerUserPerDay: 3})
		first := mustCreate(t, s, 7, 1, time.Hour)
		mustCreate(t, s, 7, 1, time.Hour)
		mustCreate(t, s, 7, 1, time.Hour)
		_, err := create(t.Context(), s, 7, 1, time.Hour)
		de := refused(t, err)
		for _, want := range []string{"you created 3 red packets in the last 24 hours", "the limit per user is 3 a day", first.CreatedAt.Add(24 * time.Hour).UTC().Format(time.RFC3339)} {
			if !strings.Contains(de.Message, want) {
				t.Errorf("message %q lacks %q", de.Message, want)
			}
		}
		if len(de.Message) > 200 {
			t.Errorf("message of %d bytes: %q", len(de.Message), de.Message)
		}
		if want := time.Until(first.CreatedAt.Add(24 * time.Hour)); de.RetryAfter > want+time.Second || de.RetryAfter < want-time.Minute {
			t.Errorf("retry after %s, want about %s (the first create's 24 hours)", de.RetryAfter, want)
		}
		if n := g.redPacketsOf(t, 7); n != 3 {
			t.Fatalf("user 7 has %d red packets, want 3", n)
		}
		mustCreate(t, s, 8, 1, time.Hour) // the day is per user
	})

	t.Run("both bounds, the day frees later", func(t *testing.T) {
		s := g.service(redpackets.Config{MaxOpenPerUser: 2, MaxPerUserPerDay: 2})
		mustCreate(t, s, 9, 1, time.Hour)
		mustCreate(t, s, 9, 1, time.Hour)
		_, err := create(t.Context(), s, 9, 1, time.Hour)
		if de := refused(t, err); !strings.Contains(de.Message, "a day") || de.RetryAfter < 23*time.Hour {
			t.Errorf("%q, retry after %s; want the day's answer, about 24h", de.Message, de.RetryAfter)
		}
	})

	t.Run("both bounds, the open ones free later", func(t *testing.T) {
		s := g.service(redpackets.Config{MaxOpenPerUser: 2, MaxPerUserPerDay: 2})
		mustCreate(t, s, 10, 1, 48*time.Hour)
		mustCreate(t, s, 10, 1, 48*time.Hour)
		_, err := create(t.Context(), s, 10, 1, time.Hour)
		if de := refused(t, err); !strings.Contains(de.Message, "open red packets") || de.RetryAfter < 47*time.Hour {
			t.Errorf("%q, retry after %s; want the open ones' answer, about 48h", de.Message, de.RetryAfter)
		}
	})
}

// Unset, the daily limit is MaxPerUserPerDayDefault.
func TestTheDailyLimitIsOnByDefault(t *testing.T) {
	t.Parallel()
	g := newQuotaRig(t)
	s := g.service(redpackets.Config{MaxOpenPerUser: 1000})
	for range redpackets.MaxPerUserPerDayDefault {
		mustCreate(t, s, 7, 1, time.Hour)
	}
	_, err := create(t.Context(), s, 7, 1, time.Hour)
	refused(t, err)
}
