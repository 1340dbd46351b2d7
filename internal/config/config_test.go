package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/fielderr"
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
	if c.Store.Backend != "memory" || c.Listen.GRPC != "127.0.0.1:9191" || len(c.Engine.Policies) != 1 {
		t.Errorf("default: backend %s grpc %s policies %d", c.Store.Backend, c.Listen.GRPC, len(c.Engine.Policies))
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
	if c.Store.Redis.Timeout != 30*time.Millisecond || c.Store.OnFailure != "deny" || len(c.Engine.Policies) != 1 || !c.Engine.Policies[0].Shadow {
		t.Errorf("loaded: %+v", c.Store)
	}
}

// TestBrokenConfigsNameFileAndLine is the table of mistakes a user can make;
// each must be reported at its line with a message that says what to fix.
func TestBrokenConfigsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"an unknown top-level key", "listne: {grpc: 1.2.3.4:5}\n" + goodPolicy,
			[]string{`bad.yaml:1: unknown key "listne" in the top level (known: client_ip, headers, identity, listen, log, policies, reload, rls, runtime, store)`}},
		{"an unknown nested key", "store:\n  redis:\n    adresses: [a:1]\n" + goodPolicy,
			[]string{`bad.yaml:3: unknown key "adresses" in store.redis`}},
		{"an unknown policy key", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n    burst: 5\n",
			[]string{`bad.yaml:6: unknown key "burst" in policies[0]`}},
		{"a bad duration", "store:\n  redis:\n    timeout: 50 ms\n" + goodPolicy,
			[]string{`bad.yaml:3: store.redis.timeout: must be a duration such as 50ms or 1.5s (got "50 ms")`}},
		{"a timeout of zero", "store:\n  redis:\n    timeout: 0s\n" + goodPolicy,
			[]string{`bad.yaml:3: store.redis.timeout: must be between 1ms and 10s`}},
		{"an unknown backend", "store:\n  backend: etcd\n" + goodPolicy,
			[]string{`bad.yaml:2: store.backend: must be redis or memory (got "etcd")`}},
		{"redis without addresses", "store:\n  backend: redis\n" + goodPolicy,
			[]string{`bad.yaml:1: store.redis.addresses: must list at least one host:port`}},
		{"an unknown failure mode", "store:\n  on_failure: panic\n" + goodPolicy,
			[]string{`bad.yaml:2: store.on_failure: must be allow, deny or local (got "panic")`}},
		{"a listen address without a port", "listen:\n  grpc: localhost\n" + goodPolicy,
			[]string{`bad.yaml:2: listen.grpc: must be host:port (got "localhost")`}},
		{"no policies", "listen: {grpc: \"127.0.0.1:1\"}\n",
			[]string{`bad.yaml: policies: must list at least one policy`}},
		{"capacity zero", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 0\n    refill_per_second: 1\n",
			[]string{`bad.yaml:4: policies[0].capacity: must be a whole number > 0 (got 0)`}},
		{"a fractional capacity", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 2.5\n    refill_per_second: 1\n",
			[]string{`bad.yaml:4: policies[0].capacity: must be a whole number (got "2.5")`}},
		{"a negative rate", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: -2\n",
			[]string{`bad.yaml:5: policies[0].refill_per_second: must be a number > 0`}},
		{"a missing rate", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n",
			[]string{`bad.yaml:2: policies[0].refill_per_second: is required`}},
		{"a rate too fine for exact arithmetic", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 100000000000000\n    refill_per_second: 1/3600\n",
			[]string{`bad.yaml:4: policies[0].capacity: limiter: capacity and refill rate too large`}},
		{"an unknown key source", "policies:\n  - name: a\n    key: [client_ip, cookie:session]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:3: policies[0].key[1]: unknown key source "cookie:session"`}},
		{"a metadata source without a path", "policies:\n  - name: a\n    key: [\"metadata:envoy.filters.http.jwt_authn\"]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:3: policies[0].key[0]: metadata source is metadata:NAMESPACE:PATH`}},
		{"fingerprint without headers", "policies:\n  - name: a\n    key: [fingerprint]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:3: policies[0].key[0]: fingerprint needs fingerprint_headers`}},
		{"duplicate policy names", goodPolicy + "  - name: api\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:7: policies[1].name: duplicate policy name "api" (also policies[0])`}},
		{"a policy name with spaces", "policies:\n  - name: my policy\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:2: policies[0].name: must be 1-63 letters`}},
		{"an unknown mode", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n    mode: dryrun\n",
			[]string{`bad.yaml:6: policies[0].mode: must be enforce or shadow (got "dryrun")`}},
		{"a cost above the capacity", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 2\n    refill_per_second: 1\n    cost: 3\n",
			[]string{`bad.yaml:6: policies[0].cost: 3 exceeds the capacity 2`}},
		{"an unknown method", "policies:\n  - name: a\n    match:\n      methods: [GET, YEET]\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:4: policies[0].match.methods[1]: unknown HTTP method "YEET"`}},
		{"a path without a slash", "policies:\n  - name: a\n    match:\n      path_prefix: api/\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:4: policies[0].match.path_prefix: must start with /`}},
		{"a tcp policy keyed on a header", "policies:\n  - name: a\n    match: {protocol: tcp}\n    key: [header:x-api-key]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:4: policies[0].key[0]: a tcp policy is keyed by the connection's address`}},
		{"an unknown header family", "headers: [legacy, fancy]\n" + goodPolicy,
			[]string{`bad.yaml:1: headers[1]: unknown header family "fancy"`}},
		{"trusted hops out of range", "client_ip: {trusted_hops: -1}\n" + goodPolicy,
			[]string{`bad.yaml:1: client_ip.trusted_hops: must be between 0 and 63`}},
		{"a bad trusted CIDR", "client_ip:\n  trusted_cidrs: [10.0.0.0/8, tenfour]\n" + goodPolicy,
			[]string{`bad.yaml:2: client_ip.trusted_cidrs[1]: not a CIDR: "tenfour"`}},
		{"a list where a value belongs", "listen:\n  grpc: [a, b]\n" + goodPolicy,
			[]string{`bad.yaml:2: listen.grpc: must be a single value`}},
		{"a key set twice", "store:\n  backend: memory\n  backend: redis\n" + goodPolicy,
			[]string{`bad.yaml:3:`}},
		{"broken YAML", "policies:\n  - name: a\n   key: [client_ip\n", []string{`bad.yaml:1: did not find expected`}},
		{"a missing hash secret file", "identity: {hash_secret_file: /nonexistent/secret}\n" + goodPolicy,
			[]string{`bad.yaml:1: identity.hash_secret_file: open /nonexistent/secret`}},
		{"several mistakes at once", "store:\n  backend: etcd\npolicies:\n  - name: a\n    key: [nope]\n    capacity: -1\n    refill_per_second: 1\n",
			[]string{"bad.yaml:2: store.backend", "bad.yaml:5: policies[0].key[0]", "bad.yaml:6: policies[0].capacity"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseResolved("bad.yaml", []byte(tc.yaml))
			var ps fielderr.List
			if !errors.As(err, &ps) {
				t.Fatalf("err = %v, want a fielderr.List", err)
			}
			got := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems:\n%s\nwant a line containing:\n%s", got, w)
				}
			}
			if len(ps) < len(tc.want) {
				t.Errorf("%d problems reported, want at least %d", len(ps), len(tc.want))
			}
		})
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

// TestLoadOfflineReplacesASecretThisMachineLacks: a configuration whose
// hash secret lives on the production machines loads offline (replay) with
// a random secret, said once in SecretReplaced; Load stays strict; a
// mistake in the file itself (both file and env) is still refused.
func TestLoadOfflineReplacesASecretThisMachineLacks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, identity string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(identity+"\nlisten: {tls: {cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem}}\n"+goodPolicy), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, ok := os.LookupEnv("FG_TEST_OFFLINE_UNSET"); ok {
		t.Fatal("FG_TEST_OFFLINE_UNSET is set in this environment")
	}
	missing := filepath.Join(dir, "no-such-secret")
	for _, tc := range []struct{ name, identity, setting string }{
		{"file", "identity: {hash_secret_file: " + missing + "}", "identity.hash_secret_file"},
		{"env", "identity: {hash_secret_env: FG_TEST_OFFLINE_UNSET}", "identity.hash_secret_env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(tc.name+".yaml", tc.identity)
			if _, err := Load(p); err == nil || !strings.Contains(err.Error(), tc.setting) || !strings.Contains(err.Error(), "listen.tls") {
				t.Errorf("Load must stay strict about the secret and the TLS files: %v", err)
			}
			c, err := LoadOffline(p)
			if err != nil {
				t.Fatalf("LoadOffline: %v", err)
			}
			if !strings.HasPrefix(c.SecretReplaced, tc.setting+": ") {
				t.Errorf("SecretReplaced = %q, want it to name %s and why", c.SecretReplaced, tc.setting)
			}
			s1 := c.EngineOptions().HashSecret
			c2, err := LoadOffline(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(s1) < 16 || string(s1) == string(c2.EngineOptions().HashSecret) {
				t.Errorf("the replacement secret should be random per load: %x, %x", s1, c2.EngineOptions().HashSecret)
			}
		})
	}
	t.Run("readable secret is used", func(t *testing.T) {
		t.Setenv("FG_TEST_OFFLINE_SET", "0123456789abcdef-offline")
		c, err := LoadOffline(write("set.yaml", "identity: {hash_secret_env: FG_TEST_OFFLINE_SET}"))
		if err != nil {
			t.Fatal(err)
		}
		if c.SecretReplaced != "" || string(c.EngineOptions().HashSecret) != "0123456789abcdef-offline" {
			t.Errorf("SecretReplaced %q, secret %q: want the configuration's own", c.SecretReplaced, c.EngineOptions().HashSecret)
		}
	})
	t.Run("both file and env is the file's mistake", func(t *testing.T) {
		_, err := LoadOffline(write("both.yaml", "identity: {hash_secret_file: "+missing+", hash_secret_env: FG_TEST_OFFLINE_UNSET}"))
		if err == nil || !strings.Contains(err.Error(), "give one") {
			t.Errorf("LoadOffline: %v, want the both-set problem", err)
		}
	})
}
