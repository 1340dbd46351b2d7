package extauthz

import (
	"context"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// The Check benchmarks decide in the in-memory store, so what they measure
// is the handler: reading the request, matching, hashing identities,
// rendering the response. allocs/op is the number to watch (make bench-go
// prints it); docs/performance.md quotes it.

// benchKeys is how many distinct callers the benchmarks cycle through.
const benchKeys = 1024

// benchPolicies are the policies of the benchmark configurations: one per
// API key or client IP, and a second per client IP for the two-bucket case.
var (
	benchPerKey = PolicySpec{Name: "per-key", Match: MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"},
		Capacity: 1_000_000_000, RefillPerSecond: "1000000"}
	benchPerIP = PolicySpec{Name: "per-ip", Match: MatchSpec{PathPrefix: "/"}, Key: []string{"client_ip"},
		Capacity: 1_000_000_000, RefillPerSecond: "1000000"}
	benchTight = PolicySpec{Name: "tight", Match: MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key"},
		Capacity: 1, RefillPerSecond: "1/3600"}
)

// benchRequests are Envoy-shaped CheckRequests, one per caller (extauthztest.EnvoyRequests).
var benchRequests = extauthztest.EnvoyRequests

func benchServer(b *testing.B, policies ...PolicySpec) *Server {
	b.Helper()
	eng, err := Compile(policies, Options{HashSecret: []byte("benchmark-secret-0123456789")})
	if err != nil {
		b.Fatal(err)
	}
	return NewServer(eng, storetest.Memory(nil), ServerOptions{Registerer: prometheus.NewRegistry()})
}

func benchDirect(b *testing.B, s *Server, reqs []*authv3.CheckRequest, wantAllowed bool) {
	ctx := context.Background()
	// One pass to create the buckets: the steady state has them.
	for _, r := range reqs {
		s.Check(ctx, r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, _ := s.Check(ctx, reqs[i%len(reqs)])
		if allowed(resp) != wantAllowed {
			b.Fatalf("check %d: allowed = %v, want %v", i, allowed(resp), wantAllowed)
		}
	}
}

// BenchmarkCheckDirect calls Server.Check in-process: no gRPC, no network.
func BenchmarkCheckDirect(b *testing.B) {
	b.Run("allowed", func(b *testing.B) {
		benchDirect(b, benchServer(b, benchPerKey), benchRequests(benchKeys), true)
	})
	b.Run("two-policies", func(b *testing.B) {
		benchDirect(b, benchServer(b, benchPerKey, benchPerIP), benchRequests(benchKeys), true)
	})
	b.Run("denied", func(b *testing.B) {
		benchDirect(b, benchServer(b, benchTight), benchRequests(benchKeys), false)
	})
	b.Run("unmatched", func(b *testing.B) {
		reqs := benchRequests(benchKeys)
		for _, r := range reqs {
			r.Attributes.Request.Http.Path = "/health"
			r.Attributes.Request.Http.Headers[":path"] = "/health"
		}
		benchDirect(b, benchServer(b, benchPerKey), reqs, true)
	})
	b.Run("raw-header-map", func(b *testing.B) {
		benchDirect(b, benchServer(b, benchPerKey), []*authv3.CheckRequest{fixture(b, "checkrequest-raw-header-map-h2-tls.json")}, true)
	})
	b.Run("with-shadow", func(b *testing.B) {
		shadow := benchPerIP
		shadow.Name, shadow.Mode = "per-ip-shadow", "shadow"
		benchDirect(b, benchServer(b, benchPerKey, shadow), benchRequests(benchKeys), true)
	})
}

// BenchmarkCheckGRPC calls Check through a real gRPC connection on loopback
// (client and server in this process), 64 calls in flight, with gRPC's own
// protobuf codec (internal/door/check's BenchmarkCheckGRPC sets it beside
// the codec floodgate serve runs).
func BenchmarkCheckGRPC(b *testing.B) {
	client := authv3.NewAuthorizationClient(extauthztest.Serve(b, benchServer(b, benchPerKey)))
	reqs := benchRequests(benchKeys)
	extauthztest.BenchmarkChecks(b, client, reqs)
}
