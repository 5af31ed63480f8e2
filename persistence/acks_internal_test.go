package persistence

import (
	"context"
	"errors"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

// Each acknowledgement a batch waited for is counted by its result, the
// series the dashboard and the alerts read (flashsale_redis_ack_waits_total):
// enough replicas, too few (also a refused WAITAOF), or a wait that failed;
// a call without acknowledgements counts nothing.
func TestAcknowledgementWaitsAreCountedByResult(t *testing.T) {
	ctx := context.Background()
	wait := func(n int64, err error) *pendingAck {
		c := redis.NewIntCmd(ctx, "wait", 1, 100)
		c.SetVal(n)
		c.SetErr(err)
		return &pendingAck{wait: c}
	}
	waitAOF := func(err error) *pendingAck {
		c := redis.NewIntSliceCmd(ctx, "waitaof", 1, 1, 100)
		c.SetErr(err)
		return &pendingAck{aof: c}
	}
	for _, tc := range []struct {
		name   string
		wait   *pendingAck
		result string // "" counts nothing
	}{
		{"enough replicas are acknowledged", wait(1, nil), "acknowledged"},
		{"too few replicas are short", wait(0, nil), "short"},
		{"a refused WAITAOF is short", waitAOF(replyError("ERR unknown command 'waitaof'")), "short"},
		{"a failed wait is failed", wait(0, errors.New("i/o timeout")), "failed"},
		{"no acknowledgement counts nothing", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ackWaitCounts(t)
			_ = ackedScript{wait: tc.wait, acks: Acks{Replicas: 1, AOF: &AOFAcks{}}}.check()
			after := ackWaitCounts(t)
			for _, result := range []string{"acknowledged", "short", "failed"} {
				want := 0.0
				if result == tc.result {
					want = 1
				}
				if got := after[result] - before[result]; got != want {
					t.Errorf("redis_ack_waits_total{result=%q} rose by %v, want %v", result, got, want)
				}
			}
		})
	}
}

func ackWaitCounts(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, result := range []string{"acknowledged", "short", "failed"} {
		var m dto.Metric
		if err := ackWaits.WithLabelValues(result).Write(&m); err != nil {
			t.Fatal(err)
		}
		out[result] = m.GetCounter().GetValue()
	}
	return out
}

// replyError is an error reply of the server, as go-redis's own.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it as the server's answer (redis.Error).
func (replyError) RedisError() {}
