package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/lease"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestScriptMatchesTheRationalModel runs the real script in a real Redis with
// one line changed: TIME comes from the last two arguments, which the store
// appends to every script call from its test clock, instead of the server's
// clock. Everything else, the encoding of state in the key included, is
// what production runs; the reference model checks it decision by decision.
func TestScriptMatchesTheRationalModel(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), "")
	for seed := uint64(1); seed <= 2; seed++ {
		storetest.RunModel(t, seed, 2500, modelTake(t, s))
	}
}

// TestRatelimitLimitsMatchTheRationalModel runs a short random sequence
// (kinds, reloads among its buckets' limits) on every third limit of the
// grid of envoyproxy/ratelimit limits through the real script, each figure
// compared with the model: steps from a microsecond to 1000 s. (The memory
// store runs the whole grid.)
func TestRatelimitLimitsMatchTheRationalModel(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), "")
	storetest.RunModelOn(t, 13, 12, storetest.GridLimits(3), true, modelTake(t, s))
}

// TestABucketFullInAThousandMillionYears: 2^32 tokens at one a year,
// emptied, is full again in 2^32 years: its state counts E in steps of
// 1000 s (exact), its key expires at the cap (2^52 ms), its results stop
// at limiter.MaxDuration, and a token is back after exactly a year.
func TestABucketFullInAThousandMillionYears(t *testing.T) {
	s, c, start, setClock := clockedStore(t)
	ctx := context.Background()
	l := limiter.MustLimit(1<<32, "1/31536000")
	if l.Resolution() != limiter.MaxResolution {
		t.Fatalf("%v: step %v, want %v", l, l.Resolution(), limiter.MaxResolution)
	}
	r := limiter.Request{Name: "slow", ID: "a", Limit: l, Cost: 1 << 32}
	res := make([]limiter.Result, 1)
	if ok, err := s.Take(ctx, []limiter.Request{r}, res); !ok || err != nil || res[0].ResetAfter != limiter.MaxDuration {
		t.Fatalf("emptying it: %v %v %+v", ok, err, res[0])
	}
	key := s.Key(r.Name, r.ID)
	v := c.Get(ctx, key).Val()
	pexp, _ := c.Do(ctx, "PEXPIRETIME", key).Int64() // ms: beyond a time.Duration
	if len(v) != 41 || v[40] != 9 || pexp != 1<<52 {
		t.Errorf("state %x (%d bytes), expiry %v; want 41 bytes ending in j = 9, expiry at 2^52 ms", v, len(v), pexp)
	}
	e := math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[:8])))
	if want := float64(start.UnixMilli()/1_000_000 + 1<<32*31536); e != want {
		t.Errorf("E = %v steps, want %v (now's step + 2^32 years of 1000 s)", e, want)
	}
	r.Cost = 1
	if ok, _ := s.Take(ctx, []limiter.Request{r}, res); ok || res[0].RetryAfter != 365*24*time.Hour {
		t.Errorf("a token at once: %+v, want denied, retry after a year", res[0])
	}
	setClock(365 * 24 * time.Hour)
	if ok, _ := s.Take(ctx, []limiter.Request{r}, res); !ok || res[0].Remaining != 0 {
		t.Errorf("a token a year later: %v %+v, want allowed", ok, res[0])
	}
	r.Kind, r.Cost = limiter.Refund, math.MaxInt64
	if ok, _ := s.Take(ctx, []limiter.Request{r}, res); !ok || res[0].Remaining != 1<<32 || c.Exists(ctx, key).Val() != 0 {
		t.Errorf("a refund of everything: %v %+v, want a full bucket and no key", ok, res[0])
	}
}

// useTestClock makes s's scripts read the clock from their last two
// arguments, which exec appends from now, instead of calling TIME.
func useTestClock(t *testing.T, s *Store, now func() time.Time) {
	t.Helper()
	if s.testClock == nil {
		s.take = withInjectedClock(t, s.take.src)
		s.refund = withInjectedClock(t, s.refund.src)
	}
	s.testClock = now
}

// withInjectedClock replaces the TIME call of a script's source by the last
// two arguments.
func withInjectedClock(t *testing.T, src string) *script {
	t.Helper()
	const timeLine = "local t = redis.call('TIME')"
	if strings.Count(src, timeLine) != 1 {
		t.Fatalf("a script no longer reads the clock in exactly one place (%q)", timeLine)
	}
	return newScript(strings.Replace(src, timeLine, "local t = {ARGV[#ARGV - 1], ARGV[#ARGV]}", 1))
}

// testClockAt puts s on a test clock and returns its setter: the clock
// reads at after the start. Keys must not expire by Redis' real clock
// before the injected one says so: the injected clock starts a day ahead
// of it, at a multiple of limiter.MaxResolution from the Unix epoch, so
// the start is a step boundary for every limit (as the model assumes).
func testClockAt(t *testing.T, s *Store) func(at time.Duration) {
	_, set := testClock(t, s)
	return set
}

