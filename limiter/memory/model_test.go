package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestMatchesTheRationalModel compares thousands of random decisions, figure
// by figure, with the reference model's exact rational arithmetic.
func TestMatchesTheRationalModel(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		start := time.Unix(1_800_000_000, 0)
		clock := limiter.NewManualClock(start)
		s := storetest.Memory(clock)
		var last time.Duration
		storetest.RunModel(t, seed, 5000, func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
			clock.Advance(at - last)
			last = at
			return s.Take(context.Background(), reqs, res)
		})
	}
}

// TestEveryRatelimitLimitMatchesTheRationalModel runs a short random
// sequence (kinds, reloads among its buckets' limits, time steps from a
// microsecond to an hour) on every limit of the grid of envoyproxy/ratelimit
// limits, each figure compared with the model.
func TestEveryRatelimitLimitMatchesTheRationalModel(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	s := storetest.Memory(clock)
	var last time.Duration
	storetest.RunModelOn(t, 11, 30, storetest.GridLimits(1), true, func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
		clock.Advance(at - last)
		last = at
		return s.Take(context.Background(), reqs, res)
	})
}
