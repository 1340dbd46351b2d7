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
