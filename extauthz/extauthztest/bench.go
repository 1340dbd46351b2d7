package extauthztest

import (
	"context"
	"sync/atomic"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// BenchmarkChecks sends reqs through client once, so that their buckets
// exist as in the steady state, then times Checks of them with 64 in
// flight (32 goroutines a processor on 2 cores), each of which must be
// allowed.
func BenchmarkChecks(b *testing.B, client authv3.AuthorizationClient, reqs []*authv3.CheckRequest) {
	ctx := context.Background()
	for _, r := range reqs {
		if _, err := client.Check(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	var worker atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 101
		for pb.Next() {
			resp, err := client.Check(ctx, reqs[i%len(reqs)])
			i++
			if allowed := resp.GetStatus().GetCode() == 0; err != nil || !allowed {
				b.Errorf("Check: %v (allowed %v)", err, allowed)
				return
			}
		}
	})
}
