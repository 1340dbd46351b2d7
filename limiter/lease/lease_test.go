package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/lease"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

func limitOf(t testing.TB, capacity, perSecond int64) limiter.Limit {
	t.Helper()
	r, err := limiter.PerSecond(perSecond)
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.NewLimit(capacity, r)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func take(s limiter.Store, l limiter.Limit, id string, cost int64) (bool, limiter.Result, error) {
	res := make([]limiter.Result, 1)
	ok, err := s.Take(context.Background(), []limiter.Request{{Name: "global", ID: id, Limit: l, Cost: cost, Lease: true}}, res)
	return ok, res[0], err
}

// TestReplicasNeverAdmitMoreThanTheBucket runs the conformance suite's
// invariant (storetest.RunReplicas) on the in-memory store, and checks
// that below the rate the replicas decided most requests from leases.
func TestReplicasNeverAdmitMoreThanTheBucket(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	clock := limiter.NewManualClock(start)
	base := storetest.Memory(clock)
	var last time.Duration
	reg := prometheus.NewRegistry()
	storetest.RunReplicas(t, func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
		clock.Advance(at - last)
		last = at
		return base.Take(context.Background(), reqs, res)
	}, func(base limiter.Store, clock limiter.Clock, i int) limiter.Store {
		o := lease.Options{Clock: clock}
		if i == 0 {
			o.Registerer = reg
		}
		return lease.New(base, o)
	})
	served := counter(t, reg, "floodgate_lease_decisions_total")
	t.Logf("one replica served %v decisions from leases", served)
	if served < 1000*0.8 {
		t.Errorf("one replica served %v of its 1,000 decisions below the rate from leases, want most", served)
	}
}

func counter(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestALeaseGoesBackWhenItEnds: the tokens a lease did not spend return to
// the bucket when it ends (Close), so a bucket left alone is full again.
func TestALeaseGoesBackWhenItEnds(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_700_000_000, 0))
	base := storetest.Memory(clock)
	l := limitOf(t, 100, 1)
	s := lease.New(base, lease.Options{Clock: clock, Hot: 2})
	for range 3 {
		if ok, _, err := take(s, l, "k", 1); !ok || err != nil {
			t.Fatalf("take: %v %v", ok, err)
		}
	}
	if n := look(t, base, l); n >= 97 {
		t.Fatalf("after 3 takes with a lease the store's bucket holds %d: no lease was taken", n)
	}
	s.Close()
	if n := look(t, base, l); n != 97 {
		t.Errorf("after Close the bucket holds %d, want 97 (100 less the 3 admitted)", n)
	}
}

// look is the whole tokens the store's bucket holds, taking none.
func look(t *testing.T, s limiter.Store, l limiter.Limit) int64 {
	t.Helper()
	res := make([]limiter.Result, 1)
	if _, err := s.Take(context.Background(), []limiter.Request{{Name: "global", ID: "k", Limit: l}}, res); err != nil {
		t.Fatal(err)
	}
	return res[0].Remaining
}

// TestAllOrNothingReturnsTheLeasedTokenLocally: a request of a leased
// bucket and of another one that is empty is denied, and the leased
// bucket's token stays in its lease.
func TestAllOrNothingReturnsTheLeasedTokenLocally(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_700_000_000, 0))
	base := storetest.Memory(clock)
	l := limitOf(t, 100, 1)
	s := lease.New(base, lease.Options{Clock: clock, Hot: 1})
	take(s, l, "k", 1) // hot at once: leased
	_, before, _ := take(s, l, "k", 1)
	empty := limitOf(t, 1, 1)
	res := make([]limiter.Result, 2)
	reqs := []limiter.Request{{Name: "global", ID: "k", Limit: l, Cost: 1, Lease: true}, {Name: "other", ID: "x", Limit: empty, Cost: 2}}
	if ok, err := s.Take(context.Background(), reqs, res); ok || err != nil {
		t.Fatalf("a request its other bucket cannot pay: %v %v", ok, err)
	}
	if !res[0].Allowed || res[1].Allowed || !res[1].ExceedsCapacity {
		t.Errorf("results %+v", res)
	}
	_, after, _ := take(s, l, "k", 1)
	if after.Remaining != before.Remaining-1 {
		t.Errorf("remaining %d then %d: the denied request spent its leased token", before.Remaining, after.Remaining)
	}
}

// flaky is a store that fails while down is set.
type flaky struct {
	limiter.Store
	down atomic.Bool
}

func (f *flaky) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	if f.down.Load() {
		return false, limiter.ErrUnavailable
	}
	return f.Store.Take(ctx, reqs, res)
}

