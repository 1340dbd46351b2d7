package memory_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/storetest"
)

func TestConformance(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	s := storetest.Memory(clock)
	storetest.Run(t, storetest.Harness{
		Store:   s,
		Advance: func(_ *testing.T, d time.Duration) { clock.Advance(d) },
		Exists:  func(_ *testing.T, name, id string) bool { return s.Has(name, id) },
		Reclaim: func(*testing.T) { s.Reclaim() },
	})
}

func TestAFloodOfUniqueCallersStaysWithinTheCap(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(0, 0))
	const maxBuckets = 4096
	s := memory.New(memory.Options{Clock: clock, MaxBuckets: maxBuckets, Shards: 16})
	l := limiter.MustLimit(10, "1/60") // nothing refills during the flood
	res := make([]limiter.Result, 1)
	for i := 0; i < 100_000; i++ {
		ok, err := s.Take(context.Background(), []limiter.Request{{Name: "flood", ID: strconv.Itoa(i), Limit: l, Cost: 1}}, res)
		if err != nil || !ok {
			t.Fatalf("caller %d: %v %v", i, ok, err)
		}
	}
	if n := s.Len(); n > maxBuckets || n < maxBuckets/2 {
		t.Fatalf("after 100000 unique callers the store holds %d buckets, cap %d", n, maxBuckets)
	}
}

func TestRefilledBucketsAreReclaimed(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(0, 0))
	s := memory.New(memory.Options{Clock: clock, MaxBuckets: 1 << 20, Shards: 4})
	l := limiter.MustLimit(10, "10") // full again 100ms after one take
	res := make([]limiter.Result, 1)
	take := func(id string) {
		if _, err := s.Take(context.Background(), []limiter.Request{{Name: "idle", ID: id, Limit: l, Cost: 1}}, res); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10_000; i++ {
		take("old" + strconv.Itoa(i))
	}
	clock.Advance(100 * time.Millisecond)
	// New callers arriving sweep the old, now full, buckets as they go.
	for i := 0; i < 10_000; i++ {
		take("new" + strconv.Itoa(i))
	}
	if n := s.Len(); n > 12_000 {
		t.Errorf("%d buckets held after 10000 idle callers refilled and 10000 new arrived: the idle ones were not reclaimed", n)
	}
	clock.Advance(100 * time.Millisecond)
	if n := s.Reclaim(); n == 0 || s.Len() != 0 {
		t.Errorf("Reclaim dropped %d and left %d; want every bucket gone", n, s.Len())
	}
}

func TestParallelCallersShareOneBucketExactly(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(0, 0))
	s := storetest.Memory(clock)
	l := limiter.MustLimit(1000, "1")
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]limiter.Result, 2)
			reqs := []limiter.Request{{Name: "a", ID: "one", Limit: l, Cost: 1}, {Name: "b", ID: "two", Limit: l, Cost: 1}}
			for i := 0; i < 500; i++ {
				if ok, _ := s.Take(context.Background(), reqs, res); ok {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 1000 {
		t.Fatalf("32×500 parallel decisions on a frozen clock admitted %d, want exactly the capacity 1000", admitted.Load())
	}
}

// TestNewRefusesNoCapOrNoShard: MaxBuckets and Shards are taken as given;
// below 1 they are a programmer's mistake (a configuration's values are
// checked before), refused with the field named, not replaced by defaults.
func TestNewRefusesNoCapOrNoShard(t *testing.T) {
	for _, tc := range []struct {
		o    memory.Options
		want string
	}{
		{memory.Options{Shards: 16}, "memory: Options.MaxBuckets must be at least 1 (got 0)"},
		{memory.Options{MaxBuckets: -5, Shards: 16}, "memory: Options.MaxBuckets must be at least 1 (got -5)"},
		{memory.Options{MaxBuckets: 1 << 20}, "memory: Options.Shards must be at least 1 (got 0)"},
		{memory.Options{MaxBuckets: 1 << 20, Shards: -1}, "memory: Options.Shards must be at least 1 (got -1)"},
	} {
		for what, f := range map[string]func(){
			"New":           func() { memory.New(tc.o) },
			"MaxTableBytes": func() { memory.MaxTableBytes(tc.o) },
		} {
			func() {
				defer func() {
					if msg, _ := recover().(string); msg != tc.want {
						t.Errorf("%s(%+v) panicked with %q, want %q", what, tc.o, msg, tc.want)
					}
				}()
				f()
			}()
		}
	}
}

// TestABucketFullInAThousandMillionYears: 2^32 tokens at one a year,
// emptied, is held (its full instant, beyond any microsecond count, is
// counted in steps of 1000 s), kept by Reclaim, and has a token again after
// exactly a year.
func TestABucketFullInAThousandMillionYears(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	s := storetest.Memory(clock)
	l := limiter.MustLimit(1<<32, "1/31536000")
	r := limiter.Request{Name: "slow", ID: "a", Limit: l, Cost: 1 << 32}
	res := make([]limiter.Result, 1)
	if ok, err := s.Take(context.Background(), []limiter.Request{r}, res); !ok || err != nil || res[0].ResetAfter != limiter.MaxDuration {
		t.Fatalf("emptying it: %v %v %+v", ok, err, res[0])
	}
	clock.Advance(365 * 24 * time.Hour)
	if n := s.Reclaim(); n != 0 || !s.Has("slow", "a") {
		t.Fatalf("Reclaim dropped %d buckets a year into a refill of 2^32 years", n)
	}
	r.Cost = 2
	if ok, _ := s.Take(context.Background(), []limiter.Request{r}, res); ok || res[0].Remaining != 1 || res[0].RetryAfter != 365*24*time.Hour {
		t.Errorf("two tokens a year later: %v %+v, want one held, the next in a year", ok, res[0])
	}
}

// TestADecisionOfTwentyThousandBuckets: one decision naming 20,000
// buckets (a rate limit request's descriptors, each its own caller) locks
// each shard once, in order, whatever the count, and decides every bucket:
// all pay, none twice; then all are denied together when one cannot pay.
func TestADecisionOfTwentyThousandBuckets(t *testing.T) {
	s := storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0)))
	l := limiter.MustLimit(2, "1/60")
	reqs := make([]limiter.Request, 20_000)
	for i := range reqs {
		reqs[i] = limiter.Request{Name: "rls", ID: strconv.Itoa(i), Limit: l, Cost: 1}
	}
	res := make([]limiter.Result, len(reqs))
	for round, want := range []int64{1, 0} {
		if ok, err := s.Take(context.Background(), reqs, res); !ok || err != nil {
			t.Fatalf("round %d: %v %v", round+1, ok, err)
		}
		for i := range res {
			if res[i].Remaining != want {
				t.Fatalf("round %d, bucket %d: %d left, want %d", round+1, i, res[i].Remaining, want)
			}
		}
	}
	reqs[len(reqs)/2].Cost = 0 // a look: denied now that its bucket is empty
	if ok, err := s.Take(context.Background(), reqs, res); ok || err != nil || res[0].Remaining != 0 {
		t.Fatalf("every bucket empty: %v %v %+v", ok, err, res[0])
	}
}

// TestQuota runs the calendar quota cases on an injected clock.
func TestQuota(t *testing.T) {
	storetest.RunQuota(t, storetest.QuotaHarness{Start: func(t *testing.T, at time.Time) (limiter.Store, func(time.Time)) {
		clock := limiter.NewManualClock(at)
		return storetest.Memory(clock), func(to time.Time) { clock.Advance(to.Sub(clock.Now())) }
	}})
}
