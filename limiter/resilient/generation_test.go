package resilient_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/resilient"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// gatedStore is a real in-memory store behind a gate the test controls:
// each call takes its instruction from the channel the test hands it, so a
// call can be held inside the store while others come and go.
type gatedStore struct {
	mem   *memory.Store
	calls atomic.Int32
	next  chan gate
}

// gate tells one call what to do: wait for release (or the caller's
// context), then decide in memory or fail.
type gate struct {
	release <-chan struct{}
	fail    bool
	entered chan<- struct{}
}

var errStoreDown = errors.New("store down")

func (g *gatedStore) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	g.calls.Add(1)
	c := <-g.next
	if c.entered != nil {
		close(c.entered)
	}
	if c.release != nil {
		select {
		case <-c.release:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if c.fail {
		return false, errStoreDown
	}
	return g.mem.Take(ctx, reqs, res)
}

func newGated(t *testing.T, clock limiter.Clock) (*gatedStore, *resilient.Store) {
	t.Helper()
	g := &gatedStore{mem: storetest.Memory(nil), next: make(chan gate, 16)}
	rs, err := resilient.New(g, resilient.Options{
		Timeout: time.Minute, Clock: clock, Breaker: resilient.BreakerOptions{Failures: 3, OpenFor: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, rs
}

func take(ctx context.Context, rs *resilient.Store) error {
	res := make([]limiter.Result, 1)
	_, err := rs.Take(ctx, []limiter.Request{{Name: "b", ID: "x", Limit: limiter.MustLimit(1000, "1"), Cost: 1}}, res)
	return err
}

// TestALateSuccessDoesNotCloseAnOpenBreaker: a call admitted while the
// breaker was closed succeeds after later calls opened it. Its success is
// about the store as it was; the breaker stays open until its own probe.
func TestALateSuccessDoesNotCloseAnOpenBreaker(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	g, rs := newGated(t, clock)
	release, entered := make(chan struct{}), make(chan struct{})
	g.next <- gate{release: release, entered: entered}
	slow := make(chan error, 1)
	go func() { slow <- take(context.Background(), rs) }()
	<-entered // admitted, closed, inside the store
	for i := 0; i < 3; i++ {
		g.next <- gate{fail: true}
		if err := take(context.Background(), rs); err == nil {
			t.Fatal("a failing store decided")
		}
	}
	if st := rs.Breaker().State(); st != resilient.Open {
		t.Fatalf("after 3 failures the breaker is %v", st)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("the slow call: %v", err)
	}
	if st := rs.Breaker().State(); st != resilient.Open || rs.Exact() {
		t.Errorf("a success admitted before the breaker opened moved it to %v, want open until its probe", st)
	}
	n := g.calls.Load()
	g.next <- gate{} // would decide, if it were let through
	if err := take(context.Background(), rs); err == nil || g.calls.Load() != n {
		t.Errorf("the open breaker let a call through (%v)", err)
	}
}

// TestACancelledCallerDoesNotFreeTheProbeSlot: a caller admitted while the
// breaker was closed gives up while a probe is out. Its Release must not
// let a second probe through.
func TestACancelledCallerDoesNotFreeTheProbeSlot(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	g, rs := newGated(t, clock)
	ctx, cancel := context.WithCancel(context.Background())
	never, entered := make(chan struct{}), make(chan struct{})
	defer close(never)
	g.next <- gate{release: never, entered: entered}
	gone := make(chan error, 1)
	go func() { gone <- take(ctx, rs) }()
	<-entered
	for i := 0; i < 3; i++ {
		g.next <- gate{fail: true}
		take(context.Background(), rs)
	}
	clock.Advance(time.Second)
	probeIn := make(chan struct{})
	g.next <- gate{release: never, entered: probeIn}
	probe := make(chan error, 1)
	pctx, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	go func() { probe <- take(pctx, rs) }()
	<-probeIn // the probe is out
	if st := rs.Breaker().State(); st != resilient.HalfOpen {
		t.Fatalf("with the probe out the breaker is %v", st)
	}
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled caller: %v", err)
	}
	n := g.calls.Load()
	g.next <- gate{} // would decide, if it were let through
	take(context.Background(), rs)
	if c := g.calls.Load(); c != n {
		t.Errorf("a second probe reached the store while the first was out (%d calls)", c-n)
	}
	pcancel()
	<-probe
}

// TestTheStateChangeCallbackMayCallTheBreaker: the callback runs without the
// breaker's lock, so it may read or use the breaker (and take locks of its
// own that other callers hold while calling the breaker).
func TestTheStateChangeCallbackMayCallTheBreaker(t *testing.T) {
	var b *resilient.Breaker
	var seen []resilient.State
	b = resilient.NewBreaker(resilient.BreakerOptions{Failures: 1, OpenFor: time.Second}, func(from, to resilient.State) {
		seen = append(seen, b.State())
		b.Allow(time.Unix(0, 0))
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t0 := time.Unix(1000, 0)
		tk, _ := b.Allow(t0)
		b.Failure(tk, t0)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the breaker deadlocked calling its callback")
	}
	if len(seen) != 1 || seen[0] != resilient.Open {
		t.Errorf("the callback saw %v, want [open]", seen)
	}
}

// TestTheLocalShareKeepsThePolicyWindow: with a local share of 1/2, a
// capacity of 5 becomes 2 (rounded down) and the rate is scaled as the
// capacity was (2/5), so the local bucket refills from empty in the
// policy's own 5 s and a RateLimit-Policy header can describe it.
func TestTheLocalShareKeepsThePolicyWindow(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	g := &gatedStore{mem: storetest.Memory(nil), next: make(chan gate, 16)}
	half, _ := resilient.NewShare(1, 2)
	rs, err := resilient.New(g, resilient.Options{
		Timeout: time.Minute, Breaker: serveBreaker, Clock: clock, Fallback: storetest.Memory(clock), FallbackShare: half,
	})
	if err != nil {
		t.Fatal(err)
	}
	req := []limiter.Request{{Name: "b", ID: "x", Limit: limiter.MustLimit(5, "1"), Cost: 1}}
	res := make([]limiter.Result, 1)
	for i, want := range []bool{true, true, false} {
		g.next <- gate{fail: true}
		ok, err := rs.Take(context.Background(), req, res)
		if err != nil || ok != want || !res[0].Degraded || res[0].Limit != 2 {
			t.Fatalf("decision %d: %v %v %+v; want allowed %v by a local bucket of 2", i, ok, err, res[0], want)
		}
	}
	if res[0].ResetAfter != 5*time.Second || res[0].RetryAfter != 2500*time.Millisecond {
		t.Errorf("empty local bucket: full in %v, a token in %v; want 5s (the policy's window) and 2.5s", res[0].ResetAfter, res[0].RetryAfter)
	}
	for _, f := range [][2]int64{{3, 2}, {0, 1}, {1, 0}, {-1, 2}} {
		if _, err := resilient.NewShare(f[0], f[1]); err == nil || !strings.Contains(err.Error(), "a share must be a fraction in (0, 1]") {
			t.Errorf("a share of %d/%d: %v, want it refused", f[0], f[1], err)
		}
	}
	if s, err := resilient.ShareOf(0.1); err != nil || s.String() != "1/10" {
		t.Errorf("ShareOf(0.1) = %v, %v; want one tenth exactly", s, err)
	}
}
