package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
)

// QuotaHarness adapts a store to RunQuota.
type QuotaHarness struct {
	// Start returns a store whose clock reads at, and a function putting
	// that clock at a later instant. Each case starts its own (a store of
	// its own, or its own key prefix on a shared server).
	Start func(t *testing.T, at time.Time) (store limiter.Store, set func(at time.Time))
	// Slack is how much earlier than expected a reported instant may fall:
	// the time a store's clock runs on between set and the decision (a
	// real redis-server under a faked clock); zero on an injected clock.
	Slack time.Duration
}

// quotaStep is one decision of a quota case: at (RFC 3339) sets the clock
// first ("" leaves it where it is), the buckets decided together, and what
// the decision and each bucket must say.
type quotaStep struct {
	at      string
	reqs    []quotaReq
	allowed bool
	want    []quotaWant
}

type quotaReq struct {
	id    string
	quota *limiter.Quota // nil: a token bucket of limit
	limit limiter.Limit
	cost  int64
	kind  limiter.Kind
}

// quotaWant is what one bucket reports: reset and retry are the instants
// (RFC 3339) ResetAfter and RetryAfter land on, counted from the step's at
// ("" for a RetryAfter of zero, or, for reset, unchecked).
type quotaWant struct {
	remaining     int64
	reset, retry  string
	window        time.Duration
	debt, exceeds bool
}

// mustCalendar builds a quota of limit over a calendar; it panics on a
// calendar New refuses (the table's own mistake).
func mustCalendar(limit int64, period calendar.Period, zone string, anchor int) *limiter.Quota {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		panic(err)
	}
	c, err := calendar.New(period, loc, anchor)
	if err != nil {
		panic(err)
	}
	return &limiter.Quota{Limit: limit, Windows: c}
}

const day = 24 * time.Hour

