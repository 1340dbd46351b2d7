package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

func TestAdjustConformance(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *redistest.Server, c *redis.Client, s *redisstore.Store) {
		storetest.RunAdjust(t, harness(s, c, func(t *testing.T, d time.Duration) { advance(t, c, "", d) }))
	})
}

func TestAdjustReadWritesNothingEvenForAChangedLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *redistest.Server, c *redis.Client, s *redisstore.Store) {
		ctx := context.Background()
		old := limiter.MustLimit(10, "1/3600")
		take(t, s, limiter.Request{Name: "p", ID: "a", Limit: old, Cost: 4})
		before, err := c.Get(ctx, s.Key("p", "a")).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Adjust(ctx, limiter.Request{Name: "p", ID: "a", Limit: limiter.MustLimit(5, "1/3600")}, limiter.Adjustment{Op: limiter.OpRead})
		if err != nil || b.Remaining != 5 {
			t.Fatalf("read under the new limit: %+v, %v", b, err)
		}
		after, err := c.Get(ctx, s.Key("p", "a")).Bytes()
		if err != nil || string(after) != string(before) {
			t.Fatalf("the read rewrote the key (%v)", err)
		}
	})
}

// On a Redis Cluster each adjustment is one script call routed to the
// master of its bucket's slot: the suite passes on buckets spread over
// three masters.
func TestAdjustConformanceOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client()
	const prefix = "adj:"
	storetest.RunAdjust(t, harness(redisstore.New(cc, prefix), cc, func(t *testing.T, d time.Duration) { advanceCluster(t, cc, prefix, d) }))
}

// An adjustment loads its script when Redis lost it (SCRIPT FLUSH, a
// restart), and the decision scripts' observer does not hear of it.
func TestAdjustReloadsItsScriptAndIsNoDecisionScriptCall(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := redisstore.New(c, "")
	calls := 0
	s.ObserveScripts(func(n int, _ time.Duration) { calls += n })
	ctx := context.Background()
	req := limiter.Request{Name: "p", ID: "a", Limit: limiter.MustLimit(10, "1/3600")}
	for i := 0; i < 2; i++ {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		b, err := s.Adjust(ctx, req, limiter.Adjustment{Op: limiter.OpAdd, N: -3})
		if err != nil || b.Remaining != 7-int64(3*i) {
			t.Fatalf("adjustment %d after SCRIPT FLUSH: %+v, %v", i+1, b, err)
		}
	}
	if calls != 0 {
		t.Errorf("the decision scripts' observer heard of %d calls", calls)
	}
}

// TestAdjustQuotaConformance runs the quota adjustments on a real
// redis-server under a faked clock: the adjustment script picks the
// window by TIME, as the decision script does.
func TestAdjustQuotaConformance(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	for _, k := range []struct {
		name string
		new  func(t *testing.T, prefix string) *redisstore.Store
	}{
		{"unpipelined", func(_ *testing.T, prefix string) *redisstore.Store { return redisstore.New(srv.Client(), prefix) }},
		{"pipelined", func(t *testing.T, prefix string) *redisstore.Store { return pipelined(t, srv.Client(), prefix) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			n := 0
			storetest.RunAdjustQuota(t, storetest.QuotaHarness{
				Start: func(t *testing.T, at time.Time) (limiter.Store, func(time.Time)) {
					n++
					clock.Set(t, at)
					return k.new(t, "adjq-"+k.name+strconv.Itoa(n)+":"), func(at time.Time) { clock.Set(t, at) }
				},
				Slack: quotaSlack,
			})
		})
	}
}

// A read of a quota writes nothing: no key for a caller never counted,
// the same bytes and expiry for one counted.
func TestAQuotaReadWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := redisstore.New(c, "")
	ctx := context.Background()
	q := berlinMonth(t)
	req := limiter.Request{Name: "p", ID: "a", Limit: limiter.MustLimit(q.Limit, "1"), Quota: q}
	if b, err := s.Adjust(ctx, req, limiter.Adjustment{}); err != nil || b.Remaining != 3 {
		t.Fatalf("read: %+v, %v", b, err)
	}
	if n, _ := c.Exists(ctx, s.QuotaKey("p", "a")).Result(); n != 0 {
		t.Fatal("a read of a caller never counted created its key")
	}
	r := req
	r.Cost = 2
	take(t, s, r)
	before, _ := c.Get(ctx, s.QuotaKey("p", "a")).Bytes()
	ttl, _ := c.PExpireTime(ctx, s.QuotaKey("p", "a")).Result()
	if b, err := s.Adjust(ctx, req, limiter.Adjustment{}); err != nil || b.Remaining != 1 {
		t.Fatalf("read after a take of 2: %+v, %v", b, err)
	}
	after, _ := c.Get(ctx, s.QuotaKey("p", "a")).Bytes()
	ttl2, _ := c.PExpireTime(ctx, s.QuotaKey("p", "a")).Result()
	if len(before) != 16 || string(after) != string(before) || ttl2 != ttl {
		t.Fatalf("the read rewrote the key: %x (expiry %v) then %x (%v)", before, ttl, after, ttl2)
	}
}

