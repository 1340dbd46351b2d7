package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/lease"
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

// TestLeasedReplicasNeverAdmitMoreThanTheBucket is the conformance suite's
// invariant of leases (storetest.RunReplicas) on the in-memory store: three
// replicas leasing one bucket never admit more than it allows, and not
// less than 97% of what the same callers get without leases.
func TestLeasedReplicasNeverAdmitMoreThanTheBucket(t *testing.T) {
	run := func(replica storetest.Replica) int64 {
		start := time.Unix(1_800_000_000, 0)
		clock := limiter.NewManualClock(start)
		s := storetest.Memory(clock)
		var last time.Duration
		return storetest.RunReplicas(t, func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
			clock.Advance(at - last)
			last = at
			return s.Take(context.Background(), reqs, res)
		}, replica)
	}
	leased := run(func(base limiter.Store, clock limiter.Clock, _ int) limiter.Store {
		return lease.New(base, lease.Options{Clock: clock})
	})
	exact := run(func(base limiter.Store, _ limiter.Clock, _ int) limiter.Store { return base })
	t.Logf("%d admitted with leases, %d without", leased, exact)
	if leased < exact*97/100 {
		t.Errorf("%d admitted with leases, %d without", leased, exact)
	}
}
