package decide_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/memory"
)

// A front end plans a request's buckets and hands them to a Decider: the
// enforced ones pay together or not at all, a shadow one decides beside
// them and never denies.
func ExampleDecider_Decide() {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	d := decide.Decider{Store: memory.New(memory.Options{Clock: clock, MaxBuckets: 1024, Shards: 1})}
	plan := []decide.Bucket{
		{Request: limiter.Request{Name: "per-key", ID: "key-1", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}},
		{Request: limiter.Request{Name: "trial", ID: "key-1", Limit: limiter.MustLimit(1, "1/60"), Cost: 1}, Shadow: true},
	}
	res := make([]limiter.Result, len(plan))
	for i := 1; i <= 3; i++ {
		dec := d.Decide(context.Background(), plan, res)
		fmt.Printf("#%d allowed %v (shadow would allow %v), per-key %d left\n", i, dec.Allowed, dec.ShadowAllowed, res[0].Remaining)
	}
	// Output:
	// #1 allowed true (shadow would allow true), per-key 1 left
	// #2 allowed true (shadow would allow false), per-key 0 left
	// #3 allowed false (shadow would allow false), per-key 0 left
}
