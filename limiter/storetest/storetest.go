// Package storetest is the conformance suite every limiter.Store must pass:
// the token-bucket semantics (package limiter's doc, docs/design.md), table
// by table, with time moved by the harness rather than slept through.
package storetest

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// Harness adapts a store to the suite.
type Harness struct {
	Store limiter.Store
	// Advance makes d pass for every bucket the store holds.
	Advance func(t *testing.T, d time.Duration)
	// Exists reports whether the store holds state for a bucket.
	Exists func(t *testing.T, name, id string) bool
	// Reclaim gives the store its chance to drop full buckets (Redis expires
	// keys by itself; the memory store needs a nudge).
	Reclaim func(t *testing.T)
	// RealClock says the store's clock runs on between calls (Redis, whose
	// clock cannot be injected); false for a store on an injected clock.
	// Expected durations and tokens then allow for the real time measured
	// since the case's first decision (slack).
	RealClock bool
}

type step struct {
	advance time.Duration
	buckets []bucket // the decision's buckets; empty repeats the previous
	allowed bool
	// what the first bucket must report
	remaining  int64
	resetAfter time.Duration
	retryAfter time.Duration
	exceeds    bool
}

type bucket struct {
	id    string
	limit limiter.Limit
	cost  int64
	kind  limiter.Kind // Take unless set
}

// The limits of the worked examples.
var (
	perMinute100 = limiter.MustLimit(100, "100/60") // envoyproxy/ratelimit's 100 per MINUTE
	perMonth1001 = limiter.MustLimit(1001, "1001/2592000")
)

