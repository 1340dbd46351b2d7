package doors

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

const goodPolicy = `
policies:
  - name: api
    key: [client_ip]
    capacity: 10
    refill_per_second: 2
`

// parseResolved is what serve loads from a file's content.
func parseResolved(file, data string) (*door.Config, error) { return LoadBytes(file, []byte(data)) }

// TestBrokenConfigsNameFileAndLine is the table of mistakes a user can make;
// each must be reported at its line with a message that says what to fix.
func TestBrokenConfigsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"an unknown top-level key", "listne: {grpc: 1.2.3.4:5}\n" + goodPolicy,
			[]string{`bad.yaml:1: unknown key "listne" in the top level (known: admin_api, client_ip, headers, http_authz, identity, listen, log, policies, reload, rls, runtime, store)`}},
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
		{"no front end", "listen: {grpc: \"127.0.0.1:1\"}\n",
			[]string{`bad.yaml: policies: no front end is configured: list at least one policy (Envoy's ext_authz Check) or set rls.config or rls.xds (Envoy's rate limit service)`}},
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
		{"case_sensitive without a path", "policies:\n  - name: a\n    match:\n      methods: [GET]\n      case_sensitive: false\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n",
			[]string{`bad.yaml:5: policies[0].match.case_sensitive: applies to path and path_prefix`}},
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
			_, err := parseResolved("bad.yaml", tc.yaml)
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

// TestMessagesSayWhatIsWrong: each of these once produced a message that
// blamed the wrong thing or none.
func TestMessagesSayWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // lines, in order; nothing else
	}{
		{"a rate beyond 64 bits", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1e308\n",
			[]string{`bad.yaml:5: policies[0].refill_per_second: limiter: refill rate too large or too finely divided for exact integer arithmetic (got "1e308"; a whole number of tokens a second up to 1125899906842 is always exact)`}},
		{"a rate of 2^63", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 9223372036854775808\n",
			[]string{`bad.yaml:5: policies[0].refill_per_second: limiter: refill rate too large or too finely divided for exact integer arithmetic (got "9223372036854775808"; a whole number of tokens a second up to 1125899906842 is always exact)`}},
		{"a huge rate is not blamed on the capacity", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1125899906843\n",
			[]string{`bad.yaml:5: policies[0].refill_per_second: limiter: refill rate too large or too finely divided for exact integer arithmetic (got 1125899906843; a whole number of tokens a second up to 1125899906842 is always exact)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.yaml))
			var ps fielderr.List
			if !errors.As(err, &ps) {
				t.Fatalf("err = %v, want a fielderr.List", err)
			}
			got := make([]string, len(ps))
			for i, p := range ps {
				got[i] = p.Error()
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
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
			s1 := c.HashSecret()
			c2, err := LoadOffline(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(s1) < 16 || string(s1) == string(c2.HashSecret()) {
				t.Errorf("the replacement secret should be random per load: %x, %x", s1, c2.HashSecret())
			}
		})
	}
	t.Run("readable secret is used", func(t *testing.T) {
		t.Setenv("FG_TEST_OFFLINE_SET", "0123456789abcdef-offline")
		c, err := LoadOffline(write("set.yaml", "identity: {hash_secret_env: FG_TEST_OFFLINE_SET}"))
		if err != nil {
			t.Fatal(err)
		}
		if c.SecretReplaced != "" || string(c.HashSecret()) != "0123456789abcdef-offline" {
			t.Errorf("SecretReplaced %q, secret %q: want the configuration's own", c.SecretReplaced, c.HashSecret())
		}
	})
	t.Run("both file and env is the file's mistake", func(t *testing.T) {
		_, err := LoadOffline(write("both.yaml", "identity: {hash_secret_file: "+missing+", hash_secret_env: FG_TEST_OFFLINE_UNSET}"))
		if err == nil || !strings.Contains(err.Error(), "give one") {
			t.Errorf("LoadOffline: %v, want the both-set problem", err)
		}
	})
}

// TestReadingAConfigIsBounded: /dev/zero, a FIFO nobody writes and a file
// over 1 MiB are refused at once, without reading them to the end.
func TestReadingAConfigIsBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", config.MaxFileBytes)+"\n"+goodPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/dev/zero", "/dev/zero: not a regular file"},
		{fifo, fifo + ": not a regular file"},
		{dir, dir + ": not a regular file"},
		{big, big + ": larger than 1048576 bytes"},
		{filepath.Join(dir, "missing.yaml"), "missing.yaml: no such file"},
	} {
		done := make(chan error, 1)
		go func() { _, err := Load(tc.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load(%s) = %v, want an error containing %q", tc.path, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Load(%s) still reading after 10s", tc.path) // the FIFO's open blocked
		}
	}
	at := filepath.Join(dir, "at-limit.yaml")
	content := goodPolicy + "# "
	content += strings.Repeat("x", config.MaxFileBytes-len(content)-1) + "\n"
	if err := os.WriteFile(at, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(at); err != nil {
		t.Errorf("a file of exactly %d bytes: %v", config.MaxFileBytes, err)
	}
}
