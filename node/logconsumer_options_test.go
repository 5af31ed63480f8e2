package node

import (
	"io"
	"testing"
	"time"

	"flashsale/actors/writer"
	"flashsale/config"
	"flashsale/config/owners"
	"flashsale/persistence"
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

// A writer holding an order of a Redis load that was lost retries it
// (a pause of at most MaxBackoff, then an attempt) before the reload
// stops holding the voucher's sales. The persistence actor and its
// handlers each declare the attempt's default; they must agree.
func TestWriterRetriesFitInAReloadHold(t *testing.T) {
	if writer.AttemptTimeoutDefault != persistence.AttemptTimeoutDefault {
		t.Errorf("attempt timeout: the writer's default %v, its handlers' %v", writer.AttemptTimeoutDefault, persistence.AttemptTimeoutDefault)
	}
	if retry := writer.MaxBackoffDefault + writer.AttemptTimeoutDefault; retry >= persistence.ReloadHoldDefault {
		t.Errorf("a writer's retry takes up to %v, not below a reload's hold of %v", retry, persistence.ReloadHoldDefault)
	}
}