var cases = []struct {
	name  string
	steps []step
}{
	{"a cost of 0 looks without taking, and an empty bucket denies it", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1"), 0, limiter.Take}}, allowed: true, remaining: 5, resetAfter: 0},
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1"), 3, limiter.Take}}, allowed: true, remaining: 2, resetAfter: 3 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1"), 0, limiter.Take}}, allowed: true, remaining: 2, resetAfter: 3 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1"), 2, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 5 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1"), 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 5 * time.Second, retryAfter: time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1"), 1, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 5 * time.Second, retryAfter: time.Second},
	}},
	{"a look needs one whole token", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1"), 5, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 5 * time.Second},
		{advance: 500 * time.Millisecond, buckets: []bucket{{"a", limiter.MustLimit(5, "1"), 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 4500 * time.Millisecond, retryAfter: 500 * time.Millisecond},
		{advance: 500 * time.Millisecond, allowed: true, remaining: 1, resetAfter: 4 * time.Second},
	}},
	// Envoy's cost charged after the response (hits_addend on stream
	// done) behind a cost-0 check on the request path: the check denies
	// once the charges have put the bucket in debt, and the debt repays
	// at the limit's rate (100 a minute: 5/3 tokens a second).
	{"100 a minute: look with cost 0, then charge 150, five times in a row", []step{
		{buckets: []bucket{{"a", perMinute100, 0, limiter.Take}}, allowed: true, remaining: 100, resetAfter: 0},
		{buckets: []bucket{{"a", perMinute100, 150, limiter.Charge}}, allowed: true, remaining: 0, resetAfter: 90 * time.Second}, // 50 in debt
		{buckets: []bucket{{"a", perMinute100, 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 90 * time.Second, retryAfter: 30600 * time.Millisecond},
		{buckets: []bucket{{"a", perMinute100, 150, limiter.Charge}}, allowed: true, remaining: 0, resetAfter: 2 * time.Minute}, // the debt bound: 100
		{buckets: []bucket{{"a", perMinute100, 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 2 * time.Minute, retryAfter: 60600 * time.Millisecond},
		{buckets: []bucket{{"a", perMinute100, 150, limiter.Charge}}, allowed: true, remaining: 0, resetAfter: 2 * time.Minute},
		{buckets: []bucket{{"a", perMinute100, 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 2 * time.Minute, retryAfter: 60600 * time.Millisecond},
		{buckets: []bucket{{"a", perMinute100, 150, limiter.Charge}}, allowed: true, remaining: 0, resetAfter: 2 * time.Minute},
		{buckets: []bucket{{"a", perMinute100, 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 2 * time.Minute, retryAfter: 60600 * time.Millisecond},
		{buckets: []bucket{{"a", perMinute100, 150, limiter.Charge}}, allowed: true, remaining: 0, resetAfter: 2 * time.Minute},
		// The debt repays at 100 a minute: empty after a minute, one token 0.6 s later.
		{advance: 30 * time.Second, buckets: []bucket{{"a", perMinute100, 1, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 90 * time.Second, retryAfter: 30600 * time.Millisecond},
		{advance: 30 * time.Second, buckets: []bucket{{"a", perMinute100, 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: time.Minute, retryAfter: 600 * time.Millisecond},
		{advance: 600 * time.Millisecond, allowed: true, remaining: 1, resetAfter: 59400 * time.Millisecond},
		{buckets: []bucket{{"a", perMinute100, 1, limiter.Take}}, allowed: true, remaining: 0, resetAfter: time.Minute},
	}},
	{"a charge of 2^63-1 takes the bucket one capacity into debt, no further", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), math.MaxInt64, limiter.Charge}}, allowed: true, remaining: 0, resetAfter: 20 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 3, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 20 * time.Second, retryAfter: 13 * time.Second},
		{advance: 13 * time.Second, allowed: true, remaining: 0, resetAfter: 10 * time.Second},
	}},
	{"a charge that fits is an ordinary charge", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 4, limiter.Charge}}, allowed: true, remaining: 6, resetAfter: 4 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 0, limiter.Charge}}, allowed: true, remaining: 6, resetAfter: 4 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 6, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 10 * time.Second},
	}},
	{"a refund gives tokens back, up to the capacity", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), 8, limiter.Take}}, allowed: true, remaining: 2, resetAfter: 8 * time.Minute},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), 3, limiter.Refund}}, allowed: true, remaining: 5, resetAfter: 5 * time.Minute},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), math.MaxInt64, limiter.Refund}}, allowed: true, remaining: 10, resetAfter: 0},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), 10, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 10 * time.Minute},
	}},
	{"a refund pays back a debt", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 15, limiter.Charge}}, allowed: true, remaining: 0, resetAfter: 15 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 15 * time.Second, retryAfter: 6 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 10, limiter.Refund}}, allowed: true, remaining: 5, resetAfter: 5 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 0, limiter.Take}}, allowed: true, remaining: 5, resetAfter: 5 * time.Second},
	}},
	{"a denied decision still applies its charges and refunds", []step{
		{buckets: []bucket{{"t", limiter.MustLimit(2, "1/60"), 2, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 2 * time.Minute},
		// t is empty: the take denies; the charge of c stands.
		{buckets: []bucket{{"c", limiter.MustLimit(5, "1/60"), 3, limiter.Charge}, {"t", limiter.MustLimit(2, "1/60"), 1, limiter.Take}}, allowed: false, remaining: 2, resetAfter: 3 * time.Minute},
		{buckets: []bucket{{"c", limiter.MustLimit(5, "1/60"), 0, limiter.Take}}, allowed: true, remaining: 2, resetAfter: 3 * time.Minute},
		// And so does a refund of it, while a take of u beside it pays nothing.
		{buckets: []bucket{{"c", limiter.MustLimit(5, "1/60"), 1, limiter.Refund}, {"u", limiter.MustLimit(5, "1/60"), 1, limiter.Take}, {"t", limiter.MustLimit(2, "1/60"), 1, limiter.Take}}, allowed: false, remaining: 3, resetAfter: 2 * time.Minute},
		{buckets: []bucket{{"u", limiter.MustLimit(5, "1/60"), 0, limiter.Take}}, allowed: true, remaining: 5, resetAfter: 0},
	}},
	{"charges and refunds alone are allowed, and takes beside them pay", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1/60"), 1, limiter.Take}, {"c", limiter.MustLimit(5, "1/60"), 99, limiter.Charge}, {"r", limiter.MustLimit(5, "1/60"), 1, limiter.Refund}}, allowed: true, remaining: 4, resetAfter: time.Minute},
		{buckets: []bucket{{"c", limiter.MustLimit(5, "1/60"), 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 10 * time.Minute, retryAfter: 6 * time.Minute},
		{buckets: []bucket{{"r", limiter.MustLimit(5, "1/60"), 5, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 5 * time.Minute},
	}},
	{"a debt carried to a new limit is kept, and bounded by the new capacity", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 15, limiter.Charge}}, allowed: true, remaining: 0, resetAfter: 15 * time.Second},                             // 5 in debt
		{buckets: []bucket{{"a", limiter.MustLimit(4, "1/60"), 0, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 8 * time.Minute, retryAfter: 5 * time.Minute}, // 4 in debt at most
	}},
	// A quota by the month that microsecond steps cannot count exactly:
	// steps of 10 µs. One token every 2592000/1001 s.
	{"1001 a month", []step{
		{buckets: []bucket{{"a", perMonth1001, 1001, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 30 * 24 * time.Hour},
		{buckets: []bucket{{"a", perMonth1001, 1, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 30 * 24 * time.Hour, retryAfter: 2589410590 * time.Microsecond},
		{advance: 2589411 * time.Millisecond, allowed: true, remaining: 0, resetAfter: 30*24*time.Hour - 410*time.Microsecond},
	}},
	{"a new bucket is full", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 1, limiter.Take}}, allowed: true, remaining: 9, resetAfter: time.Second},
	}},
	{"a burst of exactly capacity passes, then the next is denied", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1/60"), 1, limiter.Take}}, allowed: true, remaining: 2, resetAfter: time.Minute},
		{allowed: true, remaining: 1, resetAfter: 2 * time.Minute},
		{allowed: true, remaining: 0, resetAfter: 3 * time.Minute},
		{allowed: false, remaining: 0, resetAfter: 3 * time.Minute, retryAfter: time.Minute},
	}},
	{"retry-after shrinks as tokens accrue and grows with the cost", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "2"), 10, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 5 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "2"), 1, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 5 * time.Second, retryAfter: 500 * time.Millisecond},
		{advance: 250 * time.Millisecond, allowed: false, remaining: 0, resetAfter: 4750 * time.Millisecond, retryAfter: 250 * time.Millisecond},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "2"), 3, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 4750 * time.Millisecond, retryAfter: 1250 * time.Millisecond},
	}},
	{"tokens refill with time", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "2"), 10, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 5 * time.Second},
		{advance: 1500 * time.Millisecond, buckets: []bucket{{"a", limiter.MustLimit(10, "2"), 1, limiter.Take}}, allowed: true, remaining: 2, resetAfter: 4 * time.Second},
		{allowed: true, remaining: 1, resetAfter: 4500 * time.Millisecond},
		{allowed: true, remaining: 0, resetAfter: 5 * time.Second},
		{allowed: false, remaining: 0, resetAfter: 5 * time.Second, retryAfter: 500 * time.Millisecond},
	}},
	{"a refill never exceeds the capacity", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(4, "100"), 4, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 40 * time.Millisecond},
		{advance: time.Hour, buckets: []bucket{{"a", limiter.MustLimit(4, "100"), 1, limiter.Take}}, allowed: true, remaining: 3, resetAfter: 10 * time.Millisecond},
	}},
	{"half a token a second", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(2, "0.5"), 2, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 4 * time.Second},
		{buckets: []bucket{{"a", limiter.MustLimit(2, "0.5"), 1, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 4 * time.Second, retryAfter: 2 * time.Second},
		{advance: time.Second, allowed: false, remaining: 0, resetAfter: 3 * time.Second, retryAfter: time.Second},
		{advance: time.Second, allowed: true, remaining: 0, resetAfter: 4 * time.Second},
	}},
	{"a third of a token a second, which no decimal holds", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(1, "1/3"), 1, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 3 * time.Second},
		{advance: 2900 * time.Millisecond, allowed: false, remaining: 0, resetAfter: 100 * time.Millisecond, retryAfter: 100 * time.Millisecond},
		{advance: 100 * time.Millisecond, allowed: true, remaining: 0, resetAfter: 3 * time.Second},
	}},
	{"ten thousand tokens a second", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(20000, "10000"), 20000, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 2 * time.Second},
		{advance: 100 * time.Millisecond, buckets: []bucket{{"a", limiter.MustLimit(20000, "10000"), 1000, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 2 * time.Second},
		{allowed: false, remaining: 0, resetAfter: 2 * time.Second, retryAfter: 100 * time.Millisecond},
	}},
	{"a cost above one takes that many tokens", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), 4, limiter.Take}}, allowed: true, remaining: 6, resetAfter: 4 * time.Minute},
		{allowed: true, remaining: 2, resetAfter: 8 * time.Minute},
		{allowed: false, remaining: 2, resetAfter: 8 * time.Minute, retryAfter: 2 * time.Minute},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), 2, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 10 * time.Minute},
	}},
	{"a cost above the capacity can never pass and takes nothing", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1"), 4, limiter.Take}}, allowed: false, remaining: 3, exceeds: true},
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1"), 3, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 3 * time.Second},
	}},
	{"several buckets pass together", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1/60"), 1, limiter.Take}, {"b", limiter.MustLimit(2, "1/60"), 1, limiter.Take}}, allowed: true, remaining: 4, resetAfter: time.Minute},
		{allowed: true, remaining: 3, resetAfter: 2 * time.Minute},
	}},
	{"when one bucket denies, no bucket pays", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1/60"), 1, limiter.Take}, {"b", limiter.MustLimit(2, "1/60"), 1, limiter.Take}}, allowed: true, remaining: 4, resetAfter: time.Minute},
		{allowed: true, remaining: 3, resetAfter: 2 * time.Minute},
		{allowed: false, remaining: 3, resetAfter: 2 * time.Minute}, // b is empty; a must not pay
		{allowed: false, remaining: 3, resetAfter: 2 * time.Minute},
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1/60"), 3, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 5 * time.Minute},
	}},
	{"an impossible cost in one bucket takes nothing from the others", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1/60"), 1, limiter.Take}, {"b", limiter.MustLimit(2, "1/60"), 3, limiter.Take}}, allowed: false, remaining: 5},
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1/60"), 5, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 5 * time.Minute},
	}},
	// A reload changes a policy's numbers: a bucket keeps the tokens it
	// held under the old limit (capped at the new capacity) and refills at
	// the new rate from its first decision under the new limit.
	{"a raised rate refills a spent bucket at the new rate at once", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1/60"), 3, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 3 * time.Minute},
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1/60"), 1, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 3 * time.Minute, retryAfter: time.Minute},
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1"), 1, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 3 * time.Second, retryAfter: time.Second},
		{advance: time.Second, allowed: true, remaining: 0, resetAfter: 3 * time.Second},
	}},
	{"a limit change keeps the tokens held when nothing is charged", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1/60"), 3, limiter.Take}}, allowed: true, remaining: 0, resetAfter: 3 * time.Minute},
		// Denied under the new limit (cost 4 of capacity 10): still the
		// new rate from here on.
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1"), 4, limiter.Take}}, allowed: false, remaining: 0, resetAfter: 10 * time.Second, retryAfter: 4 * time.Second},
		{advance: 4 * time.Second, allowed: true, remaining: 0, resetAfter: 10 * time.Second},
	}},
	{"a lowered capacity clamps the tokens held", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), 2, limiter.Take}}, allowed: true, remaining: 8, resetAfter: 2 * time.Minute},
		{buckets: []bucket{{"a", limiter.MustLimit(5, "1/60"), 1, limiter.Take}}, allowed: true, remaining: 4, resetAfter: time.Minute},
	}},
	{"a raised capacity keeps the tokens held", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1/60"), 1, limiter.Take}}, allowed: true, remaining: 2, resetAfter: time.Minute},
		{buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), 1, limiter.Take}}, allowed: true, remaining: 1, resetAfter: 9 * time.Minute},
	}},
	{"a lowered rate keeps the tokens held and refills slower", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(4, "2"), 3, limiter.Take}}, allowed: true, remaining: 1, resetAfter: 1500 * time.Millisecond},
		{buckets: []bucket{{"a", limiter.MustLimit(4, "1/60"), 2, limiter.Take}}, allowed: false, remaining: 1, resetAfter: 3 * time.Minute, retryAfter: time.Minute},
	}},
	{"a full bucket is full under the new limit", []step{
		{buckets: []bucket{{"a", limiter.MustLimit(3, "1"), 1, limiter.Take}}, allowed: true, remaining: 2, resetAfter: time.Second},
		{advance: time.Second, buckets: []bucket{{"a", limiter.MustLimit(10, "1/60"), 1, limiter.Take}}, allowed: true, remaining: 9, resetAfter: time.Minute},
	}},
}