var quotaCases = func() []struct {
	name  string
	steps []quotaStep
} {
	berlin := mustCalendar(3, calendar.Month, "Europe/Berlin", 15)
	take := func(q *limiter.Quota, cost int64) []quotaReq { return []quotaReq{{id: "a", quota: q, cost: cost}} }
	denied := func(remaining int64, retry string, window time.Duration) []quotaWant {
		return []quotaWant{{remaining: remaining, reset: retry, retry: retry, window: window}}
	}
	hourly := mustCalendar(5, calendar.Hour, "UTC", 0)
	weekly := mustCalendar(10, calendar.Week, "UTC", 1)
	daily := mustCalendar(5, calendar.Day, "UTC", 0)
	two := mustCalendar(2, calendar.Day, "UTC", 0)
	one := mustCalendar(1, calendar.Day, "UTC", 0)
	yearly := mustCalendar(1, calendar.Year, "Europe/Berlin", 1)
	bucket := limiter.MustLimit(5, "1/60")
	return []struct {
		name  string
		steps []quotaStep
	}{
		{"a month from the 15th in Berlin denies after its limit until the 15th's midnight, across a leap day and a change of summer time", []quotaStep{
			{at: "2028-02-20T12:00:00+01:00", reqs: take(berlin, 1), allowed: true, want: []quotaWant{{remaining: 2, reset: "2028-03-15T00:00:00+01:00", window: 29 * day}}},
			{reqs: take(berlin, 1), allowed: true, want: []quotaWant{{remaining: 1, reset: "2028-03-15T00:00:00+01:00", window: 29 * day}}},
			{reqs: take(berlin, 1), allowed: true, want: []quotaWant{{remaining: 0, reset: "2028-03-15T00:00:00+01:00", window: 29 * day}}},
			{reqs: take(berlin, 1), want: denied(0, "2028-03-15T00:00:00+01:00", 29*day)},
			{at: "2028-02-29T23:59:59+01:00", reqs: take(berlin, 1), want: denied(0, "2028-03-15T00:00:00+01:00", 29*day)},
			{at: "2028-03-14T23:59:58.5+01:00", reqs: take(berlin, 1), want: denied(0, "2028-03-15T00:00:00+01:00", 29*day)},
			{at: "2028-03-15T00:00:00+01:00", reqs: take(berlin, 1), allowed: true, want: []quotaWant{{remaining: 2, reset: "2028-04-15T00:00:00+02:00", window: 31*day - time.Hour}}},
			{at: "2028-03-26T03:30:00+02:00", reqs: take(berlin, 2), allowed: true, want: []quotaWant{{remaining: 0, reset: "2028-04-15T00:00:00+02:00", window: 31*day - time.Hour}}},
			{reqs: take(berlin, 1), want: denied(0, "2028-04-15T00:00:00+02:00", 31*day-time.Hour)},
			{at: "2028-04-15T00:00:00+02:00", reqs: take(berlin, 3), allowed: true, want: []quotaWant{{remaining: 0, reset: "2028-05-15T00:00:00+02:00", window: 30 * day}}},
		}},
		{"a quota and a bucket decide all or nothing", []quotaStep{
			{at: "2028-06-01T10:00:00Z", reqs: []quotaReq{{id: "a", quota: one, cost: 1}, {id: "b", limit: bucket, cost: 1}}, allowed: true,
				want: []quotaWant{{remaining: 0, reset: "2028-06-02T00:00:00Z", window: day}, {remaining: 4}}},
			{reqs: []quotaReq{{id: "a", quota: one, cost: 1}, {id: "b", limit: bucket, cost: 1}},
				want: []quotaWant{{remaining: 0, reset: "2028-06-02T00:00:00Z", retry: "2028-06-02T00:00:00Z", window: day}, {remaining: 4}}},
			{reqs: []quotaReq{{id: "b", limit: bucket, cost: 1}}, allowed: true, want: []quotaWant{{remaining: 3}}},
		}},
		{"a charge takes a quota over its limit, and the next window starts fresh", []quotaStep{
			{at: "2028-06-01T10:15:00Z", reqs: []quotaReq{{id: "a", quota: hourly, cost: 8, kind: limiter.Charge}}, allowed: true,
				want: []quotaWant{{remaining: 0, reset: "2028-06-01T11:00:00Z", retry: "2028-06-01T11:00:00Z", window: time.Hour, debt: true}}},
			{reqs: take(hourly, 0), want: []quotaWant{{remaining: 0, reset: "2028-06-01T11:00:00Z", retry: "2028-06-01T11:00:00Z", window: time.Hour, debt: true}}},
			{reqs: take(hourly, 1), want: []quotaWant{{remaining: 0, reset: "2028-06-01T11:00:00Z", retry: "2028-06-01T11:00:00Z", window: time.Hour, debt: true}}},
			{at: "2028-06-01T11:00:00Z", reqs: take(hourly, 1), allowed: true, want: []quotaWant{{remaining: 4, reset: "2028-06-01T12:00:00Z", window: time.Hour}}},
		}},
		{"a refund gives tokens back within the window, up to the limit", []quotaStep{
			{at: "2028-06-01T10:00:00Z", reqs: take(weekly, 4), allowed: true, want: []quotaWant{{remaining: 6, reset: "2028-06-05T00:00:00Z", window: 7 * day}}},
			{reqs: []quotaReq{{id: "a", quota: weekly, cost: 3, kind: limiter.Refund}}, allowed: true, want: []quotaWant{{remaining: 9, reset: "2028-06-05T00:00:00Z", window: 7 * day}}},
			{reqs: []quotaReq{{id: "a", quota: weekly, cost: 50, kind: limiter.Refund}}, allowed: true, want: []quotaWant{{remaining: 10, reset: "2028-06-05T00:00:00Z", window: 7 * day}}},
		}},
		{"a cost above the limit can never pass", []quotaStep{
			{at: "2028-06-01T10:00:00Z", reqs: take(daily, 6), want: []quotaWant{{remaining: 5, reset: "2028-06-02T00:00:00Z", window: day, exceeds: true}}},
			{reqs: take(daily, 5), allowed: true, want: []quotaWant{{remaining: 0, reset: "2028-06-02T00:00:00Z", window: day}}},
		}},
		{"a look passes while a token is left", []quotaStep{
			{at: "2028-06-01T10:00:00Z", reqs: take(two, 0), allowed: true, want: []quotaWant{{remaining: 2, reset: "2028-06-02T00:00:00Z", window: day}}},
			{reqs: take(two, 2), allowed: true, want: []quotaWant{{remaining: 0, reset: "2028-06-02T00:00:00Z", window: day}}},
			{reqs: take(two, 0), want: denied(0, "2028-06-02T00:00:00Z", day)},
		}},
		{"callers are counted apart", []quotaStep{
			{at: "2028-06-01T10:00:00Z", reqs: take(one, 1), allowed: true, want: []quotaWant{{remaining: 0, reset: "2028-06-02T00:00:00Z", window: day}}},
			{reqs: []quotaReq{{id: "b", quota: one, cost: 1}}, allowed: true, want: []quotaWant{{remaining: 0, reset: "2028-06-02T00:00:00Z", window: day}}},
			{reqs: take(one, 1), want: denied(0, "2028-06-02T00:00:00Z", day)},
		}},
		{"a leap year's window lasts 366 days and ends at the new year's midnight", []quotaStep{
			{at: "2028-12-31T23:59:58+01:00", reqs: take(yearly, 1), allowed: true, want: []quotaWant{{remaining: 0, reset: "2029-01-01T00:00:00+01:00", window: 366 * day}}},
			{reqs: take(yearly, 1), want: denied(0, "2029-01-01T00:00:00+01:00", 366*day)},
			{at: "2029-01-01T00:00:00+01:00", reqs: take(yearly, 1), allowed: true, want: []quotaWant{{remaining: 0, reset: "2030-01-01T00:00:00+01:00", window: 365 * day}}},
		}},
	}
}()

