package resilient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/resilient"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// down is a primary store that never decides.
type down struct{}

func (down) Take(context.Context, []limiter.Request, []limiter.Result) (bool, error) {
	return false, errors.New("connection refused")
}

// TestTheFallbackPassesTheConformanceSuite: with the shared store down and
// on_failure: local (the whole limit), every decision of the suite, looks,
// charges into debt and refunds included, is the per-replica store's, made
// through the resilience layer (its cost clamps, its Degraded mark).
func TestTheFallbackPassesTheConformanceSuite(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	local := storetest.Memory(clock)
	rs, err := resilient.New(down{}, resilient.Options{Timeout: time.Second, Breaker: serveBreaker, Clock: clock, Fallback: local, FallbackShare: whole, OverLimitEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, storetest.Harness{
		Store:   rs,
		Advance: func(_ *testing.T, d time.Duration) { clock.Advance(d) },
		Exists:  func(_ *testing.T, name, id string) bool { return local.Has(name, id) },
		Reclaim: func(*testing.T) { local.Reclaim() },
	})
}

// TestALocalShareTakesChargesWhole: with a local share of 1/2, a charge
// keeps its cost (what this replica's request cost) and the local bucket
// of half the capacity bounds the debt at its own capacity; a look is then
// denied until the debt is repaid at the local rate.
func TestALocalShareTakesChargesWhole(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	half, _ := resilient.NewShare(1, 2)
	rs, err := resilient.New(down{}, resilient.Options{Timeout: time.Second, Breaker: serveBreaker, Clock: clock, Fallback: storetest.Memory(clock), FallbackShare: half})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.MustLimit(100, "100/60") // locally 50, at 50 a minute
	res := make([]limiter.Result, 1)
	if ok, err := rs.Take(context.Background(), []limiter.Request{{Name: "p", ID: "a", Limit: l, Cost: 30, Kind: limiter.Charge}}, res); !ok || err != nil || !res[0].Degraded || res[0].Remaining != 20 {
		t.Fatalf("a charge of 30: %v %v %+v, want 20 of the local 50 left", ok, err, res[0])
	}
	if ok, _ := rs.Take(context.Background(), []limiter.Request{{Name: "p", ID: "a", Limit: l, Cost: 1000, Kind: limiter.Charge}}, res); !ok || res[0].ResetAfter != 2*time.Minute {
		t.Fatalf("a charge of 1000: %v %+v, want the local debt bound (50), full in 2 minutes", ok, res[0])
	}
	look := []limiter.Request{{Name: "p", ID: "a", Limit: l}}
	if ok, _ := rs.Take(context.Background(), look, res); ok || res[0].RetryAfter != 61200*time.Millisecond {
		t.Fatalf("a look in debt: %v %+v, want denied, a token in 61.2 s", ok, res[0])
	}
	clock.Advance(61200 * time.Millisecond)
	if ok, _ := rs.Take(context.Background(), look, res); !ok || !res[0].Degraded {
		t.Errorf("a look once repaid: %v %+v", ok, res[0])
	}
}
