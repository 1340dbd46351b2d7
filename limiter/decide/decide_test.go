package decide

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
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

// decidePlan is a request's plan as a front end makes it: a shadow bucket
// of capacity 1 first, then two enforced ones, per key (capacity 2) and
// per address (capacity 5), all refilling one token a minute.
func decidePlan() []Bucket {
	return []Bucket{
		{Request: limiter.Request{Name: "shadow-ip", ID: "198.51.100.7", Limit: limiter.MustLimit(1, "1/60"), Cost: 1}, Shadow: true},
		{Request: limiter.Request{Name: "per-key", ID: "k1", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}},
		{Request: limiter.Request{Name: "per-ip", ID: "198.51.100.7", Limit: limiter.MustLimit(5, "1/60"), Cost: 1}},
	}
}

// TestDecideIsAllOrNothingWithTheShadowOnItsOwn: results come back in plan
// order; the enforced buckets pay together or not at all; the shadow
// bucket's denial never denies.
func TestDecideIsAllOrNothingWithTheShadowOnItsOwn(t *testing.T) {
	plan := decidePlan()
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
	plan := decidePlan()
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
	plan := decidePlan()
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

// countingStore counts the Takes it is handed.
type countingStore struct {
	limiter.Store
	calls int
}

func (s *countingStore) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	s.calls++
	return s.Store.Take(ctx, reqs, res)
}

// TestEachShadowBucketDecidesAsIfItWereTheOnlyOne: two shadow buckets, one
// spent: the other still pays (DESIGN: each shadow policy decides as if it
// were the only one, its would-be denials its own), in a second Take of
// the buckets that could pay; ShadowAllowed says not every one did. A plan
// whose shadow buckets all pay, or with one shadow bucket, costs one Take
// as before; a charge among the shadow buckets is applied once.
func TestEachShadowBucketDecidesAsIfItWereTheOnlyOne(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		shadow := &countingStore{Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0)))}
		d := Decider{Store: storetest.Memory(nil), Shadow: shadow, Concurrent: concurrent}
		plan := []Bucket{
			{Request: limiter.Request{Name: "enforced", ID: "k", Limit: limiter.MustLimit(9, "1/60"), Cost: 1}},
			{Request: limiter.Request{Name: "shadow-small", ID: "k", Limit: limiter.MustLimit(1, "1/60"), Cost: 1}, Shadow: true},
			{Request: limiter.Request{Name: "shadow-large", ID: "k", Limit: limiter.MustLimit(5, "1/60"), Cost: 1}, Shadow: true},
			{Request: limiter.Request{Name: "shadow-charged", ID: "k", Limit: limiter.MustLimit(5, "1/60"), Cost: 1, Kind: limiter.Charge}, Shadow: true},
		}
		res := make([]limiter.Result, len(plan))
		if got := d.Decide(context.Background(), plan, res); got != (Decision{Allowed: true, ShadowAllowed: true}) || shadow.calls != 1 {
			t.Fatalf("concurrent %v, first decision: %+v after %d shadow Takes, want every bucket paid in one", concurrent, got, shadow.calls)
		}
		for i := int64(2); i <= 3; i++ {
			shadow.calls = 0
			got := d.Decide(context.Background(), plan, res)
			if got != (Decision{Allowed: true}) || res[1].Allowed || !res[2].Allowed || res[2].Remaining != 5-i || shadow.calls != 2 {
				t.Fatalf("concurrent %v, decision %d: %+v, results %+v after %d shadow Takes; want shadow-small short, shadow-large paying (%d left), in two Takes",
					concurrent, i, got, res, shadow.calls, 5-i)
			}
			if res[3].Remaining != 5-i {
				t.Fatalf("concurrent %v, decision %d: the charge left %d, want %d (applied once a decision)", concurrent, i, res[3].Remaining, 5-i)
			}
		}
		// One shadow bucket, short: one Take, as before.
		one := []Bucket{plan[0], plan[1]}
		shadow.calls = 0
		if got := d.Decide(context.Background(), one, res[:2]); got != (Decision{Allowed: true}) || shadow.calls != 1 {
			t.Fatalf("concurrent %v, one short shadow bucket: %+v after %d shadow Takes, want one", concurrent, got, shadow.calls)
		}
	}
}
