package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
)

// floodRun is one policy's hot callers deciding alongside a flood of
// distinct one-request callers on another policy, on an injected clock.
type floodRun struct {
	hot, flood         limiter.Limit
	hotCallers         int
	floodPerStep       int
	steps              int
	step               time.Duration
	hotName, floodName string
}

// admitted runs r against a store made with o and returns how many of the
// hot callers' requests it admitted, and how many buckets it held at most.
func (r floodRun) admitted(t *testing.T, o memory.Options) (admitted, peak int) {
	t.Helper()
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	o.Clock = clock
	s := memory.New(o)
	ctx := context.Background()
	res := make([]limiter.Result, 1)
	next := 0
	for step := 0; step < r.steps; step++ {
		for c := 0; c < r.hotCallers; c++ {
			ok, err := s.Take(ctx, []limiter.Request{{Name: r.hotName, ID: "hot-" + strconv.Itoa(c), Limit: r.hot, Cost: 1}}, res)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				admitted++
			}
		}
		for i := 0; i < r.floodPerStep; i++ {
			next++
			if _, err := s.Take(ctx, []limiter.Request{{Name: r.floodName, ID: "flood-" + strconv.Itoa(next), Limit: r.flood, Cost: 1}}, res); err != nil {
				t.Fatal(err)
			}
		}
		peak = max(peak, s.Len())
		clock.Advance(r.step)
	}
	return admitted, peak
}

// TestAFloodOnOnePolicyDoesNotResetAnothersBuckets: 60,000 distinct
// one-request callers on a cheap policy (capacity 100, refilled over a day,
// so each of their buckets stays short of full for 864 s) arrive while 20
// callers hammer a strict policy (capacity 10, 0.5 per second) for 20 s, in
// a store that holds 256 buckets. The strict callers must be admitted
// exactly as often as by a store that forgets nothing: the flood pays for
// its own room.
func TestAFloodOnOnePolicyDoesNotResetAnothersBuckets(t *testing.T) {
	run := floodRun{
		hot: limiter.MustLimit(10, "0.5"), flood: limiter.MustLimit(100, "100/86400"),
		hotCallers: 20, floodPerStep: 150, steps: 401, step: 50 * time.Millisecond, // decisions at 0, 50ms, ..., 20s
		hotName: "strict", floodName: "cheap",
	}
	const maxBuckets = 256
	want, _ := run.admitted(t, memory.Options{MaxBuckets: 1 << 20, Shards: 256})
	got, peak := run.admitted(t, memory.Options{MaxBuckets: maxBuckets, Shards: 4})
	if peak > maxBuckets {
		t.Errorf("the store held %d buckets, above its %d", peak, maxBuckets)
	}
	if want != 20*(10+10) {
		t.Fatalf("a store that forgets nothing admitted the strict callers %d times, want 20×(10 + 0.5×20)", want)
	}
	if got != want {
		t.Errorf("under a flood of %d callers on another policy, the strict callers were admitted %d times in 20 s, want %d (capacity 10 + 0.5/s each): the flood reset their buckets",
			run.steps*run.floodPerStep, got, want)
	}
}
