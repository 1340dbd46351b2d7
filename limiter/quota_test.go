package limiter_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

type hours struct{}

func (hours) Window(t time.Time) (time.Time, time.Time) {
	s := t.Truncate(time.Hour)
	return s, s.Add(time.Hour)
}

// Count's arithmetic at its bounds: an add beyond the limit is a credit
// bounded by MaxQuotaCredit, never an overflow; a refund leaves a credit
// as it is; CheckQuota refuses what Count cannot take.
func TestQuotaCountAtItsBounds(t *testing.T) {
	q := &limiter.Quota{Limit: 100, Windows: hours{}}
	for _, c := range []struct {
		used int64
		a    limiter.Adjustment
		want int64
	}{
		{100, limiter.Adjustment{Op: limiter.OpAdd, N: 500}, -400},
		{0, limiter.Adjustment{Op: limiter.OpAdd, N: math.MaxInt64}, -limiter.MaxQuotaCredit},
		{200, limiter.Adjustment{Op: limiter.OpAdd, N: math.MaxInt64}, -limiter.MaxQuotaCredit},
		{-limiter.MaxQuotaCredit, limiter.Adjustment{Op: limiter.OpAdd, N: 1}, -limiter.MaxQuotaCredit},
		{-50, limiter.Adjustment{Op: limiter.OpAdd, N: -math.MaxInt64}, 200},
		{30, limiter.Adjustment{Op: limiter.OpAdd, N: -20}, 50},
		{30, limiter.Adjustment{Op: limiter.OpSet, N: 500}, -400},
		{30, limiter.Adjustment{Op: limiter.OpSet, N: -100}, 200},
		{30, limiter.Adjustment{Op: limiter.OpReset}, 0},
		{30, limiter.Adjustment{Op: limiter.OpRead}, 30},
	} {
		if err := c.a.CheckQuota(q); err != nil {
			t.Fatalf("%v %d: %v", c.a.Op, c.a.N, err)
		}
		if got := q.Count(c.used, c.a); got != c.want {
			t.Errorf("count %d, %v %d: got %d, want %d", c.used, c.a.Op, c.a.N, got, c.want)
		}
	}
	if got := q.Apply(-40, limiter.Refund, 10); got != -40 {
		t.Errorf("a refund on a credit of 40: count %d, want -40", got)
	}
	if got := q.Apply(5, limiter.Refund, 10); got != 0 {
		t.Errorf("a refund of 10 on a count of 5: %d, want 0", got)
	}
	if got := q.Apply(-limiter.MaxQuotaCredit, limiter.Charge, math.MaxInt64); got != 200 {
		t.Errorf("a charge of MaxInt64 on the largest credit: %d, want 200", got)
	}
	if r := q.Result(-400, limiter.Take, 1, true, time.Minute, time.Hour); r.Remaining != 500 || r.InDebt {
		t.Errorf("the result of a credit of 400: %+v, want 500 left", r)
	}
	for _, a := range []limiter.Adjustment{{Op: limiter.OpSet, N: 100 + limiter.MaxQuotaCredit + 1}, {Op: limiter.OpSet, N: -101}, {Op: limiter.OpAdd, N: math.MinInt64}, {Op: 9}} {
		if err := a.CheckQuota(q); !errors.Is(err, limiter.ErrAdjustment) {
			t.Errorf("%v %d: got %v, want ErrAdjustment", a.Op, a.N, err)
		}
	}
}
