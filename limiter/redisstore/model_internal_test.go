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
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestScriptMatchesTheRationalModel runs the real script in a real Redis with
// one line changed: TIME comes from the last two arguments instead of the
// server's clock. Everything else, the encoding of state in the key's expiry
// and value included, is what production runs; the reference model checks it
// decision by decision.
func TestScriptMatchesTheRationalModel(t *testing.T) {
	const timeLine = "local t = redis.call('TIME')"
	if strings.Count(scriptSource, timeLine) != 1 {
		t.Fatalf("the script no longer reads the clock in exactly one place (%q)", timeLine)
	}
	src := strings.Replace(scriptSource, timeLine, "local t = {ARGV[#ARGV - 1], ARGV[#ARGV]}", 1)
	srv := redistest.Start(t)
	s := New(srv.Client(), "")
	s.script = redis.NewScript(src)
	// Keys must not expire by Redis' real clock before the injected one says
	// so: start the injected clock a day ahead of it.
	base := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	for seed := uint64(1); seed <= 2; seed++ {
		storetest.RunModel(t, seed, 2500, func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
			now := base.Add(at)
			return s.take(context.Background(), reqs, res, now.Unix(), now.Nanosecond()/1000)
		})
	}
}

// withInjectedClock replaces the TIME call of a script's source by the last
// two arguments, as TestScriptMatchesTheRationalModel does.
func withInjectedClock(t *testing.T, src string) *redis.Script {
	t.Helper()
	const timeLine = "local t = redis.call('TIME')"
	if strings.Count(src, timeLine) != 1 {
		t.Fatalf("a script no longer reads the clock in exactly one place (%q)", timeLine)
	}
	return redis.NewScript(strings.Replace(src, timeLine, "local t = {ARGV[#ARGV - 1], ARGV[#ARGV]}", 1))
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
	s.script = withInjectedClock(t, scriptSource)
	s.refund = withInjectedClock(t, refundSource)
	refunds := &shaCounter{sha: s.refund.Hash()}
	cc.AddHook(refunds)
	base := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	slots := map[int]bool{}
	for i := 0; i < 6; i++ {
		slots[Slot(s.Key("x", fmt.Sprint("b", i)))] = true
	}
	if len(slots) < 4 {
		t.Fatalf("the model's six identities fall in only %d slots", len(slots))
	}
	storetest.RunModel(t, 7, 1500, func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
		now := base.Add(at)
		return s.take(context.Background(), reqs, res, now.Unix(), now.Nanosecond()/1000)
	})
	if refunds.n.Load() < 50 {
		t.Errorf("only %d refunds ran: the run hardly exercised denials across slots", refunds.n.Load())
	}
	t.Logf("%d refund calls", refunds.n.Load())
}

// shaCounter counts the pipelined EVALSHA calls of one script.
type shaCounter struct {
	sha string
	n   atomic.Int64
}

func (h *shaCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *shaCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *shaCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); len(a) > 1 && c.Name() == "evalsha" && a[1] == h.sha {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestRefundUndoesACharge checks refund.lua against the Go arithmetic on an
// injected clock: a refund at the instant of the charge restores the key's
// expiry and value exactly; a refund dt later leaves the bucket missing what
// it would have missed had it never been charged (Limit.Refill).
func TestRefundUndoesACharge(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, "")
	s.script = withInjectedClock(t, scriptSource)
	refund := withInjectedClock(t, refundSource)
	ctx := context.Background()
	base := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	clock := func(at time.Duration) []any {
		now := base.Add(at)
		return []any{now.Unix(), now.Nanosecond() / 1000}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rates := []string{"1", "0.5", "1/3", "7/60", "1000", "12345/7", "0.001"}
	at := time.Duration(0)
	for i := 0; i < 300; i++ {
		l := limiter.MustLimit(2+rng.Int64N(100), rates[rng.IntN(len(rates))])
		k, g := l.Units()
		r := limiter.Request{Name: "refund", ID: fmt.Sprint("r", i), Limit: l}
		key := s.Key(r.Name, r.ID)
		res := make([]limiter.Result, 1)
		// Leave the bucket part empty, then let some time pass.
		r.Cost = 1 + rng.Int64N(l.Capacity/2)
		if ok, err := s.take(ctx, []limiter.Request{r}, res, clock(at)...); err != nil || !ok {
			t.Fatalf("case %d: first take: %v %v", i, ok, err)
		}
		at += time.Duration(rng.Int64N(int64(res[0].ResetAfter)/2+1)) + time.Microsecond
		before, beforeTTL := c.Get(ctx, key).Val(), c.PExpireTime(ctx, key).Val()
		// Charge what fits, and read how much was missing before.
		r.Cost = 1 + rng.Int64N(res[0].Remaining) // at least capacity/2 remain
		if ok, err := s.take(ctx, []limiter.Request{r}, res, clock(at)...); err != nil || !ok {
			t.Fatalf("case %d: charge: %v %v", i, ok, err)
		}
		args := append([]any{l.Capacity, k, g, r.Cost}, clock(at)...)
		if rng.IntN(2) == 0 {
			// Same instant: exact restoration.
			if err := refund.Run(ctx, c, []string{key}, args...).Err(); err != nil {
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
		want := l.Refill(missingAt(atMicros), dt)
		args = append([]any{l.Capacity, k, g, r.Cost}, clock(at+time.Duration(dt)*time.Microsecond)...)
		got, err := refund.Run(ctx, c, []string{key}, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != want {
			t.Errorf("case %d (%v, cost %d): %dµs after the charge the refund leaves %d units missing, want %d", i, l, r.Cost, dt, got[0], want)
		}
		if exists := c.Exists(ctx, key).Val() == 1; exists != (want > 0) {
			t.Errorf("case %d: key exists = %v with %d units missing", i, exists, want)
		}
		at += time.Duration(dt) * time.Microsecond
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
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, "")
	s.script = withInjectedClock(t, scriptSource)
	ctx := context.Background()
	now := time.Now().Add(24 * time.Hour).Truncate(time.Second)
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
	ok, err := s.take(ctx, []limiter.Request{{Name: "old", ID: "a", Limit: l, Cost: 1}}, res, now.Unix(), now.Nanosecond()/1000)
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