// TestAdjustQuotaAfterRedisClockJumps: Redis' clock stepped by more than
// a window since the replica measured it; the adjustment script refuses
// the stale windows, and the store measures the clock again and adjusts
// the window TIME is in.
func TestAdjustQuotaAfterRedisClockJumps(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	clock.Set(t, time.Date(2028, 2, 20, 12, 0, 0, 0, time.UTC))
	s := redisstore.New(srv.Client(), "jump:")
	q := berlinMonth(t)
	req := limiter.Request{Name: "p", ID: "a", Limit: limiter.MustLimit(q.Limit, "1"), Quota: q}
	r := req
	r.Cost = 3
	if ok, err := s.Take(context.Background(), []limiter.Request{r}, make([]limiter.Result, 1)); !ok || err != nil {
		t.Fatalf("the first take: %v, %v", ok, err)
	}
	clock.Set(t, time.Date(2029, 6, 20, 12, 0, 0, 0, time.UTC))
	b, err := s.Adjust(context.Background(), req, limiter.Adjustment{Op: limiter.OpAdd, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2029, 7, 14, 22, 0, 0, 0, time.UTC); b.Remaining != 5 || !b.WindowEnd.Equal(want) {
		t.Fatalf("got %+v, want 5 left in the window ending %v (midnight in Berlin)", b, want)
	}
}

// On a Redis Cluster, a decision across slots that one slot denies undoes
// its quota's take exactly, an operator's credit included: the caller
// keeps every request the add gave.
func TestACreditSurvivesADenialAcrossSlots(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client()
	ctx := context.Background()
	s := redisstore.New(cc, "xq:")
	ids := idsOnNodes(t, cl, s, "b")
	q := berlinMonth(t)
	quota := limiter.Request{Name: "q", ID: ids[0], Limit: limiter.MustLimit(q.Limit, "1"), Quota: q, Cost: 1}
	bucket := limiter.Request{Name: "b", ID: ids[1], Limit: limiter.MustLimit(1, "1/3600"), Cost: 1}
	if b, err := s.Adjust(ctx, quota, limiter.Adjustment{Op: limiter.OpAdd, N: 5}); err != nil || b.Remaining != 8 {
		t.Fatalf("add 5: %+v, %v", b, err)
	}
	if ok, _ := take(t, s, bucket); !ok {
		t.Fatal("the bucket's one token was denied")
	}
	if ok, res := take(t, s, quota, bucket); ok {
		t.Fatalf("the decision across slots on an empty bucket passed: %+v", res)
	}
	if b, err := s.Adjust(ctx, quota, limiter.Adjustment{Op: limiter.OpRead}); err != nil || b.Remaining != 8 {
		t.Fatalf("the quota after the denied decision: %+v, %v; want the 8 it had", b, err)
	}
}

// TestQuotaAdjustmentsAgreeWithTheMemoryStore runs one random sequence of
// decisions (takes, charges, refunds) and adjustments (reads, adds, sets,
// resets) over a daily quota on a real redis-server under a faked clock
// and on the memory store on an injected one, at the same instants (whole
// minutes, so Redis' clock running on between Set and the call never
// crosses a window's end): the script's arithmetic is the Go one's.
func TestQuotaAdjustmentsAgreeWithTheMemoryStore(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	at := time.Date(2028, 6, 1, 0, 0, 0, 0, time.UTC)
	clock.Set(t, at)
	mclock := limiter.NewManualClock(at)
	stores := []limiter.Store{redisstore.New(srv.Client(), "agree:"), storetest.Memory(mclock)}
	cal, err := calendar.New(calendar.Day, time.UTC, 0)
	if err != nil {
		t.Fatal(err)
	}
	q := &limiter.Quota{Limit: 5, Windows: cal}
	req := limiter.Request{Name: "p", ID: "a", Limit: limiter.MustLimit(5, "1"), Quota: q}
	rng := rand.New(rand.NewPCG(47, 9))
	ctx := context.Background()
	kinds := map[string]int{}
	for i := 0; i < 400; i++ {
		if rng.IntN(8) == 0 {
			at = at.Add(time.Duration(1+rng.IntN(600)) * time.Minute)
			clock.Set(t, at)
			mclock.Advance(at.Sub(mclock.Now()))
		}
		var got [2]string
		op, cost, n := rng.IntN(7), int64(rng.IntN(4)), int64(rng.IntN(21)-10)
		if rng.IntN(10) == 0 { // the bounds: a credit's, twice the limit's
			n = []int64{1e18, -1e18, limiter.MaxQuotaCredit, -limiter.MaxQuotaCredit - 7}[rng.IntN(4)]
		}
		for j, s := range stores {
			switch op {
			case 0, 1, 2:
				r := req
				r.Kind, r.Cost = limiter.Kind(op), cost
				res := make([]limiter.Result, 1)
				ok, err := s.Take(ctx, []limiter.Request{r}, res)
				if err != nil {
					t.Fatal(err)
				}
				got[j] = fmt.Sprintf("%v %d %v", ok, res[0].Remaining, res[0].InDebt)
			default:
				a := limiter.Adjustment{Op: limiter.Op(op - 3), N: n}
				if a.Op == limiter.OpSet {
					a.N = min(max(a.N, -5), 5+limiter.MaxQuotaCredit)
				}
				b, err := s.(limiter.Adjuster).Adjust(ctx, req, a)
				if err != nil {
					t.Fatalf("%v %d: %v", a.Op, a.N, err)
				}
				got[j] = fmt.Sprintf("%d %d %d %v", b.Remaining, b.Debt, b.Missing, b.WindowEnd)
			}
		}
		kinds[fmt.Sprint(op)]++
		if got[0] != got[1] {
			t.Fatalf("step %d (op %d, at %v): Redis %q, memory %q", i, op, at, got[0], got[1])
		}
	}
	if len(kinds) != 7 {
		t.Fatalf("ops drawn: %v", kinds)
	}
}
