package resilient

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// counting passes decisions to a real store and counts them.
type counting struct {
	limiter.Store
	calls atomic.Int64
}

func (c *counting) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	c.calls.Add(1)
	return c.Store.Take(ctx, reqs, res)
}

// TestTheOverLimitCacheNeverDeniesWhatTheStoreWouldAllow runs one random
// sequence of decisions twice in lockstep on one clock: through the cache
// into a store, and straight into an identical store. Every decision must
// agree; where the cache answered, its figures may only be generous bounds.
// The decisions look (cost 0), charge into debt and refund besides taking,
// on limits counted in microseconds and in coarser steps.
func TestTheOverLimitCacheNeverDeniesWhatTheStoreWouldAllow(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	inner := &counting{Store: storetest.Memory(clock)}
	cached, err := New(inner, Options{Timeout: testTimeout, Breaker: testBreaker, Clock: clock, OverLimitEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	plain := storetest.Memory(clock)
	limits := []limiter.Limit{
		limiter.MustLimit(5, "2"), limiter.MustLimit(3, "1/3"), limiter.MustLimit(50, "100"), limiter.MustLimit(1, "0.5"),
		limiter.MustLimit(1<<32, "312751/3600"), // steps of 100 ms
		limiter.MustLimit(5, "5/2"),             // five per two seconds
	}
	if limits[4].Resolution() != 100*time.Millisecond {
		t.Fatalf("%v: step %v, want 100ms", limits[4], limits[4].Resolution())
	}
	rng := rand.New(rand.NewPCG(3, 4))
	decisions, denials, nonTakes := 0, 0, 0
	for step := 0; step < 20000; step++ {
		clock.Advance(time.Duration(rng.Int64N(300_000)) * time.Microsecond)
		n := 1 + rng.IntN(2)
		reqs := make([]limiter.Request, n)
		for i := range reqs {
			l := limits[rng.IntN(len(limits))]
			reqs[i] = limiter.Request{Name: "p" + strconv.Itoa(i), ID: "id" + strconv.Itoa(rng.IntN(3)), Limit: l, Cost: 1 + rng.Int64N(l.Capacity)}
			switch q := rng.IntN(20); {
			case q < 2:
				reqs[i].Kind, reqs[i].Cost = limiter.Charge, rng.Int64N(3*l.Capacity)
			case q < 3:
				reqs[i].Kind, reqs[i].Cost = limiter.Refund, rng.Int64N(2*l.Capacity)
			case q < 5:
				reqs[i].Cost = 0
			}
			if reqs[i].Kind != limiter.Take {
				nonTakes++
			}
		}
		resA, resB := make([]limiter.Result, n), make([]limiter.Result, n)
		before := inner.calls.Load()
		a, err := cached.Take(context.Background(), reqs, resA)
		if err != nil {
			t.Fatal(err)
		}
		answeredByCache := inner.calls.Load() == before
		b, _ := plain.Take(context.Background(), reqs, resB)
		if a != b {
			t.Fatalf("step %d: through the cache %v, store alone %v (cache answered: %v)", step, a, b, answeredByCache)
		}
		decisions++
		if !a {
			denials++
		}
		if answeredByCache {
			for i := range resA {
				if resA[i].Remaining < resB[i].Remaining || resA[i].RetryAfter > resB[i].RetryAfter {
					t.Fatalf("step %d bucket %d: cache reported %+v, store %+v: not a generous bound", step, i, resA[i], resB[i])
				}
			}
		}
	}
	hits := decisions - int(inner.calls.Load())
	t.Logf("%d decisions (%d charges and refunds), %d denied, %d answered by the cache", decisions, nonTakes, denials, hits)
	if hits == 0 {
		t.Errorf("the cache answered none of %d denials", denials)
	}
	if n := cached.cache.len(); n > 100 {
		t.Errorf("cache holds %d entries, bound 100", n)
	}
}

func TestAFloodOnAnEmptyBucketNeverReachesTheStore(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	inner := &counting{Store: storetest.Memory(clock)}
	s, _ := New(inner, Options{Timeout: testTimeout, Breaker: testBreaker, Clock: clock, OverLimitEntries: 10})
	req := []limiter.Request{{Name: "p", ID: "flood", Limit: limiter.MustLimit(2, "1"), Cost: 1}}
	res := make([]limiter.Result, 1)
	for i := 0; i < 3; i++ { // two pass, the third is denied by the store: retry after 1s
		s.Take(context.Background(), req, res)
	}
	if inner.calls.Load() != 3 || res[0].RetryAfter != time.Second {
		t.Fatalf("setup: %d calls, %+v", inner.calls.Load(), res[0])
	}
	for i := 0; i < 1000; i++ {
		clock.Advance(999 * time.Microsecond) // 999ms in all: still short of a token
		if ok, err := s.Take(context.Background(), req, res); ok || err != nil {
			t.Fatalf("flood request %d: %v %v", i, ok, err)
		}
	}
	if n := inner.calls.Load(); n != 3 {
		t.Errorf("the flood reached the store %d times, want 0", n-3)
	}
	clock.Advance(time.Millisecond) // a token exists now: the store must be asked
	if ok, _ := s.Take(context.Background(), req, res); !ok || inner.calls.Load() != 4 {
		t.Errorf("after Retry-After: allowed %v, store calls %d", ok, inner.calls.Load())
	}
	// Shadow decisions bypass the cache.
	s.Take(context.Background(), req, res) // denied, cached
	before := inner.calls.Load()
	s.Uncached().Take(context.Background(), req, res)
	if inner.calls.Load() != before+1 {
		t.Error("an uncached decision was answered by the cache")
	}
}

// testTimeout and testBreaker are the store timeout and breaker floodgate
// serve runs with by default (internal/config's, which this package's own
// tests cannot import).
const testTimeout = 50 * time.Millisecond

var testBreaker = BreakerOptions{Failures: 5, OpenFor: 500 * time.Millisecond}

// TestTheCacheLearnsFromChargesAndForgetsOnRefunds: a charge or a refund
// always reaches the store; a charge that puts the bucket in debt teaches
// the cache that looks cannot pass; a refund makes it forget the bucket.
func TestTheCacheLearnsFromChargesAndForgetsOnRefunds(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	inner := &counting{Store: storetest.Memory(clock)}
	s, _ := New(inner, Options{Timeout: testTimeout, Breaker: testBreaker, Clock: clock, OverLimitEntries: 10})
	l := limiter.MustLimit(100, "100/60")
	look := []limiter.Request{{Name: "p", ID: "a", Limit: l, Cost: 0}}
	charge := []limiter.Request{{Name: "p", ID: "a", Limit: l, Cost: 150, Kind: limiter.Charge}}
	refund := []limiter.Request{{Name: "p", ID: "a", Limit: l, Cost: 300, Kind: limiter.Refund}}
	res := make([]limiter.Result, 1)
	calls := func() int64 { return inner.calls.Load() }
	if ok, _ := s.Take(context.Background(), look, res); !ok || calls() != 1 {
		t.Fatalf("the first look: %v, %d store calls", ok, calls())
	}
	for i := 0; i < 3; i++ { // every charge reaches the store, the cache knowing the bucket or not
		if ok, _ := s.Take(context.Background(), charge, res); !ok || res[0].Remaining != 0 || calls() != int64(2+i) {
			t.Fatalf("charge %d: %v %+v, %d store calls", i, ok, res[0], calls())
		}
	}
	for i := 0; i < 100; i++ { // 100 in debt: looks cannot pass for a minute
		clock.Advance(100 * time.Millisecond)
		if ok, _ := s.Take(context.Background(), look, res); ok || calls() != 4 {
			t.Fatalf("look %d after the charges: %v, %d store calls; want denied by the cache", i, ok, calls())
		}
	}
	if ok, _ := s.Take(context.Background(), refund, res); !ok || calls() != 5 || res[0].Remaining != 100 {
		t.Fatalf("the refund: %v %+v, %d store calls", ok, res[0], calls())
	}
	if ok, _ := s.Take(context.Background(), look, res); !ok || calls() != 6 {
		t.Errorf("a look after the refund: %v, %d store calls; want the store asked, and allowed", ok, calls())
	}
}

// TestALateAnswerDoesNotUndoARefund: the answer to a decision sent before a
// refund, arriving after it, describes the bucket before the tokens came
// back: the cache does not learn from it while the refund's guard lasts.
func TestALateAnswerDoesNotUndoARefund(t *testing.T) {
	c := newOverLimitCache(10, time.Second)
	l := limiter.MustLimit(2, "1/60")
	take := []limiter.Request{{Name: "p", ID: "a", Limit: l, Cost: 1}}
	empty := []limiter.Result{l.Result(l.CapacityUnits(), limiter.Take, 1, false)}
	t0 := time.Unix(1_800_000_000, 0)
	c.learn([]limiter.Request{{Name: "p", ID: "a", Limit: l, Cost: 2, Kind: limiter.Refund}}, []limiter.Result{{Allowed: true, Limit: 2, Remaining: 2}}, t0.Add(time.Millisecond), true, true)
	c.learn(take, empty, t0, false, true) // sent before the refund
	if c.deny(take, make([]limiter.Result, 1), t0.Add(2*time.Millisecond)) {
		t.Fatal("the cache denied from an answer sent before a refund")
	}
	c.learn(take, empty, t0.Add(3*time.Millisecond), false, true) // sent after it
	if !c.deny(take, make([]limiter.Result, 1), t0.Add(4*time.Millisecond)) {
		t.Fatal("the cache did not learn from an answer sent after the refund")
	}
	c.learn(take, empty, t0, false, true) // still within the guard: a late one is ignored again...
	if !c.deny(take, make([]limiter.Result, 1), t0.Add(5*time.Millisecond)) {
		t.Fatal("...and does not drop what was learned")
	}
}
