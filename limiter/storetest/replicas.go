package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// Replica is one replica deciding through a shared store: base as it is
// (replica returns it) or wrapped (a lease store). Its Close, when it has
// one, ends it at the end of the run.
type Replica func(base limiter.Store, clock limiter.Clock, i int) limiter.Store

// RunReplicas holds the invariant of replicas sharing one bucket of the
// store take decides with (on the run's clock, as RunModel's): three
// replicas, asked 3 times a millisecond for a second (0.6 × the bucket's
// rate) then 12 times (2.4 ×), admit together never more than the
// capacity plus what refilled since the start, at every millisecond.
// Below the rate every request must pass. It returns what they admitted,
// for a caller comparing runs.
func RunReplicas(t *testing.T, take TakeAt, replica Replica) (admitted int64) {
	t.Helper()
	start := time.Unix(1_800_000_000, 0)
	clock := limiter.NewManualClock(start)
	base := &clocked{take: take, clock: clock, start: start}
	l := limiter.MustLimit(1000, "5000")
	var replicas []limiter.Store
	for i := range 3 {
		replicas = append(replicas, replica(base, clock, i))
	}
	const steps = 2000 // 1 ms each
	var under int64
	for step := 1; step <= steps; step++ {
		for _, r := range replicas {
			n := 1
			if step > steps/2 {
				n = 4
			}
			for range n {
				res := make([]limiter.Result, 1)
				ok, err := r.Take(context.Background(), []limiter.Request{{Name: "global", ID: "one", Limit: l, Cost: 1, Lease: true}}, res)
				if err != nil {
					t.Fatalf("step %d ms: %v", step, err)
				}
				if ok {
					admitted++
				}
			}
		}
		if allowed := l.Capacity + 5*int64(step-1); admitted > allowed {
			t.Fatalf("step %d ms: %d admitted, more than the bucket allowed (%d)", step, admitted, allowed)
		}
		if step == steps/2 {
			under = admitted
		}
		clock.Advance(time.Millisecond)
	}
	if under != 3*steps/2 {
		t.Errorf("asked for less than the rate, %d of %d admitted", under, 3*steps/2)
	}
	for _, r := range replicas {
		if c, ok := r.(interface{ Close() }); ok {
			c.Close()
		}
	}
	return admitted
}

// clocked is the store take decides with, on clock: calls one at a time,
// so that a replica's work on a goroutine of its own (a lease given back)
// decides at the clock's time too.
type clocked struct {
	mu    sync.Mutex
	take  TakeAt
	clock limiter.Clock
	start time.Time
}

func (c *clocked) Take(_ context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.take(c.clock.Now().Sub(c.start), reqs, res)
}
