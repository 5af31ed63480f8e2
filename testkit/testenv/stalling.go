package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StallingClient is a Redis client whose connections go through a Proxy
// the test can stall: requests still run in Redis, their replies are held
// and, once a call times out, lost. Timeouts are short (200 ms) and
// go-redis does not retry, so a lost reply is an error at once.
type StallingClient struct {
	*redis.Client
	Proxy  *Proxy
	failed chan struct{}
}

// MustStallingClient returns a stalling client of the Redis at addr,
// closed when the test ends.
func MustStallingClient(tb testing.TB, addr string) *StallingClient {
	tb.Helper()
	c := &StallingClient{Proxy: MustProxy(tb, addr), failed: make(chan struct{}, 64)}
	const timeout = 200 * time.Millisecond
	c.Client = redis.NewClient(&redis.Options{Addr: c.Proxy.Addr(), MaxRetries: -1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout})
	c.AddHook(failures{c.failed})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// LostReply waits until a call of the client has failed on the way (a
// timeout, a closed connection), so that a reply the stalled proxy held is
// lost for good; it does not sleep for it.
func (c *StallingClient) LostReply(tb testing.TB) {
	tb.Helper()
	select {
	case <-c.failed:
	case <-time.After(10 * time.Second):
		tb.Fatal("no call through the stalled proxy failed")
	}
}

// failures is a go-redis hook that reports each command or pipeline that
// failed on the way, not Redis's own error replies (redis.Nil is one),
// without blocking: failures beyond the channel's buffer are dropped.
type failures struct{ c chan struct{} }

func (f failures) report(err error) {
	var reply redis.Error
	if err == nil || errors.As(err, &reply) {
		return
	}
	select {
	case f.c <- struct{}{}:
	default:
	}
}

func (f failures) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f failures) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		f.report(err)
		return err
	}
}

func (f failures) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		f.report(err)
		return err
	}
}

// CommandHook is a go-redis hook that shows fn every command a client
// sends, alone or in a pipeline, before it is sent.
type CommandHook func(cmd redis.Cmder)

// DialHook implements redis.Hook.
func (h CommandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h CommandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h CommandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h(c)
		}
		return next(ctx, cmds)
	}
}
