package rls

import (
	"context"
	"math"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const chargeConfig = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100, name: tokens}
  - key: shadow_user
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`

func chargeService(t *testing.T, clock *limiter.ManualClock) rlsv3.RateLimitServiceClient {
	t.Helper()
	return serve(t, NewService(mustConfig(t, chargeConfig), ServiceOptions{Hash: plainHash, Store: storetest.Memory(clock)}))
}

// withHits is a descriptor with its own hits_addend, and is_negative_hits.
func withHits(d *rlcommon.RateLimitDescriptor, hits uint64, negative bool) *rlcommon.RateLimitDescriptor {
	d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(hits), negative
	return d
}

func askIn(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestACostChargedAfterTheResponseIsTaken is the token budget Envoy
// Gateway's cost.response and AI gateways build: a check that costs nothing
// on the request path (a descriptor's hits_addend 0), then the cost charged
// when the stream is done (a descriptor's own hits_addend, sent by Envoy's
// rate limit filter from Filter::onDestroy through OnStreamDoneCallBack,
// which discards the answer: source/extensions/filters/http/ratelimit/
// ratelimit.cc). The charge is taken even past what is left, into a debt
// of at most one capacity, and answered OVER_LIMIT when it overdrew, as
// envoyproxy/ratelimit answers a counter pushed over its limit; the next
// check is denied until the debt has refilled. Five rounds of "check with
// cost 0, then charge 150" on 100 a minute: the first check passes, every
// later one is denied.
func TestACostChargedAfterTheResponseIsTaken(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_700_000_000, 0))
	c := chargeService(t, clock)
	for round := 1; round <= 5; round++ {
		look := ask(t, c, withHits(desc("user", "u1"), 0, false))
		wantLook := rlsv3.RateLimitResponse_OVER_LIMIT
		if round == 1 {
			wantLook = rlsv3.RateLimitResponse_OK
		}
		if look.OverallCode != wantLook || (round == 1 && look.Statuses[0].LimitRemaining != 100) {
			t.Fatalf("round %d, the check: %v, want %v", round, look, wantLook)
		}
		charge := ask(t, c, withHits(desc("user", "u1"), 150, false))
		if charge.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || charge.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("round %d, the charge of 150: %v, want OVER_LIMIT with nothing left", round, charge)
		}
	}
	// The debt is at most one capacity: from 100 below empty, one token is
	// back after 101 tokens' time (60.6 s), not before.
	clock.Advance(60 * time.Second)
	if r := ask(t, c, withHits(desc("user", "u1"), 0, false)); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a minute after the debt: %v, want still denied (empty)", r)
	}
	clock.Advance(600 * time.Millisecond)
	if r := ask(t, c, withHits(desc("user", "u1"), 0, false)); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("60.6 s after: %v, want OK with one token", r)
	}
	// A charge that fits exactly is OK, and empties the bucket.
	c = chargeService(t, clock)
	if r := ask(t, c, withHits(desc("user", "u2"), 100, false)); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a charge of the whole capacity: %v, want OK with 0 left", r)
	}
	if r := ask(t, c, withHits(desc("user", "u2"), 0, false)); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a check on the emptied bucket: %v, want OVER_LIMIT", r)
	}
	// A charge of 2^64-1 is taken (to the debt bound), not an error.
	if r := ask(t, c, withHits(desc("user", "u3"), math.MaxUint64, false)); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a charge of 2^64-1: %v", r)
	}
}

// TestNegativeHitsGiveTokensBack: is_negative_hits with a hits_addend
// gives that many tokens back, up to the capacity, and never denies.
func TestNegativeHitsGiveTokensBack(t *testing.T) {
	c := chargeService(t, limiter.NewManualClock(time.Unix(1_700_000_000, 0)))
	askIn(t, c, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 90, Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}})
	if r := ask(t, c, withHits(desc("user", "u"), 30, true)); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 40 {
		t.Fatalf("30 given back with 10 left: %v, want OK with 40", r)
	}
	if r := ask(t, c, withHits(desc("user", "u"), 1000, true)); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 100 {
		t.Fatalf("1000 given back: %v, want full (100)", r)
	}
}

// TestARequestsOwnCostIsAllOrNothingAndFreeWhenDenied: a cost on the
// request itself (hits_addend of the request, or none: 1) keeps Floodgate's
// rule: every descriptor pays or none does. A charge in the same request
// is taken whatever the other descriptors decide.
func TestARequestsOwnCostIsAllOrNothingAndFreeWhenDenied(t *testing.T) {
	c := chargeService(t, limiter.NewManualClock(time.Unix(1_700_000_000, 0)))
	r := askIn(t, c, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 101, Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}})
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a request costing 101 of 100: %v", r)
	}
	r = askIn(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u"), desc("blocked", "x"), withHits(desc("user", "v"), 10, false)}})
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OK || r.Statuses[2].Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a request with a blocked descriptor: %v", r)
	}
	if got := ask(t, c, withHits(desc("user", "u"), 0, false)).Statuses[0].LimitRemaining; got != 100 {
		t.Errorf("the denied request took from u: %d left, want 100", got)
	}
	if got := ask(t, c, withHits(desc("user", "v"), 0, false)).Statuses[0].LimitRemaining; got != 90 {
		t.Errorf("the charge beside the denial: %d left of v, want 90", got)
	}
}

// TestAnOverLimitStatusReportsNothingLeft: envoyproxy/ratelimit reports
// limit_remaining 0 on every over-limit status (BaseRateLimiter.
// GetResponseDescriptorStatus, src/limiter/base_limiter.go), and Envoy's
// X-RateLimit-Remaining takes the smallest of them: a request denied for
// costing 2 with 1 left reports 0, a shadow limit's would-be denial too.
func TestAnOverLimitStatusReportsNothingLeft(t *testing.T) {
	c := chargeService(t, limiter.NewManualClock(time.Unix(1_700_000_000, 0)))
	two := func(d *rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		return askIn(t, c, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	}
	if r := two(desc("shadow_user", "s")); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("a shadow limit, 2 of 3: %v", r)
	}
	if r := two(desc("shadow_user", "s")); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a shadow limit short of 2 with 1 left: %v, want OK reporting 0 left", r)
	}
	askIn(t, c, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 99, Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}})
	r := two(desc("user", "u"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("2 with 1 left: %v, want OVER_LIMIT reporting 0 left", r)
	}
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 600*time.Millisecond && got != time.Second {
		t.Errorf("2 with 1 left: duration_until_reset %v, want the time until 2 are there (0.6 s, whole seconds: 1 s)", got)
	}
}

// TestACostThatCanNeverPassIsNotToldToRetry: a request costing more than
// the capacity, or meeting a limit of 0, can never pass: it is answered as
// Check answers such a request (no Retry-After, a body saying why, no
// duration_until_reset), not told to come back.
func TestACostThatCanNeverPassIsNotToldToRetry(t *testing.T) {
	c := chargeService(t, limiter.NewManualClock(time.Unix(1_700_000_000, 0)))
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", HitsAddend: 101, Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}},
		{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("blocked", "b")}},
	} {
		r := askIn(t, c, req)
		if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].DurationUntilReset != nil || r.Statuses[0].LimitRemaining != 0 {
			t.Errorf("%v: %v, want OVER_LIMIT without a duration", req, r)
		}
		want := `{"error":"rate_limited","reason":"the request costs more tokens than the policy's capacity: it can never pass"}`
		if string(r.RawBody) != want || headerValue(r, "retry-after") != "" || headerValue(r, "content-type") != "application/json" {
			t.Errorf("%v: body %s, headers %v; want %s, a content-type and no retry-after", req, r.RawBody, r.ResponseHeadersToAdd, want)
		}
	}
	// A limit of 0 lets a check that costs nothing through, as
	// envoyproxy/ratelimit does (0 hits are not over a limit of 0), and
	// counts a charge over it.
	if r := ask(t, c, withHits(desc("blocked", "b"), 0, false)); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
		t.Errorf("a check of a limit of 0: %v, want OK", r)
	}
	if r := ask(t, c, withHits(desc("blocked", "b"), 5, false)); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a charge on a limit of 0: %v, want OVER_LIMIT", r)
	}
}

// TestADenialCarriesRetryAfter: Envoy's rate limit filter copies the
// service's response_headers_to_add into its 429 (Filter::complete and
// populateResponseHeaders, ratelimit.cc), and does not overwrite a
// Retry-After the service sent (enable_retry_after_header); so the answer
// carries Retry-After itself, whatever the filter's settings.
func TestADenialCarriesRetryAfter(t *testing.T) {
	c := chargeService(t, limiter.NewManualClock(time.Unix(1_700_000_000, 0)))
	askIn(t, c, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 100, Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}})
	r := askIn(t, c, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 10, Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}})
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headerValue(r, "retry-after") != "6" || string(r.RawBody) != `{"error":"rate_limited","retry_after":6}` {
		t.Fatalf("10 with nothing left of 100 a minute: %v, want Retry-After 6", r)
	}
	if ok := ask(t, c, desc("user", "other")); headerValue(ok, "retry-after") != "" {
		t.Errorf("an allowed answer carries retry-after: %v", ok.ResponseHeadersToAdd)
	}
}

func headerValue(r *rlsv3.RateLimitResponse, name string) string {
	for _, h := range r.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}
