package node

import (
	"io"
	"testing"
	"time"

	"flashsale/internal/config"
	"flashsale/internal/config/owners"
)

// ORDER_LOG_LINGER=0 must reach the writers as "no wait" (a negative
// linger), and an unset one as their zero value, which takes the 20 ms
// default.
func TestLogConsumerOptionsCarryTheLinger(t *testing.T) {
	for _, tc := range []struct {
		set  string
		want time.Duration
	}{
		{"0", -1},
		{"", 0},
		{"20ms", 20 * time.Millisecond},
		{"1s", time.Second},
	} {
		env := map[string]string{"NODE_ID": "n1", "ORDER_LOG_CLAIM_IDLE": "7s", "ORDER_LOG_LINGER": tc.set}
		cfg, err := config.Load(nil, func(k string) string { return env[k] }, io.Discard, owners.Table())
		if err != nil {
			t.Fatal(err)
		}
		o := logConsumerOptions(cfg)
		if o.Linger != tc.want || o.Consumer != "n1" || o.ClaimIdle != 7*time.Second {
			t.Errorf("ORDER_LOG_LINGER=%q: options %+v, want linger %v, consumer n1, claim idle 7s", tc.set, o, tc.want)
		}
	}
}
