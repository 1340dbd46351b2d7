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

// TestTheFallbackCountsQuotas: with the shared store down, the quota
// cases are the per-replica store's, through the resilience layer (on the
// whole limit), and the over-limit cache answers none of them.
func TestTheFallbackCountsQuotas(t *testing.T) {
	storetest.RunQuota(t, storetest.QuotaHarness{Start: func(t *testing.T, at time.Time) (limiter.Store, func(time.Time)) {
		clock := limiter.NewManualClock(at)
		rs, err := resilient.New(down{}, resilient.Options{Timeout: time.Second, Breaker: serveBreaker, Clock: clock, Fallback: storetest.Memory(clock), FallbackShare: whole, OverLimitEntries: 100})
		if err != nil {
			t.Fatal(err)
		}
		return rs, func(to time.Time) { clock.Advance(to.Sub(clock.Now())) }
	}})
}

// TestALocalShareOfAQuota: a local share of 1/2 counts half the quota's
// limit in the same window.
func TestALocalShareOfAQuota(t *testing.T) {
	start := time.Date(2028, time.June, 1, 10, 0, 0, 0, time.UTC)
	clock := limiter.NewManualClock(start)
	half, _ := resilient.NewShare(1, 2)
	rs, err := resilient.New(down{}, resilient.Options{Timeout: time.Second, Breaker: serveBreaker, Clock: clock, Fallback: storetest.Memory(clock), FallbackShare: half})
	if err != nil {
		t.Fatal(err)
	}
	q := &limiter.Quota{Limit: 10, Windows: dayWindows{}}
	req := []limiter.Request{{Name: "p", ID: "a", Limit: limiter.MustLimit(10, "1"), Cost: 5, Quota: q}}
	res := make([]limiter.Result, 1)
	if ok, err := rs.Take(context.Background(), req, res); !ok || err != nil || res[0].Limit != 5 || res[0].Remaining != 0 || !res[0].Degraded {
		t.Fatalf("5 of a local half of 10: %v %v %+v", ok, err, res[0])
	}
	if ok, _ := rs.Take(context.Background(), req, res); ok || res[0].RetryAfter != 14*time.Hour {
		t.Fatalf("past the local half: %v %+v, want denied until midnight", ok, res[0])
	}
}

// dayWindows is UTC days.
type dayWindows struct{}

func (dayWindows) Window(t time.Time) (time.Time, time.Time) {
	s := t.UTC().Truncate(24 * time.Hour)
	return s, s.Add(24 * time.Hour)
}
