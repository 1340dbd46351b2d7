package rls

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// BenchmarkDeniedWithRecorder measures a denied ShouldRateLimit (in
// process, on the in-memory store) without and with the recorder of who is
// limited: what reporting to /debug/limited costs per request.
func BenchmarkDeniedWithRecorder(b *testing.B) {
	for _, withRecorder := range []bool{false, true} {
		b.Run("recorder="+strconv.FormatBool(withRecorder), func(b *testing.B) {
			cfg, err := Parse([]string{"b.yaml"}, map[string][]byte{"b.yaml": []byte(recordConfig)})
			if err != nil {
				b.Fatal(err)
			}
			o := ServiceOptions{Hash: digest, Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_000_000, 0)))}
			if withRecorder {
				o.Recorder = limited.New(limited.DefaultOptions())
			}
			s := NewService(cfg, o)
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("generic_key", "api", "api_key", "k")}}
			for range 3 {
				s.ShouldRateLimit(context.Background(), req) // spend the bucket
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if r, _ := s.ShouldRateLimit(context.Background(), req); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
					b.Fatal("not denied")
				}
			}
		})
	}
}

// BenchmarkAllowed measures an allowed ShouldRateLimit of one descriptor
// (in process, on the in-memory store), a fresh caller each time as
// (b-rls) sends: what the door adds to the decision.
func BenchmarkAllowed(b *testing.B) {
	cfg, err := Parse([]string{"b.yaml"}, map[string][]byte{"b.yaml": []byte("domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n")})
	if err != nil {
		b.Fatal(err)
	}
	s := NewService(cfg, ServiceOptions{Hash: digest, Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_000_000, 0)))})
	reqs := make([]*rlsv3.RateLimitRequest, 4096)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1, Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k_live_" + strconv.Itoa(10_000_000+i)}}}}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if r, _ := s.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); r.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatal("not allowed")
		}
	}
}
