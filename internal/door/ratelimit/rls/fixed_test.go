package rls

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestFixedWindowsAnswerAsEnvoyproxyRatelimit: with rls.windows: fixed,
// the same sequences sent to envoyproxy/ratelimit's binary and to
// Floodgate's service, on one redis-server with the same YAML, get the same
// overall code, per-descriptor codes and limit_remaining, and a
// duration_until_reset within a second (each reads its own clock): a burst
// past a limit, a request over one of two limits that counts against both
// (src/limiter/base_limiter.go, GetResponseDescriptorStatus: every
// descriptor's count takes its hits; src/redis/fixed_cache_impl.go,
// DoLimit: INCRBY on every key), charges (src/utils/utilities.go,
// GetHitsAddends) and checks of 0, and a month of 30 days from the epoch.
func TestFixedWindowsAnswerAsEnvoyproxyRatelimit(t *testing.T) {
	redis := redistest.Start(t)
	unit, _ := windowUnit()
	quotaUnit := "month"
	if until := time.Until(time.Now().Truncate(30 * 24 * time.Hour).Add(30 * 24 * time.Hour)); until < 2*time.Minute {
		quotaUnit = "year"
	}
	yaml := fmt.Sprintf(`domain: fixed
descriptors:
  - key: remote_address
    rate_limit: {unit: %[1]s, requests_per_unit: 4}
  - key: api_key
    rate_limit: {unit: %[1]s, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: %[1]s, requests_per_unit: 100}
  - key: tenant
    rate_limit: {unit: %[2]s, requests_per_unit: 1001}
`, unit, quotaUnit)
	upstream := startRatelimit(t, redis.Addr, yaml)
	svc := NewService(mustConfig(t, yaml), ServiceOptions{Hash: plainHash, Store: redisstore.New(redis.Client(), "fg:")})
	svc.SetFixedWindows(true)
	ours := serve(t, svc)

	ask := func(req *rlsv3.RateLimitRequest) (up, fg string) {
		t.Helper()
		var resets [2][]int64
		for i, c := range []rlsv3.RateLimitServiceClient{upstream, ours} {
			resp, err := c.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatalf("server %d: %v", i, err)
			}
			a := resp.OverallCode.String()
			for _, s := range resp.Statuses {
				a += fmt.Sprintf(" %s/%d", s.Code, s.LimitRemaining)
				resets[i] = append(resets[i], s.GetDurationUntilReset().GetSeconds())
			}
			if i == 0 {
				up = a
			} else {
				fg = a
			}
		}
		for j := range resets[0] {
			if j < len(resets[1]) {
				if d := resets[0][j] - resets[1][j]; d > 1 || d < -1 {
					t.Errorf("status %d: duration_until_reset %ds from envoyproxy/ratelimit, %ds from Floodgate", j, resets[0][j], resets[1][j])
				}
			}
		}
		return up, fg
	}
	same := func(what, want string, req *rlsv3.RateLimitRequest) {
		t.Helper()
		up, fg := ask(req)
		if up != fg || up != want {
			t.Errorf("%s: envoyproxy/ratelimit %q, Floodgate %q, want %q", what, up, fg, want)
		}
	}
	one := func(hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "fixed", HitsAddend: hits, Descriptors: ds}
	}

	for i, want := range []string{"OK OK/3", "OK OK/2", "OK OK/1", "OK OK/0", "OVER_LIMIT OVER_LIMIT/0", "OVER_LIMIT OVER_LIMIT/0"} {
		same(fmt.Sprintf("a burst, request %d", i+1), want, one(0, desc("remote_address", "10.0.0.1")))
	}

	// A request over one of its two limits counts against both: the one
	// with room is spent too (where a token bucket takes nothing).
	same("the key's first", "OK OK/2", one(0, desc("api_key", "k-multi")))
	for i := 1; i <= 4; i++ {
		ask(one(0, desc("remote_address", "10.0.0.2")))
	}
	same("the key beside a spent address", "OVER_LIMIT OK/1 OVER_LIMIT/0", one(0, desc("api_key", "k-multi"), desc("remote_address", "10.0.0.2")))
	same("the key again", "OK OK/0", one(0, desc("api_key", "k-multi")))
	same("the key past it", "OVER_LIMIT OVER_LIMIT/0", one(0, desc("api_key", "k-multi")))
	same("a request of 5 hits", "OK OK/95", one(5, desc("user", "u0")))

	// Charges and checks of 0 hits.
	same("a check of 0", "OK OK/100", one(0, withHits(desc("user", "u1"), 0, false)))
	same("a charge of 150 of 100", "OVER_LIMIT OVER_LIMIT/0", one(0, withHits(desc("user", "u1"), 150, false)))
	same("a check after it", "OVER_LIMIT OVER_LIMIT/0", one(0, withHits(desc("user", "u1"), 0, false)))
	same("a request after it", "OVER_LIMIT OVER_LIMIT/0", one(0, desc("user", "u1")))

	// A long window: ratelimit's 30-day month (or 365-day year), from the epoch.
	same("1001 a "+quotaUnit+", the first", "OK OK/1000", one(0, desc("tenant", "t1")))
	same("1001 a "+quotaUnit+", 1000 more at once", "OK OK/0", one(1000, desc("tenant", "t1")))
	same("1001 a "+quotaUnit+", past it", "OVER_LIMIT OVER_LIMIT/0", one(0, desc("tenant", "t1")))
}

// TestEpochWindowsAreRatelimitsKeys: a window is the whole seconds from
// now / divider · divider (src/limiter/cache_key.go, GenerateCacheKey) to
// one divider later.
func TestEpochWindowsAreRatelimitsKeys(t *testing.T) {
	w := epochWindows{3600}
	for _, c := range []struct{ at, start int64 }{{7199, 3600}, {7200, 7200}, {7200 + 3599, 7200}, {-1, -3600}} {
		s, e := w.Window(time.Unix(c.at, 500_000_000))
		if s.Unix() != c.start || e.Sub(s) != time.Hour {
			t.Errorf("at %d.5: window %d to %d, want %d to %d", c.at, s.Unix(), e.Unix(), c.start, c.start+3600)
		}
	}
}
