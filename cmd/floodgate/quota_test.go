package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestServeDecidesAMonthlyQuotaOnRedisClock is the worked example end to
// end: floodgate serve, a monthly quota from the 15th in Berlin, a real
// redis-server whose clock (libfaketime) reads ten seconds before the 15th
// of March 2028 at midnight in Berlin, a leap February behind it. The 4th
// request is denied with a Retry-After landing on that midnight; once
// Redis' clock is there, the next window starts fresh.
func TestServeDecidesAMonthlyQuotaOnRedisClock(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	r := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	midnight := time.Date(2028, time.March, 15, 0, 0, 0, 0, berlin)
	clock.Set(t, midnight.Add(-10*time.Second))
	p := startFloodgate(t, `
listen: {grpc: 127.0.0.1:0, admin: 127.0.0.1:0}
store:
  backend: redis
  redis: {addresses: [`+r.Addr+`], timeout: 1s}
policies:
  - name: free-tier-monthly
    key: [header:x-api-key]
    quota: {limit: 3, period: month, timezone: Europe/Berlin, anchor_day: 15}
`)
	for i := 1; i <= 3; i++ {
		resp := p.Check(t, request(t, "/api/items", "203.0.113.9", "x-api-key: k1"))
		if !isAllowed(resp) || hdr(resp, "x-ratelimit-degraded") != "" {
			t.Fatalf("request %d: allowed %v, degraded %q", i, isAllowed(resp), hdr(resp, "x-ratelimit-degraded"))
		}
	}
	resp := p.Check(t, request(t, "/api/items", "203.0.113.9", "x-api-key: k1"))
	if isAllowed(resp) {
		t.Fatal("the 4th request of the window passed")
	}
	if n, err := strconv.Atoi(hdr(resp, "retry-after")); err != nil || n < 8 || n > 10 {
		t.Errorf("retry-after %q, want about 10 (to %v)", hdr(resp, "retry-after"), midnight)
	}
	if got := hdr(resp, "ratelimit-policy"); got != `"free-tier-monthly";q=3;w=2505600` {
		t.Errorf("ratelimit-policy %s, want w of 29 days (a leap February's window)", got)
	}
	clock.Set(t, midnight)
	resp = p.Check(t, request(t, "/api/items", "203.0.113.9", "x-api-key: k1"))
	if !isAllowed(resp) || hdr(resp, "ratelimit-remaining") != "2" {
		t.Errorf("at midnight by Redis' clock: allowed %v, remaining %q; want a fresh window", isAllowed(resp), hdr(resp, "ratelimit-remaining"))
	}
}
