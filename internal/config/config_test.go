package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const goodPolicy = `
policies:
  - name: api
    key: [client_ip]
    capacity: 10
    refill_per_second: 2
`

// mustParse parses y, failing the test when it has problems.
func mustParse(t *testing.T, y string) *Config {
	t.Helper()
	c, err := Parse("ok.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantProblem parses y and requires a problem containing want.
func wantProblem(t *testing.T, y, want string) {
	t.Helper()
	if _, err := Parse("bad.yaml", []byte(y)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%q: got %v, want a problem containing %s", y, err, want)
	}
}

func TestTheEmbeddedDefaultIsValid(t *testing.T) {
	c := Default()
	if c.Store.Backend != "memory" || c.Listen.GRPC != "127.0.0.1:9191" || len(c.Policies) != 1 {
		t.Errorf("default: backend %s grpc %s policies %d", c.Store.Backend, c.Listen.GRPC, len(c.Policies))
	}
}

func TestDefaultsFillWhatTheFileLeavesOut(t *testing.T) {
	c := mustParse(t, goodPolicy)
	if c.Listen.GRPC != DefaultGRPC || c.Store.Backend != "memory" || c.Store.OnFailure != "allow" {
		t.Errorf("defaults: %+v", c)
	}
	// Settings a library reads are filled here too, with the documented
	// values: the libraries take what they are given (one home per default).
	o, err := c.RedisOptions()
	if err != nil || o.Timeout != 50*time.Millisecond || o.DialTimeout != 250*time.Millisecond || o.Prefix != "fg:" {
		t.Errorf("redis: timeout %v, dial timeout %v, prefix %q (%v); want the documented 50ms, 250ms, fg:", o.Timeout, o.DialTimeout, o.Prefix, err)
	}
	s := c.Store
	if s.Memory.MaxBuckets != 1<<20 {
		t.Errorf("memory.max_buckets %d, want the documented 1048576", s.Memory.MaxBuckets)
	}
	if s.Breaker.Failures != 5 || s.Breaker.OpenFor.Duration != 500*time.Millisecond {
		t.Errorf("breaker: failures %d, open_for %v; want the documented 5, 500ms", s.Breaker.Failures, s.Breaker.OpenFor.Duration)
	}
	if s.LocalShare == nil || *s.LocalShare != 1 {
		t.Errorf("local_share %v, want the documented 1", s.LocalShare)
	}
	// The constants say the same as the documentation.
	if DefaultRedisTimeout != 50*time.Millisecond || DefaultRedisDialTimeout != 250*time.Millisecond || DefaultRedisPrefix != "fg:" ||
		DefaultMaxBuckets != 1<<20 || DefaultBreakerFailures != 5 || DefaultBreakerOpenFor != 500*time.Millisecond || DefaultLocalShare != 1 {
		t.Error("a store default constant differs from its documented value")
	}
}

// TestExplicitStoreSettingsAreKept: a value the file gives is the value
// used, an empty prefix included (no prefix, not the default one).
func TestExplicitStoreSettingsAreKept(t *testing.T) {
	c := mustParse(t, `store:
  backend: redis
  redis: {addresses: ["r:6379"], timeout: 20ms, dial_timeout: 1s, prefix: ""}
  memory: {max_buckets: 1000}
  breaker: {failures: 2, open_for: 3s}
  on_failure: local
  local_share: 0.25
`+goodPolicy)
	o, err := c.RedisOptions()
	if err != nil || o.Timeout != 20*time.Millisecond || o.DialTimeout != time.Second || o.Prefix != "" {
		t.Errorf("redis: timeout %v, dial timeout %v, prefix %q (%v); want 20ms, 1s, none", o.Timeout, o.DialTimeout, o.Prefix, err)
	}
	s := c.Store
	if s.Memory.MaxBuckets != 1000 || s.Breaker.Failures != 2 || s.Breaker.OpenFor.Duration != 3*time.Second || *s.LocalShare != 0.25 {
		t.Errorf("max_buckets %d, breaker %d/%v, local_share %v; want 1000, 2/3s, 0.25", s.Memory.MaxBuckets, s.Breaker.Failures, s.Breaker.OpenFor.Duration, *s.LocalShare)
	}
	c = mustParse(t, "store: {redis: {prefix: \"rl:\"}}\n"+goodPolicy)
	if c.Store.Redis.Prefix != "rl:" {
		t.Errorf("prefix %q, want rl:", c.Store.Redis.Prefix)
	}
	// The libraries' lower bounds are the file's too: a zero the file
	// gives is refused, never taken for "the default".
	for _, tc := range []struct{ yaml, want string }{
		{"store:\n  redis:\n    timeout: 0s\n", `bad.yaml:3: store.redis.timeout: must be between 1ms and 10s`},
		{"store:\n  redis:\n    dial_timeout: 0s\n", `bad.yaml:3: store.redis.dial_timeout: must be between 1ms and 1m`},
		{"store:\n  breaker:\n    open_for: 0s\n", `bad.yaml:3: store.breaker.open_for: must be between 1ms and 1m`},
		{"store:\n  breaker:\n    failures: -1\n", `bad.yaml:3: store.breaker.failures: must be between 1 and`},
		{"store:\n  memory:\n    max_buckets: -1\n", `bad.yaml:3: store.memory.max_buckets: must be between 1 and`},
	} {
		wantProblem(t, tc.yaml+goodPolicy, tc.want)
	}
}

func TestAFullConfigurationLoads(t *testing.T) {
	y := `
listen: {grpc: "0.0.0.0:9191", admin: "0.0.0.0:9192"}
store:
  backend: redis
  redis: {addresses: ["redis:6379"], timeout: 30ms, prefix: "rl:"}
  on_failure: deny
client_ip: {trusted_hops: 1, ipv6_prefix: 56}
headers: [structured]
log: {format: console, level: debug}
policies:
  - name: api-per-key
    match:
      path_prefix: /api/
      methods: [get, POST]
      hosts: ["*.example.com", api.example.org]
      headers: [{name: x-tier, value: gold}, {name: x-debug, present: false}]
      context: {route: items}
    key: [header:x-api-key, "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub", context:tenant, fingerprint, client_ip]
    fingerprint_headers: [user-agent, x-ja4]
    on_missing_key: skip
    capacity: 100
    refill_per_second: 1/60
    cost_header: x-cost
    max_cost: 20
    mode: shadow
`
	c := mustParse(t, y)
	if c.Store.Redis.Timeout != 30*time.Millisecond || c.Store.OnFailure != "deny" || len(c.Policies) != 1 || c.Policies[0].Mode != "shadow" {
		t.Errorf("loaded: %+v", c.Store)
	}
}

func TestTheHashSecretComesFromAFileOrTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "secret")
	os.WriteFile(f, []byte("0123456789abcdef0123\n"), 0o600)
	if _, err := parseResolved("ok.yaml", []byte("identity: {hash_secret_file: "+f+"}\n"+goodPolicy)); err != nil {
		t.Errorf("secret file: %v", err)
	}
	os.WriteFile(f, []byte("short"), 0o600)
	if _, err := parseResolved("bad.yaml", []byte("identity: {hash_secret_file: "+f+"}\n"+goodPolicy)); err == nil || !strings.Contains(err.Error(), "use at least 16") {
		t.Errorf("short secret: %v", err)
	}
	t.Setenv("FG_TEST_SECRET", "0123456789abcdef-env")
	if _, err := parseResolved("ok.yaml", []byte("identity: {hash_secret_env: FG_TEST_SECRET}\n"+goodPolicy)); err != nil {
		t.Errorf("secret env: %v", err)
	}
	if _, err := parseResolved("bad.yaml", []byte("identity: {hash_secret_env: FG_TEST_UNSET_VARIABLE}\n"+goodPolicy)); err == nil || !strings.Contains(err.Error(), "is not set") {
		t.Errorf("unset env: %v", err)
	}
}
