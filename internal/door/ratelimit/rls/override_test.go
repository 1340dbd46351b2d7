package rls

import (
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

func overridden(d *rlcommon.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit, multiplier uint32) *rlcommon.RateLimitDescriptor {
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	if multiplier > 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(multiplier)
	}
	return d
}

// TestARequestsOwnLimitKeepsItsBucketWhenItChanges: envoyproxy/ratelimit
// keys a counter by domain, entries and the unit's window, never by the
// override's count (CacheKeyGenerator.GenerateCacheKey,
// src/limiter/cache_key.go), so a per-request limit that changes (Envoy
// Gateway's limit from dynamic metadata) goes on counting. Floodgate's
// bucket is keyed by domain, entries and unit too: it keeps its tokens
// (capped at the new capacity) and refills at the new rate, instead of
// starting full.
func TestARequestsOwnLimitKeepsItsBucketWhenItChanges(t *testing.T) {
	c := memoryService(t, limiter.NewManualClock(time.Unix(1_000_000, 0)))
	for range 3 {
		ask(t, c, overridden(desc("api_key", "k"), 10, typev3.RateLimitUnit_HOUR, 0))
	}
	r := ask(t, c, overridden(desc("api_key", "k"), 20, typev3.RateLimitUnit_HOUR, 0))
	if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 20 || r.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("after 3 of 10 an hour, 1 of 20 an hour: %v, want 6 left (the 7 tokens kept, one taken), not a fresh bucket", r)
	}
}

// TestUnitMultiplierStretchesTheWindow: an override's unit_multiplier
// makes its window that many units (10 per 60 minutes is 10 an hour).
// envoyproxy/ratelimit ignores the field (its GetLimit reads
// requests_per_unit and unit only); Floodgate counts it, as DESIGN.md
// says.
func TestUnitMultiplierStretchesTheWindow(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_000_000, 0))
	c := memoryService(t, clock)
	for range 10 {
		ask(t, c, overridden(desc("api_key", "k"), 10, typev3.RateLimitUnit_MINUTE, 60))
	}
	clock.Advance(5 * time.Minute)
	if r := ask(t, c, overridden(desc("api_key", "k"), 10, typev3.RateLimitUnit_MINUTE, 60)); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("5 minutes after 10 of 10 per 60 minutes: %v, want still over (one token every 6 minutes)", r)
	}
	clock.Advance(time.Minute)
	if r := ask(t, c, overridden(desc("api_key", "k"), 10, typev3.RateLimitUnit_MINUTE, 60)); r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("6 minutes after: %v, want one token back", r)
	}
}

// TestAnOverriddenDescriptorReplacesNothing: envoyproxy/ratelimit gives a
// descriptor with its own limit a limit with no name and no replaces, and
// does not look it up in the tree (GetLimit returns early), so the limit
// the tree has at its entries replaces nothing and is not counted.
func TestAnOverriddenDescriptorReplacesNothing(t *testing.T) {
	c := memoryService(t, limiter.NewManualClock(time.Unix(1_000_000, 0)))
	r := ask(t, c, desc("api_key", "k"), overridden(desc("tier", "gold", "user", "u"), 5, typev3.RateLimitUnit_MINUTE, 0))
	if r.Statuses[0].CurrentLimit.GetName() != "per-key" || r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("per-key beside an overridden gold-user descriptor: %v, want per-key counted", r)
	}
	if r.Statuses[1].CurrentLimit.GetName() != "" || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Fatalf("the overridden descriptor: %v, want its own limit, unnamed", r.Statuses[1])
	}
}

// TestShadowLimitsEachDecideOnTheirOwn: two shadow limits in one request,
// one spent: the other still counts the request (DESIGN.md: each decides
// as if it were the only shadow policy).
func TestShadowLimitsEachDecideOnTheirOwn(t *testing.T) {
	cfg := mustConfig(t, `domain: edge
descriptors:
  - key: small
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: large
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	c := serve(t, NewService(cfg, ServiceOptions{Hash: plainHash, Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_000_000, 0)))}))
	for want := uint32(4); want >= 2; want-- {
		r := ask(t, c, desc("small", "s"), desc("large", "l"))
		if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[1].LimitRemaining != want {
			t.Fatalf("large: %v, want %d left (it pays whatever small does)", r, want)
		}
	}
}
