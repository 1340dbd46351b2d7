package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

func TestAdjustConformance(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	s := storetest.Memory(clock)
	storetest.RunAdjust(t, storetest.Harness{
		Store:   s,
		Advance: func(_ *testing.T, d time.Duration) { clock.Advance(d) },
		Exists:  func(_ *testing.T, name, id string) bool { return s.Has(name, id) },
		Reclaim: func(*testing.T) { s.Reclaim() },
	})
}

func TestAdjustSaysTheBalanceIsThisReplicasOnly(t *testing.T) {
	s := storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0)))
	b, err := s.Adjust(context.Background(), limiter.Request{Name: "p", ID: "a", Limit: limiter.MustLimit(3, "1")}, limiter.Adjustment{Op: limiter.OpRead})
	if err != nil || !b.Local || b.Remaining != 3 {
		t.Fatalf("got %+v, %v; want 3 left, marked Local", b, err)
	}
}

func TestAdjustedBucketRefillsOnTheStoresClock(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	s := storetest.Memory(clock)
	req := limiter.Request{Name: "p", ID: "a", Limit: limiter.MustLimit(10, "1")}
	b, err := s.Adjust(context.Background(), req, limiter.Adjustment{Op: limiter.OpSet, N: 2})
	if err != nil || b.Remaining != 2 || b.ResetAfter != 8*time.Second {
		t.Fatalf("set 2: %+v, %v; want 2 left, full in 8s", b, err)
	}
	clock.Advance(3 * time.Second)
	if b, _ := s.Adjust(context.Background(), req, limiter.Adjustment{}); b.Remaining != 5 || b.ResetAfter != 5*time.Second {
		t.Fatalf("3s later: %+v, want 5 left, full in 5s", b)
	}
}

// TestAdjustQuotaConformance runs the quota adjustments on an injected
// clock: the window is the one it reads.
func TestAdjustQuotaConformance(t *testing.T) {
	storetest.RunAdjustQuota(t, storetest.QuotaHarness{Start: func(t *testing.T, at time.Time) (limiter.Store, func(time.Time)) {
		clock := limiter.NewManualClock(at)
		return storetest.Memory(clock), func(to time.Time) { clock.Advance(to.Sub(clock.Now())) }
	}})
}
