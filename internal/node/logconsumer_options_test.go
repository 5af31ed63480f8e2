package node

import (
	"testing"
	"time"

	"flashsale/internal/config"
)

// ORDER_LOG_LINGER=0 must reach the writers as "no wait", not as their
// zero value, which takes the 20 ms default.
func TestLogConsumerOptionsCarryTheLinger(t *testing.T) {
	for _, tc := range []struct {
		set, want time.Duration
	}{
		{0, -1},
		{20 * time.Millisecond, 20 * time.Millisecond},
		{time.Second, time.Second},
	} {
		cfg := config.Config{NodeID: "n1", OrderLogClaimIdle: 7 * time.Second, OrderLogLinger: tc.set}
		o := logConsumerOptions(cfg)
		if o.Linger != tc.want || o.Consumer != "n1" || o.ClaimIdle != 7*time.Second {
			t.Errorf("ORDER_LOG_LINGER=%v: options %+v, want linger %v, consumer n1, claim idle 7s", tc.set, o, tc.want)
		}
	}
}
