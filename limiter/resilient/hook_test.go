package resilient_test

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// callCounter counts the commands a client sends.
type callCounter struct{ n *int }

func (callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { *c.n++; return next(ctx, cmd) }
}
func (c callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { *c.n += len(cmds); return next(ctx, cmds) }
}
