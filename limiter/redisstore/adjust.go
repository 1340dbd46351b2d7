package redisstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
)

// adjustScript reads or adjusts one bucket for an operator (adjust.lua),
// beside the decision script and with the same state encoding.
var (
	//go:embed adjust.lua
	adjustBody   string
	adjustScript = newScript(bucketSource + adjustBody)
)

// Adjust implements limiter.Adjuster: one script call on the bucket's key,
// atomic with the decisions on it. A lease's tokens (limiter/lease) left
// the bucket when the lease was taken: a Read does not count them, and a
// Set or a Reset leaves the leases as they are, so the tokens a replica's
// lease did not spend still come back when it ends (capped at capacity, as
// every refund).
func (s *Store) Adjust(ctx context.Context, req limiter.Request, a limiter.Adjustment) (limiter.Balance, error) {
	if err := limiter.CheckAdjust(req, a); err != nil {
		return limiter.Balance{}, err
	}
	l := limitArgsOf(req.Limit)
	n := a.N
	if a.Op == limiter.OpAdd {
		// Beyond two capacities an add changes nothing more (full, or the
		// debt's bound), and n·K stays exact in the script's doubles.
		n = max(min(n, 2*l.c), -2*l.c)
	}
	sc := &scriptCall{keys: []string{s.Key(req.Name, req.ID)}, args: []any{l.c, l.k, l.g, int64(l.j), int64(a.Op), n}}
	// Sent apart from exec: the decision scripts' metrics do not count it,
	// and like them it is sent once (an add sent twice would add twice).
	cmd := sc.cmd(ctx, "evalsha", adjustScript.sha, nil)
	_ = s.client.Process(ctx, sendOnce{cmd})
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = sc.cmd(ctx, "eval", adjustScript.src, nil)
		_ = s.client.Process(ctx, sendOnce{cmd})
	}
	reply, err := cmd.Result()
	if err == nil && len(reply) != 1 {
		err = fmt.Errorf("script returned %d values, 1 expected", len(reply))
	}
	if err != nil {
		return limiter.Balance{}, fmt.Errorf("redis: adjustment script: %w", explain(err))
	}
	return req.Limit.Balance(reply[0]), nil
}
