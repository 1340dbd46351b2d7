package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/limiter"
)

// TestALimitOfZeroTakesNothingFromTheOtherBuckets: a request one of whose
// descriptors meets requests_per_unit: 0 is answered over the limit, and
// like any denied request it takes nothing from its other limits' buckets
// (they are looked at, so their statuses still report what is left).
func TestALimitOfZeroTakesNothingFromTheOtherBuckets(t *testing.T) {
	c := memoryService(t, limiter.NewManualClock(time.Unix(1_000_000, 0)))
	r := ask(t, c, desc("api_key", "k1"), desc("blocked", "x"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OK ||
		r.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("a key and a blocked descriptor: %v", r)
	}
	if r := ask(t, c, desc("api_key", "k1")); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the key alone afterwards: %d left, want 2 (the denied request took a token)", r.Statuses[0].LimitRemaining)
	}
	if r := ask(t, c, desc("api_key", "k1")); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("the key again: %v", r)
	}
}
