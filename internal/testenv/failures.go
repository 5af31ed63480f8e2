package testenv

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Failures is a go-redis hook that reports every command that failed on
// the way (timeouts, closed connections; not Redis's own error replies), so
// a test can wait for "the call timed out" (a reply held by a stalled
// Proxy is lost only then) instead of sleeping for it.
type Failures struct {
	// C receives one value per failed command or pipeline, without
	// blocking: failures beyond its buffer are not reported.
	C chan error
}

// NewFailures returns a hook whose channel buffers n failures.
func NewFailures(n int) *Failures { return &Failures{C: make(chan error, n)} }

var _ redis.Hook = (*Failures)(nil)

func (f *Failures) report(err error) {
	var reply redis.Error
	if err == nil || errors.As(err, &reply) {
		return // redis.Nil is a reply too
	}
	select {
	case f.C <- err:
	default:
	}
}

// DialHook implements redis.Hook.
func (f *Failures) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (f *Failures) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		f.report(err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (f *Failures) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		f.report(err)
		return err
	}
}
