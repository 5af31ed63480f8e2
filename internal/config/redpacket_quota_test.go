package config

import (
	"strings"
	"testing"
)

// The red packets' quota is 10 unless set, by variable or flag, to a whole
// number of at least 1 (0 would refuse every create; an operator who wants
// no quota sets a large number).
func TestRedPacketQuotaIsSettable(t *testing.T) {
	if c, err := load(nil); err != nil || c.RedPacketMaxOpenPerUser != 10 {
		t.Fatalf("default: %d (%v), want 10", c.RedPacketMaxOpenPerUser, err)
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
