package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

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
	if req.Quota != nil {
		return s.adjustQuota(ctx, req, a)
	}
	l := limitArgsOf(req.Limit)
	n := a.N
	if a.Op == limiter.OpAdd {
		// Beyond two capacities an add changes nothing more (full, or the
		// debt's bound), and n·K stays exact in the script's doubles.
		n = max(min(n, 2*l.c), -2*l.c)
	}
	reply, err := s.adjustCall(ctx, []string{s.Key(req.Name, req.ID)}, []any{l.c, l.k, l.g, int64(l.j), int64(a.Op), n}, 1)
	if err != nil {
		return limiter.Balance{}, err
	}
	return req.Limit.Balance(reply[0]), nil
}

// adjustCall runs the adjustment script once and checks its reply has
// want values.
func (s *Store) adjustCall(ctx context.Context, keys []string, args []any, want int) ([]int64, error) {
	sc := &scriptCall{keys: keys, args: args}
	// Sent apart from exec: the decision scripts' metrics do not count it,
	// and like them it is sent once (an add sent twice would add twice).
	cmd := sc.cmd(ctx, "evalsha", adjustScript.sha, nil)
	_ = s.client.Process(ctx, sendOnce{cmd})
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = sc.cmd(ctx, "eval", adjustScript.src, nil)
		_ = s.client.Process(ctx, sendOnce{cmd})
	}
	reply, err := cmd.Result()
	if err == nil && len(reply) != want {
		err = fmt.Errorf("script returned %d values, %d expected", len(reply), want)
	}
	if err != nil {
		if strings.Contains(err.Error(), quotaClockMark) {
			return nil, fmt.Errorf("%w (%v)", ErrQuotaClock, err)
		}
		return nil, fmt.Errorf("redis: adjustment script: %w", explain(err))
	}
	return reply, nil
}

// adjustQuota is Adjust on req's quota: the windows are cut around this
// replica's estimate of Redis' clock and TIME picks among them, as for a
// decision (prepareInto, quota_now in bucket.lua), the clock measured
// first if it never was and again when the script found the estimate off
// by more than a window (nothing was written then: the call is sent once
// more).
func (s *Store) adjustQuota(ctx context.Context, req limiter.Request, a limiter.Adjustment) (limiter.Balance, error) {
	if s.clockAt.Load() == 0 {
		if err := s.syncClock(ctx); err != nil {
			return limiter.Balance{}, err
		}
	}
	q := req.Quota
	n := a.N
	if a.Op == limiter.OpAdd {
		// Beyond these an add changes nothing more (from twice the limit to
		// the credit's bound, or back), and n stays exact in the script's
		// doubles.
		bound := limiter.MaxQuotaCredit + 2*q.Limit
		n = max(min(n, bound), -bound)
	}
	var reply []int64
	var w *quotaArgs
	err := ErrQuotaClock
	for try := 0; try < 2 && errors.Is(err, ErrQuotaClock); try++ {
		if try > 0 {
			if err := s.syncClock(ctx); err != nil {
				return limiter.Balance{}, err
			}
		}
		w = quotaArgsOf(q, s.redisNow())
		reply, err = s.adjustCall(ctx, []string{s.QuotaKey(req.Name, req.ID)},
			[]any{q.Limit, 1, 1, quotaRes, int64(a.Op), n, w.s0, w.s1, w.e1, w.e2, int64(limiter.MaxQuotaCredit)}, 3)
	}
	if err != nil {
		return limiter.Balance{}, err
	}
	start, end := w.window(reply[1])
	utc := func(us int64) time.Time { return time.UnixMicro(us).UTC() }
	return q.Balance(reply[0], utc(start), utc(end), utc(reply[2])), nil
}