// testClock is testClockAt that also returns the clock's start.
func testClock(t *testing.T, s *Store) (start time.Time, set func(at time.Duration)) {
	grid := limiter.MaxResolution.Microseconds()
	us := time.Now().Add(24 * time.Hour).UnixMicro()
	start = time.UnixMicro(us - us%grid)
	var now atomic.Int64
	useTestClock(t, s, func() time.Time { return start.Add(time.Duration(now.Load())) })
	return start, func(at time.Duration) { now.Store(int64(at)) }
}

// clockedStore starts a redis-server and returns a client to it and a
// store on it on a test clock (testClock), with the clock's start and
// setter.
func clockedStore(t *testing.T) (*Store, *redis.Client, time.Time, func(at time.Duration)) {
	c := redistest.Start(t).Client()
	s := New(c, "")
	start, set := testClock(t, s)
	return s, c, start, set
}

// modelTake puts s on a test clock and returns the model's TakeAt for it.
func modelTake(t *testing.T, s *Store) storetest.TakeAt {
	setClock := testClockAt(t, s)
	return func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
		setClock(at)
		return s.Take(context.Background(), reqs, res)
	}
}

// TestCrossSlotDecisionsMatchTheRationalModel runs the reference model's
// random decisions (one to three of six buckets, each bucket of another
// identity, so of another slot) against a real 3-master Redis Cluster with
// both scripts on an injected clock: every decision spanning slots goes
// through per-slot calls and, when denied, refunds. Decision by decision,
// every figure must be what one atomic decision over all buckets gives.
func TestCrossSlotDecisionsMatchTheRationalModel(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client()
	s := New(cc, "")
	take := modelTake(t, s)
	refunds := &shaCounter{sha: s.refund.sha}
	cc.AddHook(refunds)
	slots := map[int]bool{}
	for i := 0; i < 6; i++ {
		slots[Slot(s.Key("x", fmt.Sprint("b", i)))] = true
	}
	if len(slots) < 4 {
		t.Fatalf("the model's six identities fall in only %d slots", len(slots))
	}
	storetest.RunModel(t, 7, 1500, take)
	if refunds.n.Load() < 50 {
		t.Errorf("only %d refunds ran: the run hardly exercised denials across slots", refunds.n.Load())
	}
	t.Logf("%d refund calls", refunds.n.Load())
}

// shaCounter counts the EVALSHA calls of one script, alone or pipelined.
type shaCounter struct {
	sha string
	n   atomic.Int64
}

func (h *shaCounter) count(c redis.Cmder) {
	if a := c.Args(); len(a) > 1 && c.Name() == "evalsha" && a[1] == h.sha {
		h.n.Add(1)
	}
}

