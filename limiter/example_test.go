package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
)

// "100 requests a minute, bursts of 20": a capacity of 20 tokens refilled
// at 100/60 a second, exactly (no float).
func ExampleNewLimit() {
	rate, err := limiter.ParseRate("100/60")
	if err != nil {
		panic(err)
	}
	l, err := limiter.NewLimit(20, rate)
	if err != nil {
		panic(err)
	}
	fmt.Println(l)
	fmt.Println("refilled exactly every", l.Resolution())
	// Output:
	// capacity 20, refill 5/3/s
	// refilled exactly every 1µs
}

// A monthly quota refills in coarser exact steps: a microsecond would not
// fit the integer arithmetic, ten do.
func ExampleLimit_Resolution() {
	rate, _ := limiter.NewRate(1001, 30*24*3600) // 1001 a month
	l, err := limiter.NewLimit(1001, rate)
	fmt.Println(l.Resolution(), err)
	// Output: 10µs <nil>
}

// A Store decides several buckets at once, all or nothing: a request that
// one bucket cannot pay takes nothing from the others. Time is the store's
// clock; here a manual one, so the example runs without sleeping.
func ExampleStore_Take() {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	store := memory.New(memory.Options{Clock: clock, MaxBuckets: 1024, Shards: 1})
	perKey := limiter.MustLimit(2, "1")  // 2 tokens, one a second
	perIP := limiter.MustLimit(10, "10") // 10 tokens, ten a second
	reqs := []limiter.Request{
		{Name: "per-key", ID: "key-1", Limit: perKey, Cost: 1},
		{Name: "per-ip", ID: "192.0.2.7", Limit: perIP, Cost: 1},
	}
	res := make([]limiter.Result, len(reqs))
	for i := 1; i <= 3; i++ {
		allowed, err := store.Take(context.Background(), reqs, res)
		fmt.Printf("#%d allowed %v: per-key %d left, per-ip %d left, retry after %v\n",
			i, allowed, res[0].Remaining, res[1].Remaining, limiter.RetryAfter(res))
		if err != nil {
			panic(err)
		}
	}
	clock.Advance(time.Second)
	allowed, _ := store.Take(context.Background(), reqs, res)
	fmt.Printf("a second later: allowed %v, per-key %d left\n", allowed, res[0].Remaining)
	// Output:
	// #1 allowed true: per-key 1 left, per-ip 9 left, retry after 0s
	// #2 allowed true: per-key 0 left, per-ip 8 left, retry after 0s
	// #3 allowed false: per-key 0 left, per-ip 8 left, retry after 1s
	// a second later: allowed true, per-key 0 left
}

// A cost charged after the response is taken whatever the bucket holds,
// into a debt of at most one capacity; until it is paid back, every
// request, a look that costs nothing included, is denied.
func ExampleKind() {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	store := memory.New(memory.Options{Clock: clock, MaxBuckets: 1024, Shards: 1})
	budget := limiter.MustLimit(100, "100/60") // 100 a minute
	ask := func(kind limiter.Kind, cost int64) {
		res := make([]limiter.Result, 1)
		allowed, _ := store.Take(context.Background(), []limiter.Request{{Name: "tokens", ID: "user-1", Limit: budget, Cost: cost, Kind: kind}}, res)
		fmt.Printf("%v %d: allowed %v, %d left, full in %v\n", kind, cost, allowed, res[0].Remaining, res[0].ResetAfter)
	}
	ask(limiter.Take, 0)     // a look before the request
	ask(limiter.Charge, 150) // the response cost 150
	ask(limiter.Take, 0)     // the next request's look
	clock.Advance(time.Minute)
	ask(limiter.Take, 0)
	// Output:
	// Take 0: allowed true, 100 left, full in 0s
	// Charge 150: allowed true, 0 left, full in 1m30s
	// Take 0: allowed false, 0 left, full in 1m30s
	// Take 0: allowed true, 50 left, full in 30s
}
