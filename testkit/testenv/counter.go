package testenv

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook that counts what a client sends: Commands
// counts every command (each one inside a pipeline too), RoundTrips counts
// a pipeline once. Tests use it to prove how many Redis calls a path costs.
type Counter struct {
	Commands, RoundTrips atomic.Int64
}

var _ redis.Hook = (*Counter)(nil)

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.Commands.Add(1)
		c.RoundTrips.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.Commands.Add(int64(len(cmds)))
		c.RoundTrips.Add(1)
		return next(ctx, cmds)
	}
}