func (h *shaCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *shaCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		h.count(c)
		return next(ctx, c)
	}
}
func (h *shaCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

// TestRefundUndoesACharge checks refund.lua against the Go arithmetic on an
// injected clock: a refund at the instant of the charge restores the key's
// expiry and value exactly; a refund dt later leaves the bucket missing what
// it would have missed had it never been charged (Limit.Refilled).
func TestRefundUndoesACharge(t *testing.T) {
	s, c, base, setClock := clockedStore(t)
	ctx := context.Background()
	var at time.Duration
	refund := func(key string, l limiter.Limit, cost int64) *scriptCall {
		sc := &scriptCall{script: s.refund, keys: []string{key}, args: refundArgv([]bucketArgs{{limitArgsOf(l), limiter.Take, cost}}, nil), want: 1}
		s.exec(ctx, sc)
		return sc
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rates := []string{"1", "0.5", "1/3", "7/60", "1000", "12345/7", "0.001"}
	for i := 0; i < 300; i++ {
		l := limiter.MustLimit(2+rng.Int64N(100), rates[rng.IntN(len(rates))])
		_, g := l.Units()
		r := limiter.Request{Name: "refund", ID: fmt.Sprint("r", i), Limit: l}
		key := s.Key(r.Name, r.ID)
		res := make([]limiter.Result, 1)
		// Leave the bucket part empty, then let some time pass.
		r.Cost = 1 + rng.Int64N(l.Capacity/2)
		if ok, err := s.Take(ctx, []limiter.Request{r}, res); err != nil || !ok {
			t.Fatalf("case %d: first take: %v %v", i, ok, err)
		}
		at += time.Duration(rng.Int64N(int64(res[0].ResetAfter)/2+1)) + time.Microsecond
		setClock(at)
		before, beforeTTL := c.Get(ctx, key).Val(), c.PExpireTime(ctx, key).Val()
		// Charge what fits, and read how much was missing before.
		r.Cost = 1 + rng.Int64N(res[0].Remaining) // at least capacity/2 remain
		if ok, err := s.Take(ctx, []limiter.Request{r}, res); err != nil || !ok {
			t.Fatalf("case %d: charge: %v %v", i, ok, err)
		}
		if rng.IntN(2) == 0 {
			// Same instant: exact restoration.
			if err := refund(key, l, r.Cost).err; err != nil {
				t.Fatal(err)
			}
			after, afterTTL := c.Get(ctx, key).Val(), c.PExpireTime(ctx, key).Val()
			if after != before || afterTTL != beforeTTL {
				t.Errorf("case %d (%v, cost %d): refund at the charge's instant left value %q expiry %v, want %q %v", i, l, r.Cost, after, afterTTL, before, beforeTTL)
			}
			continue
		}
		// Later: compare with the Go arithmetic from the state before.
		e, v := beforeTTL.Milliseconds(), valueV(t, before)
		atMicros := base.Add(at).UnixMicro()
		missingAt := func(us int64) int64 { // units missing at us, from the state before the charge
			m := (e*1000-us)*g - v
			return min(max(m, 0), l.CapacityUnits())
		}
		dt := 1 + rng.Int64N(2_000_000)
		want := l.Refilled(missingAt(atMicros), atMicros, atMicros+dt)
		at += time.Duration(dt) * time.Microsecond
		setClock(at)
		sc := refund(key, l, r.Cost)
		if sc.err != nil {
			t.Fatal(sc.err)
		}
		if got := sc.reply; got[0] != want {
			t.Errorf("case %d (%v, cost %d): %dµs after the charge the refund leaves %d units missing, want %d", i, l, r.Cost, dt, got[0], want)
		}
		if exists := c.Exists(ctx, key).Val() == 1; exists != (want > 0) {
			t.Errorf("case %d: key exists = %v with %d units missing", i, exists, want)
		}
	}
}

// valueV reads v, the part of a millisecond, from a bucket's value (see
// bucket.lua: five little-endian doubles E, v, C, K, G).
func valueV(t *testing.T, s string) int64 {
	t.Helper()
	if len(s) != 40 {
		t.Fatalf("bucket value %x: %d bytes, want 40", s, len(s))
	}
	return int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[8:16]))))
}

// TestThePreviousEncodingIsReadOnce: a key written by an earlier Floodgate
// (its value v alone, an integer, the full instant's millisecond in its
// expiry) is read as it meant, and rewritten in the current encoding.
func TestThePreviousEncodingIsReadOnce(t *testing.T) {
	s, c, now, _ := clockedStore(t)
	ctx := context.Background()
	l := limiter.MustLimit(10, "1") // K = 10⁶, G = 1: one tick a microsecond
	key := s.Key("old", "a")
	// Full 3.5 s from now: E = now + 4000 ms, v = 500 ms of ticks.
	if err := c.Set(ctx, key, 500_000, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpireAt(ctx, key, now.Add(4*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	res := make([]limiter.Result, 1)
	ok, err := s.Take(ctx, []limiter.Request{{Name: "old", ID: "a", Limit: l, Cost: 1}}, res)
	if err != nil || !ok {
		t.Fatalf("take: %v %v", ok, err)
	}
	// 3.5 tokens missing before, 4.5 after: 5 remain, full in 4.5 s.
	if res[0].Remaining != 5 || res[0].ResetAfter != 4500*time.Millisecond {
		t.Errorf("after one token: %+v, want 5 remaining, full in 4.5s", res[0])
	}
	if v := c.Get(ctx, key).Val(); len(v) != 40 {
		t.Errorf("the key was not rewritten in the current encoding: %x", v)
	}
}

// TestLeasedReplicasNeverAdmitMoreThanTheBucketInRedis is the conformance
// suite's invariant of leases (storetest.RunReplicas) through the real
// script on an injected clock: three replicas leasing one bucket never
// admit more than it allows, and not less than 97% of what the same
// callers get without leases.
func TestLeasedReplicasNeverAdmitMoreThanTheBucketInRedis(t *testing.T) {
	srv := redistest.Start(t)
	run := func(prefix string, replica storetest.Replica) int64 {
		return storetest.RunReplicas(t, modelTake(t, New(srv.Client(), prefix)), replica)
	}
	leased := run("leased:", func(base limiter.Store, clock limiter.Clock, _ int) limiter.Store {
		return lease.New(base, lease.Options{Clock: clock})
	})
	exact := run("exact:", func(base limiter.Store, _ limiter.Clock, _ int) limiter.Store { return base })
	t.Logf("%d admitted with leases, %d without", leased, exact)
	if leased < exact*97/100 {
		t.Errorf("%d admitted with leases, %d without", leased, exact)
	}
}
