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
