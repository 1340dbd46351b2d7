package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// degradedStore decides in memory and marks every result degraded, as the
// per-replica fallback does while Redis is unreachable.
type degradedStore struct{ limiter.Store }

func (s degradedStore) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	ok, err := s.Store.Take(ctx, reqs, res)
	for i := range res {
		res[i].Degraded = true
	}
	return ok, err
}

// TestADegradedAnswerIsMarked: an answer the failure mode gave (the store
// could not decide) or the per-replica fallback decided carries
// x-ratelimit-degraded: true and counts as degraded, as a Check's does;
// on_failure: deny answers with the body, Retry-After and content-type a
// denied Check has (store.failure_retry_after).
func TestADegradedAnswerIsMarked(t *testing.T) {
	for _, c := range []struct {
		name    string
		store   limiter.Store
		mode    decide.OnFailure
		code    rlsv3.RateLimitResponse_Code
		outcome string
		body    string
	}{
		{"store down, allow", failingStore{}, decide.Allow, rlsv3.RateLimitResponse_OK, "degraded_allowed", ""},
		{"store down, deny", failingStore{}, decide.Deny, rlsv3.RateLimitResponse_OVER_LIMIT, "degraded_denied", `{"error":"rate_limited","retry_after":3,"degraded":true}`},
		{"per-replica fallback", degradedStore{storetest.Memory(nil)}, decide.Allow, rlsv3.RateLimitResponse_OK, "degraded_allowed", ""},
	} {
		reg := prometheus.NewRegistry()
		s := NewService(mustConfig(t, testConfig), ServiceOptions{Hash: plainHash, Store: c.store, OnFailure: c.mode, FailureRetryAfter: 3 * time.Second, Registerer: reg})
		r := ask(t, serve(t, s), desc("api_key", "k"))
		if r.OverallCode != c.code || headerValue(r, "x-ratelimit-degraded") != "true" || string(r.RawBody) != c.body {
			t.Errorf("%s: %v, want %v marked degraded with body %q", c.name, r, c.code, c.body)
		}
		if c.body != "" && (headerValue(r, "retry-after") != "3" || headerValue(r, "content-type") != "application/json" || r.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Errorf("%s: headers %v, statuses %v; want retry-after 3 and the JSON content-type", c.name, r.ResponseHeadersToAdd, r.Statuses)
		}
		if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues(c.outcome)); got != 1 {
			t.Errorf("%s: floodgate_rls_requests_total{outcome=%q} = %v, want 1", c.name, c.outcome, got)
		}
	}
	// An answer the shared store decided is not marked.
	r := ask(t, memoryService(t, limiter.NewManualClock(time.Unix(1_000_000, 0))), desc("api_key", "k"))
	if headerValue(r, "x-ratelimit-degraded") != "" {
		t.Errorf("an exact answer is marked degraded: %v", r.ResponseHeadersToAdd)
	}
}

// TestTheDraft11HeadersNameEachBucketOnce: several descriptors meeting
// the same limit are different buckets, each a member of its own name
// (the limit's, then #2, #3...); q is the bucket's capacity (the burst
// when rls.burst sets one) and w the seconds it takes to refill from
// empty, as Check's RateLimit-Policy says, so r never exceeds q.
func TestTheDraft11HeadersNameEachBucketOnce(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	if err := cfg.SetBursts(map[string]int64{"edge.remote_address": 10}); err != nil {
		t.Fatal(err)
	}
	s := NewService(cfg, ServiceOptions{Hash: plainHash, Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_000_000, 0))), Response: ResponseOptions{Headers: true}})
	over := func(n uint32) *rlcommon.RateLimitDescriptor {
		d := desc("api_key", "k3")
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: 2}
		return d
	}
	r := ask(t, serve(t, s), desc("api_key", "k1"), desc("api_key", "k2"), desc("remote_address", "10.0.0.1"), over(5), desc("api_key", "k1"))
	pol, cur := headerValue(r, "ratelimit-policy"), headerValue(r, "ratelimit")
	wantPol := `"per-key";q=3;w=60, "per-key#2";q=3;w=60, "edge.remote_address";q=10;w=5, "override";q=5;w=60`
	wantCur := `"per-key";r=1;t=40, "per-key#2";r=2;t=20, "edge.remote_address";r=9;t=1, "override";r=4;t=12`
	if pol != wantPol || cur != wantCur {
		t.Errorf("RateLimit-Policy: %s\nRateLimit:        %s\nwant\n%s\n%s", pol, cur, wantPol, wantCur)
	}
	if strings.Count(pol, `"per-key"`) != 1 {
		t.Errorf("one name for two buckets: %s", pol)
	}
}

// TestTheDecisionsMetricSkipsTheLimitsADenialDidNotDeny: a denied answer
// counts the limit that denied it, not its other limits as allowed (their
// takes paid nothing), as Check's floodgate_decisions_total and
// /debug/limited count; a charge beside it applied, and counts.
func TestTheDecisionsMetricSkipsTheLimitsADenialDidNotDeny(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewService(mustConfig(t, testConfig+`  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
`), ServiceOptions{Hash: plainHash, Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_000_000, 0))), Registerer: reg})
	c := serve(t, s)
	for range 2 {
		ask(t, c, desc("remote_address", "10.0.0.1"))
	}
	charge := desc("user", "u")
	charge.HitsAddend = wrapperspb.UInt64(5)
	if r := ask(t, c, desc("api_key", "k1"), desc("remote_address", "10.0.0.1"), charge); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a spent address: %v", r)
	}
	for _, c := range []struct {
		limit, result string
		want          float64
	}{
		{"per-key", "allowed", 0},
		{"edge.remote_address", "allowed", 2},
		{"edge.remote_address", "denied", 1},
		{"edge.user", "allowed", 1},
	} {
		if got := testutil.ToFloat64(s.metrics.limits.WithLabelValues("edge", c.limit, c.result)); got != c.want {
			t.Errorf("floodgate_rls_decisions_total{limit=%q,result=%q} = %v, want %v", c.limit, c.result, got, c.want)
		}
	}
}
