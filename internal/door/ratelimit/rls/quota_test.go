package rls

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// ordinaryQuotas are quotas by the hour, the day, the week, the month and
// the year whose bucket needs a time step coarser than a microsecond to be
// counted exactly (limiter.NewLimit): each is enforced like any other.
var ordinaryQuotas = []struct {
	n    uint32
	unit string
}{
	{1001, "month"}, {5001, "month"}, {999, "year"}, {123457, "year"}, {50001, "day"}, {1867, "week"}, {312751, "hour"},
}

// TestEveryQuotaIsEnforced: each quota is counted from its first request
// (current_limit, limit_remaining), takes its whole count, and is over the
// limit past it; none answers OK without a limit. Each limit's bucket is
// built at load, with the time step it needs.
func TestEveryQuotaIsEnforced(t *testing.T) {
	for _, q := range ordinaryQuotas {
		t.Run(fmt.Sprintf("%d a %s", q.n, q.unit), func(t *testing.T) {
			cfg := mustConfig(t, fmt.Sprintf("domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: %s, requests_per_unit: %d}\n", q.unit, q.n))
			lim := cfg.Select("edge", kv("tenant", "t"))
			if !lim.Bucket().Valid() || lim.Bucket().Capacity != int64(q.n) {
				t.Fatalf("the limit's bucket was not built at load: %v", lim.Bucket())
			}
			c := serve(t, NewService(cfg, ServiceOptions{Hash: plainHash, Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_700_000_000, 0)))}))
			r := ask(t, c, desc("tenant", "t"))
			st := r.Statuses[0]
			if r.OverallCode != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != q.n || st.LimitRemaining != q.n-1 ||
				st.CurrentLimit.GetUnit().String() != strings.ToUpper(q.unit) {
				t.Fatalf("first request: %v, want OK with %d left of %d a %s", r, q.n-1, q.n, q.unit)
			}
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: q.n - 1, Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "t")}})
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
				t.Fatalf("the rest of the quota: %v %v", resp, err)
			}
			if r := ask(t, c, desc("tenant", "t")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("past the quota: %v, want OVER_LIMIT", r)
			}
		})
	}
}
