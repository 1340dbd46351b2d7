package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
)

// RunAdjustQuota is the conformance suite of limiter.Adjuster on calendar
// quotas: a read says the current window's state, an add gives that many
// more requests in the window (beyond the limit if need be), a set leaves
// exactly its number to take, a reset empties the window, the window is
// the one the store's clock is in (as for decisions), and a quota is
// adjusted apart from the token bucket of the same name and identity.
// h's stores must implement limiter.Adjuster.
func RunAdjustQuota(t *testing.T, h QuotaHarness) {
	ctx := context.Background()
	// 3 a month from the 15th, in Berlin.
	q := mustCalendar(3, calendar.Month, "Europe/Berlin", 15)
	nominal := limiter.MustLimit(q.Limit, "1")
	start := func(t *testing.T, at string) (limiter.Store, limiter.Adjuster, func(string) time.Time) {
		s, set := h.Start(t, parseTime(t, at))
		adj, ok := s.(limiter.Adjuster)
		if !ok {
			t.Fatalf("%T does not implement limiter.Adjuster", s)
		}
		return s, adj, func(at string) time.Time { v := parseTime(t, at); set(v); return v }
	}
	req := limiter.Request{Name: "adjust-q", ID: "a", Limit: nominal, Quota: q}
	take := func(t *testing.T, s limiter.Store, kind limiter.Kind, cost int64) bool {
		t.Helper()
		r := req
		r.Kind, r.Cost = kind, cost
		ok, err := s.Take(ctx, []limiter.Request{r}, make([]limiter.Result, 1))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	do := func(t *testing.T, adj limiter.Adjuster, op limiter.Op, n int64) limiter.Balance {
		t.Helper()
		b, err := adj.Adjust(ctx, req, limiter.Adjustment{Op: op, N: n})
		if err != nil {
			t.Fatalf("%v %d: %v", op, n, err)
		}
		return b
	}
	// want checks a balance read at at: its remaining and debt, and that it
	// is the window [from, to).
	want := func(t *testing.T, what string, b limiter.Balance, at time.Time, remaining, debt int64, from, to string) {
		t.Helper()
		s, e := parseTime(t, from), parseTime(t, to)
		if !b.Quota || b.Limit != q.Limit || b.Remaining != remaining || b.Debt != debt {
			t.Fatalf("%s: got %+v, want a quota's remaining %d, debt %d of %d", what, b, remaining, debt, q.Limit)
		}
		if !b.WindowStart.Equal(s) || !b.WindowEnd.Equal(e) {
			t.Fatalf("%s: window %v to %v, want %v to %v", what, b.WindowStart, b.WindowEnd, s, e)
		}
		if got := at.Add(b.ResetAfter); got.After(e) || got.Before(e.Add(-h.Slack)) {
			t.Fatalf("%s: reset after %v lands on %v, want %v", what, b.ResetAfter, got, e)
		}
	}
	const (
		feb, mar, apr = "2028-02-15T00:00:00+01:00", "2028-03-15T00:00:00+01:00", "2028-04-15T00:00:00+02:00"
		in            = "2028-02-20T12:00:00+01:00"
	)

	t.Run("a read of a window never counted is the whole limit and spends nothing", func(t *testing.T) {
		s, adj, set := start(t, in)
		at := set(in)
		for i := 0; i < 2; i++ {
			want(t, "read", do(t, adj, limiter.OpRead, 0), at, 3, 0, feb, mar)
		}
		if !take(t, s, limiter.Take, 3) {
			t.Fatal("the reads spent from the quota: a take of its limit was denied")
		}
		want(t, "read after 3", do(t, adj, limiter.OpRead, 0), at, 0, 0, feb, mar)
	})
	t.Run("an add gives that many more requests in the window, beyond the limit", func(t *testing.T) {
		s, adj, set := start(t, in)
		at := set(in)
		take(t, s, limiter.Take, 3)
		if take(t, s, limiter.Take, 1) {
			t.Fatal("a spent quota allowed a take")
		}
		want(t, "add 5", do(t, adj, limiter.OpAdd, 5), at, 5, 0, feb, mar)
		for i := 0; i < 5; i++ {
			if !take(t, s, limiter.Take, 1) {
				t.Fatalf("take %d of the 5 added was denied", i+1)
			}
		}
		if take(t, s, limiter.Take, 1) {
			t.Fatal("a sixth take passed on 5 added")
		}
		want(t, "add 500 on a spent window", do(t, adj, limiter.OpAdd, 500), at, 500, 0, feb, mar)
		// 400 more requests (a request's cost is still at most the limit).
		for i := 0; i < 400; i += 3 {
			if !take(t, s, limiter.Take, min(3, 400-int64(i))) {
				t.Fatalf("a take after %d of the 500 added was denied", i)
			}
		}
		if take(t, s, limiter.Take, 4) {
			t.Fatal("a take of 4, above the limit, passed on a credit")
		}
		// A refund gives back what was counted: none of a credit's.
		take(t, s, limiter.Refund, 50)
		want(t, "refund on a credit", do(t, adj, limiter.OpRead, 0), at, 100, 0, feb, mar)
		want(t, "add max", do(t, adj, limiter.OpAdd, 1<<63-1), at, 3+limiter.MaxQuotaCredit, 0, feb, mar)
	})
	t.Run("an added credit ends with its window", func(t *testing.T) {
		s, adj, set := start(t, in)
		at := set(in)
		want(t, "add 10", do(t, adj, limiter.OpAdd, 10), at, 13, 0, feb, mar)
		at = set("2028-03-14T23:59:59+01:00")
		want(t, "the window's last second", do(t, adj, limiter.OpRead, 0), at, 13, 0, feb, mar)
		at = set(mar)
		want(t, "the next window", do(t, adj, limiter.OpRead, 0), at, 3, 0, mar, apr)
		if !take(t, s, limiter.Take, 3) || take(t, s, limiter.Take, 1) {
			t.Fatal("the next window did not pay exactly its limit")
		}
	})
	t.Run("a negative add counts as a charge, up to twice the limit", func(t *testing.T) {
		s, adj, set := start(t, in)
		at := set(in)
		want(t, "add -2", do(t, adj, limiter.OpAdd, -2), at, 1, 0, feb, mar)
		want(t, "add -1e18", do(t, adj, limiter.OpAdd, -1e18), at, 0, 3, feb, mar)
		if take(t, s, limiter.Take, 0) {
			t.Fatal("a look passed on a quota over its limit")
		}
		want(t, "add 1000 on a count of 6", do(t, adj, limiter.OpAdd, 1000), at, 997, 0, feb, mar)
		want(t, "add -1e18 on a credit", do(t, adj, limiter.OpAdd, -1e18), at, 0, 3, feb, mar)
	})
	t.Run("a set leaves exactly its number to take", func(t *testing.T) {
		s, adj, set := start(t, in)
		at := set(in)
		want(t, "set 1", do(t, adj, limiter.OpSet, 1), at, 1, 0, feb, mar)
		if !take(t, s, limiter.Take, 1) || take(t, s, limiter.Take, 1) {
			t.Fatal("a quota set to 1 did not pay exactly 1")
		}
		want(t, "set 10", do(t, adj, limiter.OpSet, 10), at, 10, 0, feb, mar)
		want(t, "set -2", do(t, adj, limiter.OpSet, -2), at, 0, 2, feb, mar)
		want(t, "set 0", do(t, adj, limiter.OpSet, 0), at, 0, 0, feb, mar)
		if take(t, s, limiter.Take, 1) {
			t.Fatal("a quota set to 0 allowed a take")
		}
		for _, n := range []int64{-4, 3 + limiter.MaxQuotaCredit + 1} {
			_, err := adj.Adjust(ctx, req, limiter.Adjustment{Op: limiter.OpSet, N: n})
			if !errors.Is(err, limiter.ErrAdjustment) {
				t.Fatalf("set %d: got %v, want ErrAdjustment", n, err)
			}
		}
		want(t, "read after the refused sets", do(t, adj, limiter.OpRead, 0), at, 0, 0, feb, mar)
	})
	t.Run("a reset empties the window", func(t *testing.T) {
		s, adj, set := start(t, in)
		at := set(in)
		take(t, s, limiter.Take, 3)
		want(t, "reset", do(t, adj, limiter.OpReset, 0), at, 3, 0, feb, mar)
		if !take(t, s, limiter.Take, 3) {
			t.Fatal("a reset quota did not pay its limit")
		}
	})
	t.Run("a quota is adjusted apart from the bucket of its name and identity", func(t *testing.T) {
		s, adj, set := start(t, in)
		at := set(in)
		bucket := limiter.Request{Name: req.Name, ID: req.ID, Limit: limiter.MustLimit(3, "1/3600")}
		if ok, err := s.Take(ctx, []limiter.Request{{Name: bucket.Name, ID: bucket.ID, Limit: bucket.Limit, Cost: 2}}, make([]limiter.Result, 1)); err != nil || !ok {
			t.Fatalf("the bucket's take: %v, %v", ok, err)
		}
		want(t, "the quota's set", do(t, adj, limiter.OpSet, 0), at, 0, 0, feb, mar)
		b, err := adj.Adjust(ctx, bucket, limiter.Adjustment{Op: limiter.OpRead})
		if err != nil || b.Quota || b.Remaining != 1 {
			t.Fatalf("the bucket after the quota's set: %+v, %v; want 1 left", b, err)
		}
	})
}
