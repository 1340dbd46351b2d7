package resilient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/resilient"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// An operator's add is seen by this replica's next decision: the over-limit
// cache, which would deny it without asking Redis, forgets the bucket.
func TestAnAddReachesTheNextDecisionPastTheOverLimitCache(t *testing.T) {
	srv := redistest.Start(t)
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout, DialTimeout: 250 * time.Millisecond})
	defer rc.Close()
	clock := limiter.NewManualClock(time.Now())
	rs, _ := resilient.New(redisstore.New(rc, ""), resilient.Options{Timeout: storeTimeout, Breaker: serveBreaker, Clock: clock, OverLimitEntries: 10})
	req := limiter.Request{Name: "p", ID: "x", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}
	res := make([]limiter.Result, 1)
	for i := 0; i < 3; i++ {
		rs.Take(context.Background(), []limiter.Request{req}, res)
	}
	if res[0].Allowed {
		t.Fatal("setup: the third request of two was allowed")
	}
	b, err := rs.Adjust(context.Background(), req, limiter.Adjustment{Op: limiter.OpAdd, N: 1})
	if err != nil || b.Remaining != 1 {
		t.Fatalf("add 1: %+v, %v", b, err)
	}
	if ok, err := rs.Take(context.Background(), []limiter.Request{req}, res); !ok || err != nil {
		t.Fatalf("the request after the add: allowed %v, %v (%+v)", ok, err, res[0])
	}
}

// With Redis stopped, an adjustment fails within the store's deadline with
// ErrUnavailable, and never lands in the per-replica fallback.
func TestAnAdjustmentWithRedisDownFailsInTimeWithoutTheFallback(t *testing.T) {
	srv := redistest.Start(t)
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout, DialTimeout: 250 * time.Millisecond})
	defer rc.Close()
	fallback := storetest.Memory(nil)
	rs, err := resilient.New(redisstore.New(rc, ""), resilient.Options{Timeout: storeTimeout, Breaker: serveBreaker, Fallback: fallback, FallbackShare: whole})
	if err != nil {
		t.Fatal(err)
	}
	req := limiter.Request{Name: "p", ID: "x", Limit: limiter.MustLimit(2, "1/60")}
	if _, err := rs.Adjust(context.Background(), req, limiter.Adjustment{}); err != nil {
		t.Fatalf("healthy read: %v", err)
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	_, err = rs.Adjust(context.Background(), req, limiter.Adjustment{Op: limiter.OpSet, N: 0})
	if !errors.Is(err, limiter.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the adjustment took %v with a %v store timeout", d, storeTimeout)
	}
	if fallback.Has("p", "x") {
		t.Error("the adjustment landed in the per-replica fallback")
	}
}

// A quota's adjustment goes to Redis' window as a bucket's does, and with
// Redis stopped fails within the deadline, leaving the per-replica
// fallback's count of the quota as it was.
func TestAQuotaAdjustmentLandsInRedisOrFails(t *testing.T) {
	srv := redistest.Start(t)
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout, DialTimeout: 250 * time.Millisecond})
	defer rc.Close()
	fallback := storetest.Memory(nil)
	primary := redisstore.New(rc, "")
	rs, err := resilient.New(primary, resilient.Options{Timeout: storeTimeout, Breaker: serveBreaker, Fallback: fallback, FallbackShare: whole})
	if err != nil {
		t.Fatal(err)
	}
	cal, err := calendar.New(calendar.Day, time.UTC, 0)
	if err != nil {
		t.Fatal(err)
	}
	q := &limiter.Quota{Limit: 4, Windows: cal}
	req := limiter.Request{Name: "p", ID: "x", Limit: limiter.MustLimit(4, "1"), Quota: q}
	ctx := context.Background()
	if b, err := rs.Adjust(ctx, req, limiter.Adjustment{Op: limiter.OpAdd, N: 6}); err != nil || !b.Quota || b.Remaining != 10 || b.Local {
		t.Fatalf("add 6: %+v, %v", b, err)
	}
	if b, err := primary.Adjust(ctx, req, limiter.Adjustment{}); err != nil || b.Remaining != 10 {
		t.Fatalf("Redis' count after the add: %+v, %v", b, err)
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	if _, err := rs.Adjust(ctx, req, limiter.Adjustment{Op: limiter.OpSet, N: 0}); !errors.Is(err, limiter.ErrUnavailable) || time.Since(start) > time.Second {
		t.Fatalf("set 0 with Redis paused: %v after %v", err, time.Since(start))
	}
	if b, err := fallback.Adjust(ctx, req, limiter.Adjustment{}); err != nil || b.Remaining != 4 {
		t.Fatalf("the fallback's count: %+v, %v; want untouched", b, err)
	}
}

// TestAdjustQuotaConformanceThroughTheResilienceLayer: the quota
// adjustments pass through to the primary store (here the memory store, on
// an injected clock), with the over-limit cache on: a quota's denial is
// never cached, so an add reaches the next decision.
func TestAdjustQuotaConformanceThroughTheResilienceLayer(t *testing.T) {
	storetest.RunAdjustQuota(t, storetest.QuotaHarness{Start: func(t *testing.T, at time.Time) (limiter.Store, func(time.Time)) {
		clock := limiter.NewManualClock(at)
		rs, err := resilient.New(storetest.Memory(clock), resilient.Options{Timeout: time.Second, Breaker: serveBreaker, Clock: clock, OverLimitEntries: 100})
		if err != nil {
			t.Fatal(err)
		}
		return rs, func(to time.Time) { clock.Advance(to.Sub(clock.Now())) }
	}})
}