// Run runs the conformance suite against h.
func Run(t *testing.T, h Harness) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "conf-" + t.Name()
			var reqs []limiter.Request
			var fastest float64 // the first bucket's fastest rate so far, tokens a second
			begun := time.Now()
			for i, s := range tc.steps {
				if s.advance > 0 {
					h.Advance(t, s.advance)
				}
				if len(s.buckets) > 0 {
					reqs = reqs[:0]
					for _, b := range s.buckets {
						reqs = append(reqs, limiter.Request{Name: name, ID: b.id, Limit: b.limit, Cost: b.cost, Kind: b.kind})
					}
				}
				res := make([]limiter.Result, len(reqs))
				allowed, err := h.Store.Take(context.Background(), reqs, res)
				if err != nil {
					t.Fatalf("step %d: Take: %v", i, err)
				}
				cur := perSecond(reqs[0].Limit.Rate)
				fastest = max(fastest, cur)
				sl := h.slack(time.Since(begun), fastest, cur)
				if allowed != s.allowed {
					t.Fatalf("step %d: allowed = %v, want %v (results %+v)", i, allowed, s.allowed, res)
				}
				r := res[0]
				if r.Remaining < s.remaining || r.Remaining > s.remaining+sl.tokens || r.ExceedsCapacity != s.exceeds || r.Limit != reqs[0].Limit.Capacity {
					t.Errorf("step %d: remaining %d exceeds %v limit %d, want %d %v %d", i, r.Remaining, r.ExceedsCapacity, r.Limit, s.remaining, s.exceeds, reqs[0].Limit.Capacity)
				}
				if !s.exceeds {
					sl.within(t, i, "reset-after", r.ResetAfter, s.resetAfter)
				}
				if s.allowed || s.exceeds {
					if got := limiter.RetryAfter(res); got != 0 {
						t.Errorf("step %d: retry-after %v on a decision that cannot be retried", i, got)
					}
				} else if s.retryAfter > 0 {
					sl.within(t, i, "retry-after", limiter.RetryAfter(res), s.retryAfter)
				}
			}
		})
	}
	t.Run("a bucket is forgotten once it has refilled", func(t *testing.T) {
		name := "conf-expiry"
		// 20s from empty to full: a store on a real clock keeps a margin of
		// seconds, not milliseconds, between "half refilled" and "full".
		l := limiter.MustLimit(2, "1/10")
		reqs := []limiter.Request{{Name: name, ID: "x", Limit: l, Cost: 2}}
		res := make([]limiter.Result, 1)
		if ok, err := h.Store.Take(context.Background(), reqs, res); !ok || err != nil {
			t.Fatalf("Take = %v, %v", ok, err)
		}
		if !h.Exists(t, name, "x") {
			t.Fatal("an emptied bucket left no state")
		}
		h.Advance(t, 15*time.Second)
		if !h.Exists(t, name, "x") {
			t.Fatal("a bucket half refilled was dropped") // 15s of 20s
		}
		h.Advance(t, 5*time.Second)
		h.Reclaim(t)
		if h.Exists(t, name, "x") {
			t.Fatal("a full bucket still holds state")
		}
		// Forgetting it lost nothing: it is full.
		if ok, _ := h.Store.Take(context.Background(), reqs, res); !ok || res[0].Remaining != 0 {
			t.Fatalf("after refill: allowed %v remaining %d, want a full bucket", ok, res[0].Remaining)
		}
	})
	t.Run("bad input is an error, not a decision", func(t *testing.T) {
		l := limiter.MustLimit(1, "1")
		bad := []struct {
			name string
			reqs []limiter.Request
			want error
		}{
			{"no buckets", nil, limiter.ErrNoBuckets},
			{"empty identity", []limiter.Request{{Name: "n", ID: "", Limit: l, Cost: 1}}, limiter.ErrKey},
			{"empty name", []limiter.Request{{Name: "", ID: "i", Limit: l, Cost: 1}}, limiter.ErrKey},
			{"negative cost", []limiter.Request{{Name: "n", ID: "i", Limit: l, Cost: -3}}, limiter.ErrCost},
			{"a negative charge", []limiter.Request{{Name: "n", ID: "i", Limit: l, Cost: -3, Kind: limiter.Charge}}, limiter.ErrCost},
			{"a negative refund", []limiter.Request{{Name: "n", ID: "i", Limit: l, Cost: -1, Kind: limiter.Refund}}, limiter.ErrCost},
			{"an unknown kind", []limiter.Request{{Name: "n", ID: "i", Limit: l, Cost: 1, Kind: limiter.Refund + 1}}, limiter.ErrKind},
			{"a limit not built by NewLimit", []limiter.Request{{Name: "n", ID: "i", Limit: limiter.Limit{Capacity: 5}, Cost: 1}}, limiter.ErrCapacity},
			{"the same bucket twice", []limiter.Request{{Name: "n", ID: "i", Limit: l, Cost: 1}, {Name: "n", ID: "i", Limit: l, Cost: 1}}, limiter.ErrDuplicate},
		}
		for _, b := range bad {
			_, err := h.Store.Take(context.Background(), b.reqs, make([]limiter.Result, len(b.reqs)))
			if !errors.Is(err, b.want) {
				t.Errorf("%s: err = %v, want %v", b.name, err, b.want)
			}
		}
	})
}

// slack is what a store on a real clock may be off by at one step.
type slack struct {
	d      time.Duration // durations may be short by this much
	tokens int64         // and the remaining tokens over by this many
}

// slack is the allowance for the real time elapsed since a case began, in
// which buckets refilled at rates up to fastest and now refill at cur.
// Time that passed unaccounted at a faster rate refilled that rate's worth
// of tokens, which cur reads as elapsed times the faster rate over cur: a
// lowered rate makes a millisecond read as many. A millisecond more covers
// Redis' rounding to whole milliseconds.
func (h Harness) slack(elapsed time.Duration, fastest, cur float64) slack {
	if !h.RealClock {
		return slack{}
	}
	elapsed += time.Millisecond
	return slack{
		d:      time.Duration(float64(elapsed) * fastest / cur),
		tokens: int64(elapsed.Seconds() * fastest),
	}
}

func perSecond(r limiter.Rate) float64 {
	n, d := r.Fraction()
	return float64(n) / float64(d)
}

func (sl slack) within(t *testing.T, step int, what string, got, want time.Duration) {
	t.Helper()
	if got > want || got < want-sl.d {
		t.Errorf("step %d: %s = %v, want %v (slack %v)", step, what, got, want, sl.d)
	}
}
