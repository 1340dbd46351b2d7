package adminapi

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

type hours struct{}

func (hours) Window(t time.Time) (time.Time, time.Time) {
	s := t.Truncate(time.Hour)
	return s, s.Add(time.Hour)
}

// A quota's verdict is its count against its limit, retried at the
// window's end; a cost above the limit never passes (no retry); a charge
// overdraws past the limit.
func TestAQuotasVerdict(t *testing.T) {
	q := &limiter.Quota{Limit: 5, Windows: hours{}}
	req := func(cost int64) limiter.Request {
		return limiter.Request{Name: "p", ID: "a", Limit: limiter.MustLimit(5, "1"), Quota: q, Cost: cost}
	}
	read := func(count int64) limiter.Balance {
		return q.Balance(count, time.Unix(0, 0), time.Unix(3600, 0), time.Unix(3600-90, 0))
	}
	for _, c := range []struct {
		count, cost int64
		pays        bool
		retry       int64
	}{
		{0, 5, true, 0},
		{3, 2, true, 0},
		{3, 3, false, 90},
		{5, 0, false, 90}, // a look needs one left
		{-100, 5, true, 0},
		{-100, 6, false, 0}, // above the limit, whatever the credit
	} {
		pays, retry := verdict(req(c.cost), read(c.count))
		if pays != c.pays || retry != c.retry {
			t.Errorf("count %d, cost %d: pays %v, retry %ds; want %v, %ds", c.count, c.cost, pays, retry, c.pays, c.retry)
		}
	}
	if !overdraws(req(3), read(3)) || overdraws(req(2), read(3)) {
		t.Error("a charge of 3 on a count of 3 of 5 overdraws, one of 2 does not")
	}
}
