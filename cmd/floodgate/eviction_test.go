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

// TestValidateConnectReadsEveryClusterMastersPolicy: in a Redis Cluster each
// master evicts on its own; validate --connect reads the policy of every
// one (INFO memory on each), here three that each evict.
func TestValidateConnectReadsEveryClusterMastersPolicy(t *testing.T) {
	c := redistest.StartCluster(t, 3, "--maxmemory-policy", "allkeys-lfu")
	code, out := validateConnect(t, redisConfig(`"`+c.Addrs()[0]+`"`, ", cluster: true"))
	if code != 0 {
		t.Fatalf("exit %d, want 0 (a warning is not a failure):\n%s", code, out)
	}
	for _, addr := range c.Addrs() {
		if !strings.Contains(out, "warning: redis "+addr+" has maxmemory-policy allkeys-lfu") {
			t.Errorf("no warning for master %s:\n%s", addr, out)
		}
	}
}