// TestAStoreDownSpendsTheLeaseThenFails: with the store unreachable, a
// replica decides from its lease while it lasts, then gets the store's
// error (the failure mode answers), never an allow it cannot pay for.
func TestAStoreDownSpendsTheLeaseThenFails(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_700_000_000, 0))
	base := &flaky{Store: storetest.Memory(clock)}
	l := limitOf(t, 100, 1)
	s := lease.New(base, lease.Options{Clock: clock, Hot: 1})
	take(s, l, "k", 1)
	base.down.Store(true)
	served := 0
	for range 200 {
		ok, _, err := take(s, l, "k", 1)
		if err != nil {
			if !errors.Is(err, limiter.ErrUnavailable) {
				t.Fatalf("error %v", err)
			}
			break
		}
		if !ok {
			t.Fatal("denied from a lease")
		}
		served++
	}
	if served == 0 || served >= 100 {
		t.Errorf("%d decisions served from the lease while the store was down, want some and fewer than the capacity", served)
	}
}

// TestReplicasOnRedisNeverAdmitMoreThanTheBucket is the invariant against
// the script: three replicas leasing one bucket in a real redis-server,
// offered more than the bucket refills for a bounded time, admit never
// more than its capacity plus what refilled by Redis' clock.
func TestReplicasOnRedisNeverAdmitMoreThanTheBucket(t *testing.T) {
	srv := redistest.Start(t)
	base := redisstore.New(srv.Client(), "lease-test:")
	l := limitOf(t, 200, 1000)
	var admitted atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	var replicas []*lease.Store
	for range 3 {
		r := lease.New(base, lease.Options{})
		replicas = append(replicas, r)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < 4000 && time.Since(start) < time.Second; n++ {
					ok, _, err := take(r, l, "k", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, r := range replicas {
		r.Close()
	}
	// Redis' clock runs beside this one: a millisecond either way.
	allowed := 200 + int64((elapsed+time.Millisecond).Seconds()*1000)
	if n := admitted.Load(); n > allowed || n == 0 {
		t.Errorf("%d admitted in %v, the bucket allowed %d", n, elapsed, allowed)
	}
}

// TestAChangedLimitEndsTheLease: a request under another limit (a reload
// changed the policy) is not paid from the lease taken under the old one:
// the lease goes back and the store decides.
func TestAChangedLimitEndsTheLease(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_700_000_000, 0))
	reg := prometheus.NewRegistry()
	s := lease.New(storetest.Memory(clock), lease.Options{Clock: clock, Hot: 1, Registerer: reg})
	old, changed := limitOf(t, 100, 1), limitOf(t, 50, 1)
	for range 3 {
		take(s, old, "k", 1)
	}
	served := counter(t, reg, "floodgate_lease_decisions_total")
	if served == 0 {
		t.Fatal("no decision served from a lease under the old limit")
	}
	_, r, err := take(s, changed, "k", 1)
	if err != nil || r.Limit != 50 {
		t.Fatalf("under the new limit: %+v %v", r, err)
	}
	s.Wait()
	if n := counter(t, reg, "floodgate_lease_tokens_returned_total"); n == 0 {
		t.Error("the old limit's lease was not given back")
	}
	if n := counter(t, reg, "floodgate_lease_decisions_total"); n != served {
		t.Errorf("%v decisions served from leases, %v before the limit changed: the old lease paid for the new limit", n, served)
	}
}

// TestAReplicaKilledHoldingALeaseLosesAtMostTheLease: a replica that ends
// without giving its lease back (killed) costs the bucket at most what the
// lease held, never more admitted than allowed; and the bucket refills as
// any bucket does.
func TestAReplicaKilledHoldingALeaseLosesAtMostTheLease(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_700_000_000, 0))
	base := storetest.Memory(clock)
	l := limitOf(t, 100, 10)
	killed := lease.New(base, lease.Options{Clock: clock, Hot: 1})
	for range 5 {
		if ok, _, _ := take(killed, l, "k", 1); !ok {
			t.Fatal("denied")
		}
	}
	// killed is dropped here, never closed: its lease stays out.
	held := 100 - 5 - look(t, base, l)
	if held <= 0 || held > 50 {
		t.Fatalf("the killed replica's lease holds %d tokens, want some and at most half the capacity", held)
	}
	other := lease.New(base, lease.Options{Clock: clock, Hot: 1})
	admitted := int64(0)
	for range 200 {
		if ok, _, _ := take(other, l, "k", 1); ok {
			admitted++
		}
	}
	if admitted != 100-5-held {
		t.Errorf("the other replica admitted %d, want what the bucket held besides the lost lease (%d)", admitted, 100-5-held)
	}
	other.Close()
	clock.Advance(10 * time.Second) // the refill window: 100 tokens at 10 a second
	if n := look(t, base, l); n != 100 {
		t.Errorf("after a refill window the bucket holds %d, want it full (100)", n)
	}
}