// RunQuota runs the calendar quota cases against h's store: fixed windows
// chosen by the store's clock, all or nothing with buckets, charges over
// the limit, refunds, and what each result says.
func RunQuota(t *testing.T, h QuotaHarness) {
	for _, c := range quotaCases {
		t.Run(c.name, func(t *testing.T) {
			var store limiter.Store
			var set func(time.Time)
			var at time.Time
			for i, st := range c.steps {
				if st.at != "" {
					at = parseTime(t, st.at)
					if store == nil {
						store, set = h.Start(t, at)
					} else {
						set(at)
					}
				}
				reqs := make([]limiter.Request, len(st.reqs))
				for j, q := range st.reqs {
					reqs[j] = limiter.Request{Name: "quota", ID: q.id, Limit: q.limit, Cost: q.cost, Kind: q.kind}
					if q.quota != nil {
						reqs[j].Name, reqs[j].Quota = "quota-q", q.quota
						reqs[j].Limit = limiter.MustLimit(q.quota.Limit, "1")
					}
				}
				res := make([]limiter.Result, len(reqs))
				allowed, err := store.Take(context.Background(), reqs, res)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if allowed != st.allowed {
					t.Errorf("step %d: allowed %v, want %v", i, allowed, st.allowed)
				}
				for j, w := range st.want {
					checkQuota(t, fmt.Sprintf("step %d, bucket %d", i, j), at, h.Slack, res[j], w)
				}
			}
		})
	}
}

func checkQuota(t *testing.T, what string, at time.Time, slack time.Duration, r limiter.Result, w quotaWant) {
	t.Helper()
	if r.Remaining != w.remaining {
		t.Errorf("%s: remaining %d, want %d", what, r.Remaining, w.remaining)
	}
	if r.InDebt != w.debt || r.ExceedsCapacity != w.exceeds {
		t.Errorf("%s: in debt %v, exceeds %v; want %v, %v", what, r.InDebt, r.ExceedsCapacity, w.debt, w.exceeds)
	}
	if r.Window != w.window {
		t.Errorf("%s: window %v, want %v", what, r.Window, w.window)
	}
	lands := func(name string, d time.Duration, want string) {
		if want == "" {
			if name == "retry after" && d != 0 {
				t.Errorf("%s: %s %v, want none", what, name, d)
			}
			return
		}
		got, end := at.Add(d), parseTime(t, want)
		if got.After(end) || got.Before(end.Add(-slack)) {
			t.Errorf("%s: %s %v lands on %v, want %v (slack %v)", what, name, d, got.In(end.Location()), end, slack)
		}
	}
	lands("reset after", r.ResetAfter, w.reset)
	lands("retry after", r.RetryAfter, w.retry)
}

func parseTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}
