package main

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestServeWarnsWhenRedisCanEvictBuckets: serve reads the maxmemory-policy
// of the Redis it starts on and warns, saying what to set, when a full Redis
// would evict buckets (an evicted bucket starts full again); a noeviction
// server, Redis' own default, gets no warning.
func TestServeWarnsWhenRedisCanEvictBuckets(t *testing.T) {
	for _, tc := range []struct {
		policy string
		warns  bool
	}{{"allkeys-lru", true}, {"volatile-lfu", true}, {"noeviction", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			r := redistest.Start(t, "--maxmemory-policy", tc.policy)
			p := startFloodgate(t, `listen: {grpc: "127.0.0.1:0", admin: ""}
store: {backend: redis, redis: {addresses: ["`+r.Addr+`"]}}
policies:
  - {name: api, key: [client_ip], capacity: 5, refill_per_second: 1}
`)
			want := "has maxmemory-policy " + tc.policy
			if got := strings.Contains(p.Output(), want); got != tc.warns {
				t.Fatalf("log has %q: %v, want %v\n%s", want, got, tc.warns, p.Output())
			}
			if tc.warns && !strings.Contains(p.Output(), "set maxmemory-policy noeviction") {
				t.Errorf("the warning does not say what to set:\n%s", p.Output())
			}
		})
	}
}
