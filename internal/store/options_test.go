package store

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/limiter/resilient"
)

// TestTheStoreRunsWithTheDocumentedDefaults: the libraries take their
// numbers as given, so the store must be built with the values config
// filled in. A
// file that leaves the store's settings out runs with the documented
// defaults (docs/configuration.md), and one that sets them with its own,
// an empty key prefix included.
func TestTheStoreRunsWithTheDocumentedDefaults(t *testing.T) {
	const policy = "policies: [{name: p, key: [client_ip], capacity: 5, refill_per_second: 1}]\n"
	half, _ := resilient.NewShare(1, 2)
	for _, tc := range []struct {
		name, store string
		timeout     time.Duration
		breaker     resilient.BreakerOptions
		share       resilient.Share
		key         string // of bucket (p, x)
	}{
		{"left out", `{backend: redis, on_failure: local, redis: {addresses: ["127.0.0.1:1"]}}`,
			50 * time.Millisecond, resilient.BreakerOptions{Failures: 5, OpenFor: 500 * time.Millisecond}, resilient.Whole, "fg:p:{x}"},
		{"set", `{backend: redis, on_failure: local, local_share: 0.5, breaker: {failures: 2, open_for: 1s}, redis: {addresses: ["127.0.0.1:1"], timeout: 20ms, prefix: ""}}`,
			20 * time.Millisecond, resilient.BreakerOptions{Failures: 2, OpenFor: time.Second}, half, "p:{x}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("t.yaml", []byte("store: "+tc.store+"\n"+policy))
			if err != nil {
				t.Fatal(err)
			}
			opts, err := ResilientOptions(cfg, zap.NewNop(), prometheus.NewRegistry(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.share; opts.Timeout != tc.timeout || opts.Breaker != tc.breaker || opts.FallbackShare != want {
				t.Errorf("resilience options: timeout %v, breaker %+v, share %v; want %v, %+v, %v", opts.Timeout, opts.Breaker, opts.FallbackShare, tc.timeout, tc.breaker, want)
			}
			ro, err := cfg.RedisOptions()
			if err != nil {
				t.Fatal(err)
			}
			client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled here
			defer client.Close()
			rstore := NewRedis(cfg.Store.Redis, client, ro.Prefix, prometheus.NewRegistry())
			defer rstore.Close()
			if k := rstore.Key("p", "x"); k != tc.key {
				t.Errorf("key %q, want %q", k, tc.key)
			}
			m, stop := NewMemory(cfg.Store.Memory)
			defer stop()
			opts.Fallback = m
			opts.ProbeInterval = 0 // nothing to probe here
			rs, err := resilient.New(rstore, opts)
			if err != nil {
				t.Fatalf("the resilience layer refused the configuration's values: %v", err)
			}
			rs.Close()
		})
	}
}
