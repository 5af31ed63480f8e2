package config

import (
	"strings"
	"testing"
	"time"
)

// The red packets' quota is redpackets' default unless set, by variable or
// flag, to a whole number of at least 1 (0 would refuse every create; an
// operator who wants no quota sets a large number).
func TestRedPacketQuotaIsSettable(t *testing.T) {
	if c, err := load(nil); err != nil || c.RedPacketMaxOpenPerUser != 0 {
		t.Fatalf("unset: %d (%v), want 0, redpackets' default", c.RedPacketMaxOpenPerUser, err)
	}
	if c, err := load(map[string]string{"RED_PACKET_MAX_OPEN_PER_USER": "3"}); err != nil || c.RedPacketMaxOpenPerUser != 3 {
		t.Fatalf("variable: %d (%v), want 3", c.RedPacketMaxOpenPerUser, err)
	}
	if c, err := load(map[string]string{"RED_PACKET_MAX_OPEN_PER_USER": "3"}, "--red-packet-max-open-per-user=50"); err != nil || c.RedPacketMaxOpenPerUser != 50 {
		t.Fatalf("flag: %d (%v), want 50", c.RedPacketMaxOpenPerUser, err)
	}
	for _, bad := range []string{"0", "-1", "ten"} {
		_, err := load(map[string]string{"RED_PACKET_MAX_OPEN_PER_USER": bad})
		if err == nil || !strings.Contains(err.Error(), "RED_PACKET_MAX_OPEN_PER_USER") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
}

// The daily bound of red packets per user is redpackets' default unless
// set to a whole number of at least 1.
func TestRedPacketDailyLimitIsSettable(t *testing.T) {
	if c, err := load(nil); err != nil || c.RedPacketMaxPerUserPerDay != 0 {
		t.Fatalf("unset: %d (%v), want 0, redpackets' default", c.RedPacketMaxPerUserPerDay, err)
	}
	if c, err := load(map[string]string{"RED_PACKET_MAX_PER_USER_PER_DAY": "7"}); err != nil || c.RedPacketMaxPerUserPerDay != 7 {
		t.Fatalf("variable: %d (%v), want 7", c.RedPacketMaxPerUserPerDay, err)
	}
	for _, bad := range []string{"0", "-1", "many"} {
		_, err := load(map[string]string{"RED_PACKET_MAX_PER_USER_PER_DAY": bad})
		if err == nil || !strings.Contains(err.Error(), "RED_PACKET_MAX_PER_USER_PER_DAY") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
}

// Settled red packets are kept as long as redpackets' default unless set
// otherwise, and never less than the daily limit's 24 hours.
func TestRedPacketRetentionIsADayOrMore(t *testing.T) {
	if c, err := load(nil); err != nil || c.RedPacketRetention != 0 {
		t.Fatalf("unset: %s (%v), want 0, redpackets' default", c.RedPacketRetention, err)
	}
	if c, err := load(map[string]string{"RED_PACKET_RETENTION": "24h"}); err != nil || c.RedPacketRetention != 24*time.Hour {
		t.Fatalf("variable: %s (%v), want 24h", c.RedPacketRetention, err)
	}
	for _, bad := range []string{"23h59m", "0s", "-1h", "a month"} {
		_, err := load(map[string]string{"RED_PACKET_RETENTION": bad})
		if err == nil || !strings.Contains(err.Error(), "RED_PACKET_RETENTION") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
}
