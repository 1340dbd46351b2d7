package resilient

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate/floodgate/limiter"
)

// ErrNoAdjust reports a primary store that cannot read or adjust a bucket
// (it does not implement limiter.Adjuster).
var ErrNoAdjust = errors.New("resilient: the store cannot read or adjust buckets")

// Adjust implements limiter.Adjuster through the primary store, within the
// same deadline as a decision. It never falls back to the per-replica
// store: an operator's change must land in the shared bucket or fail, so
// with the store unreachable it fails with an error wrapping
// limiter.ErrUnavailable, within the deadline. It neither asks the
// breakers nor reports to them (an operator's call is no decision to
// degrade); while Redis is down it costs that deadline and says so.
//
// An adjustment that gives tokens (an Add, a Set, a Reset) makes the
// over-limit cache forget the bucket, as a refund decided here does, so
// this replica's next decision on it asks the store. Another replica's
// cache is not told: it may deny the caller until its own bound says the
// tokens are back, at most the bucket's time to refill.
func (s *Store) Adjust(ctx context.Context, req limiter.Request, a limiter.Adjustment) (limiter.Balance, error) {
	adj, ok := s.primary.(limiter.Adjuster)
	if !ok {
		return limiter.Balance{}, ErrNoAdjust
	}
	if err := limiter.CheckAdjust(req, a); err != nil {
		return limiter.Balance{}, err
	}
	sent := s.clock.Now()
	dctx, cancel := context.WithDeadline(ctx, s.deadline(ctx))
	defer cancel()
	b, err := adj.Adjust(dctx, req, a)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return limiter.Balance{}, ctx.Err()
		}
		return limiter.Balance{}, fmt.Errorf("%w: %w", limiter.ErrUnavailable, err)
	}
	if a.Op != limiter.OpRead && s.cache != nil {
		r := req
		r.Kind = limiter.Refund
		s.cache.learn([]limiter.Request{r}, []limiter.Result{{Allowed: true}}, sent, true, true)
	}
	return b, nil
}
