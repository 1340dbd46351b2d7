package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// RunAdjust is the conformance suite of limiter.Adjuster: reads spend
// nothing and write nothing, an add is capped at the capacity as a refund
// is (a negative add goes into debt as a charge does), a set holds exactly
// its tokens, a reset makes the bucket full (no state held), every one
// atomic with the decisions on the bucket, and a bucket held under another
// limit read as a decision would convert it. h.Store must implement
// limiter.Adjuster. The limits refill slowly (a token an hour), so a store
// on a real clock reads what an injected one would.
func RunAdjust(t *testing.T, h Harness) {
	adj, ok := h.Store.(limiter.Adjuster)
	if !ok {
		t.Fatalf("%T does not implement limiter.Adjuster", h.Store)
	}
	ctx := context.Background()
	l := limiter.MustLimit(10, "1/3600")
	take := func(t *testing.T, id string, cost int64) bool {
		t.Helper()
		res := make([]limiter.Result, 1)
		ok, err := h.Store.Take(ctx, []limiter.Request{{Name: "adjust", ID: id, Limit: l, Cost: cost}}, res)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	do := func(t *testing.T, id string, a limiter.Adjustment, lim limiter.Limit) limiter.Balance {
		t.Helper()
		b, err := adj.Adjust(ctx, limiter.Request{Name: "adjust", ID: id, Limit: lim}, a)
		if err != nil {
			t.Fatalf("%v %d: %v", a.Op, a.N, err)
		}
		return b
	}
	want := func(t *testing.T, what string, b limiter.Balance, remaining, debt int64) {
		t.Helper()
		if b.Limit != l.Capacity || b.Remaining != remaining || b.Debt != debt {
			t.Fatalf("%s: got %+v, want remaining %d, debt %d of %d", what, b, remaining, debt, l.Capacity)
		}
	}
	read := limiter.Adjustment{Op: limiter.OpRead}

	t.Run("a read of a bucket never seen is full and creates nothing", func(t *testing.T) {
		b := do(t, "unseen", read, l)
		want(t, "read", b, 10, 0)
		if b.ResetAfter != 0 || h.Exists(t, "adjust", "unseen") {
			t.Fatalf("reset after %v, held %v", b.ResetAfter, h.Exists(t, "adjust", "unseen"))
		}
	})
	t.Run("a read spends nothing", func(t *testing.T) {
		if !take(t, "r", 7) {
			t.Fatal("the first take of 7 was denied")
		}
		for i := 0; i < 3; i++ {
			b := do(t, "r", read, l)
			want(t, "read", b, 3, 0)
			if b.ResetAfter < 7*time.Hour-time.Minute || b.ResetAfter > 7*time.Hour {
				t.Fatalf("reset after %v, want about 7h", b.ResetAfter)
			}
		}
		if !take(t, "r", 3) || take(t, "r", 1) {
			t.Fatal("the reads spent tokens: 3 should pass, then 1 be denied")
		}
	})
	t.Run("an add gives tokens up to the capacity, as a refund", func(t *testing.T) {
		take(t, "a", 10)
		if take(t, "a", 1) {
			t.Fatal("an empty bucket allowed a take")
		}
		want(t, "add 4", do(t, "a", limiter.Adjustment{Op: limiter.OpAdd, N: 4}, l), 4, 0)
		if !take(t, "a", 4) {
			t.Fatal("the 4 tokens added did not pay a take of 4")
		}
		want(t, "add 1000", do(t, "a", limiter.Adjustment{Op: limiter.OpAdd, N: 1000}, l), 10, 0)
		if h.Exists(t, "adjust", "a") {
			t.Fatal("a bucket filled by an add is still held")
		}
		want(t, "add max", do(t, "a", limiter.Adjustment{Op: limiter.OpAdd, N: 1<<63 - 1}, l), 10, 0)
	})
	t.Run("a negative add takes tokens into a bounded debt, as a charge", func(t *testing.T) {
		want(t, "add -4", do(t, "n", limiter.Adjustment{Op: limiter.OpAdd, N: -4}, l), 6, 0)
		want(t, "add -11", do(t, "n", limiter.Adjustment{Op: limiter.OpAdd, N: -11}, l), 0, 5)
		if take(t, "n", 0) {
			t.Fatal("a look passed on a bucket in debt")
		}
		want(t, "add -1e18", do(t, "n", limiter.Adjustment{Op: limiter.OpAdd, N: -1e18}, l), 0, 10)
		want(t, "add 12", do(t, "n", limiter.Adjustment{Op: limiter.OpAdd, N: 12}, l), 2, 0)
	})
	t.Run("a set holds exactly its tokens", func(t *testing.T) {
		want(t, "set 0", do(t, "s", limiter.Adjustment{Op: limiter.OpSet, N: 0}, l), 0, 0)
		if take(t, "s", 1) {
			t.Fatal("a bucket set to 0 allowed a take")
		}
		want(t, "set 4", do(t, "s", limiter.Adjustment{Op: limiter.OpSet, N: 4}, l), 4, 0)
		if !take(t, "s", 4) || take(t, "s", 1) {
			t.Fatal("a bucket set to 4 did not pay exactly 4")
		}
		want(t, "set -3", do(t, "s", limiter.Adjustment{Op: limiter.OpSet, N: -3}, l), 0, 3)
		want(t, "set 10", do(t, "s", limiter.Adjustment{Op: limiter.OpSet, N: 10}, l), 10, 0)
		if h.Exists(t, "adjust", "s") {
			t.Fatal("a bucket set to its capacity is still held")
		}
	})
	t.Run("a set beyond the capacity or the debt's bound is refused and changes nothing", func(t *testing.T) {
		take(t, "x", 2)
		for _, n := range []int64{11, -11} {
			_, err := adj.Adjust(ctx, limiter.Request{Name: "adjust", ID: "x", Limit: l}, limiter.Adjustment{Op: limiter.OpSet, N: n})
			if !errors.Is(err, limiter.ErrAdjustment) {
				t.Fatalf("set %d: got %v, want ErrAdjustment", n, err)
			}
		}
		want(t, "read", do(t, "x", read, l), 8, 0)
	})
	t.Run("a reset makes the bucket full and holds nothing", func(t *testing.T) {
		take(t, "z", 9)
		want(t, "reset", do(t, "z", limiter.Adjustment{Op: limiter.OpReset}, l), 10, 0)
		if h.Exists(t, "adjust", "z") {
			t.Fatal("a reset bucket is still held")
		}
		if !take(t, "z", 10) {
			t.Fatal("a reset bucket did not pay its capacity")
		}
	})
	t.Run("a bucket held under another limit reads as a decision converts it", func(t *testing.T) {
		take(t, "c", 4) // 6 left of 10
		small := limiter.MustLimit(5, "1/3600")
		b := do(t, "c", read, small)
		if b.Limit != 5 || b.Remaining != 5 {
			t.Fatalf("read under capacity 5: %+v, want 5 of 5", b)
		}
		want(t, "read under the old limit", do(t, "c", read, l), 6, 0)
	})
	t.Run("an empty name or identity is refused", func(t *testing.T) {
		if _, err := adj.Adjust(ctx, limiter.Request{Name: "adjust", Limit: l}, read); !errors.Is(err, limiter.ErrKey) {
			t.Fatalf("got %v, want ErrKey", err)
		}
	})
}
