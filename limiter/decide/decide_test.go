package decide

import (
	"context"
	"errors"
	"strings"
	"sync"
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

// countingStore counts the Takes it is handed, and the most buckets one
// held.
type countingStore struct {
	limiter.Store
	mu          sync.Mutex
	calls, most int
}

func (s *countingStore) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	s.mu.Lock()
	s.calls, s.most = s.calls+1, max(s.most, len(reqs))
	s.mu.Unlock()
	return s.Store.Take(ctx, reqs, res)
}

func (s *countingStore) reset() {
	s.mu.Lock()
	s.calls, s.most = 0, 0
	s.mu.Unlock()
}

// TestEachShadowBucketDecidesAsIfItWereTheOnlyOne: two shadow buckets, one
// spent: the other still pays (DESIGN: each shadow policy decides as if it
// were the only one, its would-be denials its own), each shadow bucket in
// a Take of its own; ShadowAllowed says not every one did. A charge among
// the shadow buckets is applied once.
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
		if got := d.Decide(context.Background(), plan, res); got != (Decision{Allowed: true, ShadowAllowed: true}) || shadow.calls != 3 || shadow.most != 1 {
			t.Fatalf("concurrent %v, first decision: %+v after %d shadow Takes of up to %d buckets, want every bucket paid, one Take each",
				concurrent, got, shadow.calls, shadow.most)
		}
		for i := int64(2); i <= 3; i++ {
			shadow.reset()
			got := d.Decide(context.Background(), plan, res)
			if got != (Decision{Allowed: true}) || res[1].Allowed || !res[2].Allowed || res[2].Remaining != 5-i || shadow.calls != 3 {
				t.Fatalf("concurrent %v, decision %d: %+v, results %+v after %d shadow Takes; want shadow-small short, shadow-large paying (%d left), one Take each",
					concurrent, i, got, res, shadow.calls, 5-i)
			}
			if res[3].Remaining != 5-i {
				t.Fatalf("concurrent %v, decision %d: the charge left %d, want %d (applied once a decision)", concurrent, i, res[3].Remaining, 5-i)
			}
		}
		// One shadow bucket, short: one Take.
		one := []Bucket{plan[0], plan[1]}
		shadow.reset()
		if got := d.Decide(context.Background(), one, res[:2]); got != (Decision{Allowed: true}) || shadow.calls != 1 {
			t.Fatalf("concurrent %v, one short shadow bucket: %+v after %d shadow Takes, want one", concurrent, got, shadow.calls)
		}
	}
}

// barrierStore is a real in-memory store whose Take waits, up to the
// context's deadline, until n Takes have begun: Takes that pass ran at the
// same time.
type barrierStore struct {
	limiter.Store
	mu      sync.Mutex
	n       int
	arrived chan struct{}
}

func (s *barrierStore) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	s.mu.Lock()
	if s.n--; s.n == 0 {
		close(s.arrived)
	}
	s.mu.Unlock()
	select {
	case <-s.arrived:
	case <-ctx.Done():
		return false, errors.New("not every shadow Take began: they did not run at the same time")
	}
	return s.Store.Take(ctx, reqs, res)
}

// TestTheShadowBucketsTakeAtTheSameTime: with Concurrent, a plan's shadow
// buckets are taken at the same time, so that, however many there are, a
// decision waits for one round trip (a pipelining store, such as Redis',
// sends Takes in flight together): three shadow Takes meet.
func TestTheShadowBucketsTakeAtTheSameTime(t *testing.T) {
	shadow := &barrierStore{Store: storetest.Memory(nil), n: 3, arrived: make(chan struct{})}
	d := Decider{Store: storetest.Memory(nil), Shadow: shadow, Concurrent: true}
	var plan []Bucket
	for _, name := range []string{"a", "b", "c"} {
		plan = append(plan, Bucket{Request: limiter.Request{Name: name, ID: "k", Limit: limiter.MustLimit(1, "1/60"), Cost: 1}, Shadow: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make([]limiter.Result, len(plan))
	if got := d.Decide(ctx, plan, res); got != (Decision{Allowed: true, ShadowAllowed: true}) {
		t.Fatalf("%+v", got)
	}
}

// TestAPanicInOneOfTheShadowTakesIsAnError: a panic on one shadow bucket's
// goroutine becomes ShadowErr once the others are done, with the stack
// where it happened; the enforced decision stands.
func TestAPanicInOneOfTheShadowTakesIsAnError(t *testing.T) {
	plan := append(decidePlan(), Bucket{Request: limiter.Request{Name: "shadow-key", ID: "k1", Limit: limiter.MustLimit(1, "1/60"), Cost: 1}, Shadow: true})
	d := Decider{Store: storetest.Memory(nil), Shadow: panickyStore{}, Concurrent: true}
	res := make([]limiter.Result, len(plan))
	got := d.Decide(context.Background(), plan, res)
	var p *ShadowPanic
	if !got.Allowed || !got.ShadowAllowed || !errors.As(got.ShadowErr, &p) || p.Value != "a bug in the shadow store" || !strings.Contains(string(p.Stack), "panickyStore") {
		t.Fatalf("%+v", got)
	}
}
