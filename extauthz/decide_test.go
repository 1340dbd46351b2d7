package extauthz

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// meetingStore is a real in-memory store whose Take first waits, up to the
// context's deadline, until the other meetingStore's Take has begun: two
// Takes that meet ran at the same time.
type meetingStore struct {
	limiter.Store
	here, there chan struct{}
}

func (s meetingStore) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	close(s.here)
	select {
	case <-s.there:
	case <-ctx.Done():
		return false, errors.New("the other Take never began: the two did not run at the same time")
	}
	return s.Store.Take(ctx, reqs, res)
}

// panickyStore panics in Take, as a bug in a store would.
type panickyStore struct{}

func (panickyStore) Take(context.Context, []limiter.Request, []limiter.Result) (bool, error) {
	panic("a bug in the shadow store")
}

func decidePlan(t *testing.T) (*Engine, []Bucket) {
	t.Helper()
	eng := mustCompile(t,
		PolicySpec{Name: "shadow-ip", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60", Mode: "shadow"},
		PolicySpec{Name: "per-key", Key: []string{"header:x-api-key"}, Capacity: 2, RefillPerSecond: "1/60"},
		PolicySpec{Name: "per-ip", Key: []string{"client_ip"}, Capacity: 5, RefillPerSecond: "1/60"})
	plan := eng.Plan(NewView(checkRequest("198.51.100.7", map[string]string{"x-api-key": "k1"})), nil)
	if len(plan) != 3 || !plan[0].Policy.Shadow || plan[1].Policy.Shadow || plan[2].Policy.Shadow {
		t.Fatalf("plan: %+v", plan)
	}
	return eng, plan
}

// TestDecideIsAllOrNothingWithTheShadowOnItsOwn: results come back in plan
// order; the enforced buckets pay together or not at all; the shadow
// bucket's denial never denies.
func TestDecideIsAllOrNothingWithTheShadowOnItsOwn(t *testing.T) {
	_, plan := decidePlan(t)
	for _, concurrent := range []bool{false, true} {
		d := Decider{Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0))), Concurrent: concurrent}
		res := make([]limiter.Result, len(plan))
		var got []Decision
		var remaining []int64
		for range 3 {
			got = append(got, d.Decide(context.Background(), plan, res))
			remaining = append(remaining, res[2].Remaining)
		}
		// 1st: all pay. 2nd: per-key pays its last token, the shadow
		// bucket (capacity 1) cannot. 3rd: per-key is empty, so per-ip
		// pays nothing either.
		want := []Decision{{Allowed: true, ShadowAllowed: true}, {Allowed: true}, {}}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("concurrent %v, decision %d: %+v, want %+v", concurrent, i+1, got[i], want[i])
			}
		}
		if remaining[0] != 4 || remaining[1] != 3 || remaining[2] != 3 {
			t.Errorf("concurrent %v: per-ip left %v after the three decisions, want [4 3 3] (the denial took nothing)", concurrent, remaining)
		}
		if res[1].Allowed || res[0].Allowed || !res[2].Allowed {
			t.Errorf("concurrent %v: results out of plan order: %+v", concurrent, res)
		}
	}
}

// TestAConcurrentDeciderTakesTheShadowBucketsBesideTheEnforcedOnes: with
// Concurrent, the two Takes run at the same time (each waits for the other
// to begin), so a decision waits for one store round trip, not two.
func TestAConcurrentDeciderTakesTheShadowBucketsBesideTheEnforcedOnes(t *testing.T) {
	_, plan := decidePlan(t)
	a, b := make(chan struct{}), make(chan struct{})
	d := Decider{
		Store:      meetingStore{Store: storetest.Memory(nil), here: a, there: b},
		Shadow:     meetingStore{Store: storetest.Memory(nil), here: b, there: a},
		Concurrent: true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make([]limiter.Result, len(plan))
	if got := d.Decide(ctx, plan, res); got != (Decision{Allowed: true, ShadowAllowed: true}) {
		t.Fatalf("%+v", got)
	}
}

// TestAPanickingShadowTakeIsAnErrorNotACrash: a shadow Take that panics on
// its own goroutine would take the process down; it becomes ShadowErr, and
// the enforced decision stands.
func TestAPanickingShadowTakeIsAnErrorNotACrash(t *testing.T) {
	_, plan := decidePlan(t)
	d := Decider{Store: storetest.Memory(nil), Shadow: panickyStore{}, Concurrent: true}
	res := make([]limiter.Result, len(plan))
	got := d.Decide(context.Background(), plan, res)
	var p *ShadowPanic
	if !got.Allowed || !got.ShadowAllowed || !errors.As(got.ShadowErr, &p) || p.Value != "a bug in the shadow store" || len(p.Stack) == 0 {
		t.Fatalf("%+v", got)
	}
	if !res[1].Allowed || !res[2].Allowed || res[0] != (limiter.Result{}) {
		t.Errorf("results: %+v", res)
	}
}

// TestAShadowStoreThatCannotDecideNeverDenies: a Check whose shadow store
// is a dead Redis answers by its enforced policies, counts a store error,
// and counts no shadow decision.
func TestAShadowStoreThatCannotDecideNeverDenies(t *testing.T) {
	c := unreachableRedis(t)
	eng, _ := decidePlan(t)
	s := NewServer(eng, storetest.Memory(nil), ServerOptions{ShadowStore: redisstore.New(c, "")})
	req := checkRequest("198.51.100.7", map[string]string{"x-api-key": "k1"})
	for i, want := range []bool{true, true, false} {
		resp, err := s.Check(context.Background(), req)
		if err != nil || allowed(resp) != want || headerOf(resp, HeaderDegraded) != "" {
			t.Fatalf("check %d: %v, %v; want allowed %v, not degraded", i+1, resp, err, want)
		}
	}
	m := s.Metrics()
	if n := testutil.ToFloat64(m.StoreErrors); n != 3 {
		t.Errorf("store errors = %v, want 3", n)
	}
	if n := testutil.ToFloat64(m.Decisions.WithLabelValues("shadow-ip", "shadow_allowed")) + testutil.ToFloat64(m.Decisions.WithLabelValues("shadow-ip", "shadow_denied")); n != 0 {
		t.Errorf("%v shadow decisions counted without a shadow store", n)
	}
	if n := testutil.ToFloat64(m.Decisions.WithLabelValues("per-key", "denied")); n != 1 {
		t.Errorf("per-key denied = %v, want 1", n)
	}
}

// unreachableRedis is a client of a Redis address that refuses every
// connection (redistest.RefusedAddr: no other test's server can take it),
// closed when t ends.
func unreachableRedis(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.RefusedAddr(t), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}
