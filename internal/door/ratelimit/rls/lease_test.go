package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/lease"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestRLSLeaseLeasesTheEnforcedLimits: with rls.lease on, one descriptor's
// hot bucket is decided from a lease, far fewer store calls than answers,
// every answer what the bucket allows; a shadow limit's bucket goes to the
// store each time; off, every answer is a store call.
func TestRLSLeaseLeasesTheEnforcedLimits(t *testing.T) {
	const yaml = "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n  - key: s\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n"
	for _, tc := range []struct {
		lease     bool
		key       string
		wantFewer bool
	}{
		{true, "k", true},
		{false, "k", false},
		{true, "s", false},
	} {
		clock := limiter.NewManualClock(time.Unix(1_000_000, 0))
		calls := &callStore{Store: storetest.Memory(clock)}
		s := NewService(mustConfig(t, yaml), ServiceOptions{Hash: plainHash, Store: lease.New(calls, lease.Options{Clock: clock})})
		s.SetLease(tc.lease)
		c := serve(t, s)
		for i := range 100 {
			if r := ask(t, c, desc(tc.key, "v")); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != uint32(999-i) {
				t.Fatalf("lease %v, %s, answer %d: %v", tc.lease, tc.key, i, r)
			}
		}
		if fewer := calls.calls < 50; fewer != tc.wantFewer {
			t.Errorf("lease %v, %s: %d store calls for 100 answers", tc.lease, tc.key, calls.calls)
		}
	}
}
