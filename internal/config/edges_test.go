package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/limiter/fielderr"
)

// problemsFor parses and resolves y and returns its problems, failing
// when it loads.
func problemsFor(t *testing.T, y string) fielderr.List {
	t.Helper()
	_, err := parseResolved("bad.yaml", []byte(y))
	var ps fielderr.List
	if !errors.As(err, &ps) {
		t.Fatalf("err = %v, want a fielderr.List", err)
	}
	return ps
}

// aliasBomb is a small file whose aliases expand to keys × refs values: one
// anchored policy with keys key sources, referenced refs times.
func aliasBomb(keys, refs int) string {
	var b strings.Builder
	b.WriteString("policies:\n  - &p {name: a, capacity: 1, refill_per_second: 1, key: [")
	for i := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("client_ip")
	}
	b.WriteString("]}\n")
	for range refs {
		b.WriteString("  - *p\n")
	}
	return b.String()
}

// TestAliasExpansionIsBounded: a file whose aliases expand to millions of
// values (4,000 key sources referenced 4,000 times: 72 KB that took 22 s
// and 1.8 GB) is refused, naming the alias, before anything is decoded;
// a few aliases still work.
func TestAliasExpansionIsBounded(t *testing.T) {
	bomb := aliasBomb(4000, 4000)
	if len(bomb) > 100_000 {
		t.Fatalf("the bomb is %d bytes, not the small file it should be", len(bomb))
	}
	ps := problemsFor(t, bomb)
	if len(ps) != 1 || !strings.Contains(ps[0].Error(), fmt.Sprintf("YAML aliases in this file expand to more than %d values", maxAliasedValues)) || ps[0].Line < 3 {
		t.Fatalf("problems %q, want one naming the alias expansion at an alias's line", ps)
	}

	small := "policies:\n  - &p {name: a, key: [client_ip], capacity: 1, refill_per_second: 1, match: &m {path_prefix: /a}}\n  - {name: b, key: [client_ip], capacity: 2, refill_per_second: 1, match: *m}\n"
	c, err := Parse("ok.yaml", []byte(small))
	if err != nil {
		t.Fatalf("a file with a small alias: %v", err)
	}
	if c.Policies[1].Match.PathPrefix != "/a" {
		t.Errorf("the alias was not followed: %+v", c.Policies[1].Match)
	}
}

// TestIntegersAreCheckedAgainstTheTypeTheyBecome: a value that would wrap
// when narrowed (max_concurrent_streams is a uint32 for gRPC) or that does
// not fit the field at all is one clear problem, not a silent wrap nor
// three lines ending in "got 0".
func TestIntegersAreCheckedAgainstTheTypeTheyBecome(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"a stream limit that wraps to 1", "listen:\n  max_concurrent_streams: 4294967297\n" + goodPolicy,
			"bad.yaml:2: listen.max_concurrent_streams: must be between 1 and 4294967295 (got 4294967297)"},
		{"a capacity beyond 64 bits", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 99999999999999999999\n    refill_per_second: 1\n",
			"bad.yaml:4: policies[0].capacity: is too large: at most 9223372036854775807 (got 99999999999999999999)"},
		{"a capacity of 2^63", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 9223372036854775808\n    refill_per_second: 1\n",
			"bad.yaml:4: policies[0].capacity: is too large: at most 9223372036854775807 (got 9223372036854775808)"},
		{"a capacity that is a boolean", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: true\n    refill_per_second: 1\n",
			`bad.yaml:4: policies[0].capacity: must be a whole number (got "true")`},
		{"a negative beyond 64 bits", "store:\n  memory:\n    max_buckets: -99999999999999999999\n" + goodPolicy,
			"bad.yaml:3: store.memory.max_buckets: is too small: at least -9223372036854775808 (got -99999999999999999999)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := problemsFor(t, tc.yaml)
			if len(ps) != 1 || ps[0].Error() != tc.want {
				t.Fatalf("problems:\n%s\nwant exactly:\n%s", ps, tc.want)
			}
		})
	}
	if _, err := Parse("ok.yaml", []byte("policies:\n  - {name: a, key: [client_ip], capacity: 1, refill_per_second: 1125899906842}\n")); err != nil {
		t.Errorf("the largest rate said to be exact: %v", err)
	}
	c, err := Parse("ok.yaml", []byte("listen:\n  max_concurrent_streams: 4294967295\n"+goodPolicy))
	if err != nil || c.Listen.MaxConcurrentStreams != 1<<32-1 {
		t.Fatalf("the largest uint32: %v", err)
	}
}

// TestMessagesSayWhatIsWrong: each of these once produced a message that
// blamed the wrong thing or none.
func TestMessagesSayWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // lines, in order; nothing else
	}{
		{"a key set twice does not also empty the policies", "policies:\n  - {name: a, key: [client_ip], capacity: 1, refill_per_second: 1}\npolicies:\n  - {name: b, key: [client_ip], capacity: 1, refill_per_second: 1}\n",
			[]string{"bad.yaml:3: policies: is set twice (also on line 1); YAML reads neither"}},
		{"a key set twice inside a policy", "policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    capacity: 2\n    refill_per_second: 1\n",
			[]string{"bad.yaml:5: policies[0].capacity: is set twice (also on line 4); YAML reads neither"}},
		{"a second document", goodPolicy + "---\npolicies: []\n",
			[]string{"bad.yaml:7: a second YAML document (after ---) is not read: put the whole configuration in one document"}},
		{"an unset password variable", "store:\n  backend: redis\n  redis:\n    addresses: [\"127.0.0.1:6379\"]\n    password_env: FG_TEST_SURELY_UNSET\n" + goodPolicy,
			[]string{"bad.yaml:5: store.redis.password_env: environment variable FG_TEST_SURELY_UNSET is not set"}},
		{"not UTF-8", goodPolicy + "# caf\xe9\n",
			[]string{"bad.yaml:7: is not UTF-8 text: save the file as UTF-8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := problemsFor(t, tc.yaml)
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

// TestValidateRefusesWhatDialRefuses: settings only the Redis client used to
// check (so `validate` said ok and `serve` exited 1) are reported by
// validation, at their line, with redisstore's own words.
func TestValidateRefusesWhatDialRefuses(t *testing.T) {
	redis := func(body string) string {
		return "store:\n  backend: redis\n  redis:\n" + body + goodPolicy
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"port 0", redis("    addresses: [\"127.0.0.1:0\"]\n"),
			`bad.yaml:4: store.redis.addresses[0]: address "127.0.0.1:0": port "0" is not a number from 1 to 65535`},
		{"a brace in the prefix", redis("    addresses: [\"127.0.0.1:6379\"]\n    prefix: \"fg{x}:\"\n"),
			`bad.yaml:5: store.redis.prefix: key prefix "fg{x}:" contains a brace`},
		{"a username without a password", redis("    addresses: [\"127.0.0.1:6379\"]\n    username: app\n"),
			`bad.yaml:5: store.redis.username: username "app" has no password`},
		{"an address twice", redis("    addresses: [\"a:1\", \"a:1\"]\n"),
			`bad.yaml:4: store.redis.addresses[1]: address "a:1" is listed twice`},
		{"more idle connections than the pool", redis("    addresses: [\"a:1\"]\n    pool_size: 2\n    min_idle_conns: 3\n"),
			`bad.yaml:6: store.redis.min_idle_conns: min idle connections (3) exceed the pool size (2)`},
		{"a certificate without its key", redis("    addresses: [\"a:1\"]\n    tls:\n      cert_file: /nonexistent/c.pem\n"),
			`bad.yaml:6: store.redis.tls.cert_file: TLS client certificate and key go together`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := problemsFor(t, tc.yaml)
			if !strings.Contains(ps.Error(), tc.want) {
				t.Fatalf("problems:\n%s\nwant a line containing:\n%s", ps, tc.want)
			}
		})
	}
}

// TestARestartOnlyChangeIsNamed: a reload applies policies only; the
// sections read at start are named when the new file changes them.
func TestARestartOnlyChangeIsNamed(t *testing.T) {
	base := mustParse(t, goodPolicy)
	for _, tc := range []struct {
		yaml string
		want string
	}{
		{strings.Replace(goodPolicy, "capacity: 10", "capacity: 11", 1), ""},
		{"client_ip: {trusted_hops: 1}\n" + goodPolicy, ""},
		{"listen: {grpc: \"127.0.0.1:9999\"}\n" + goodPolicy, "listen"},
		{"store: {backend: memory, memory: {max_buckets: 10}}\nlog: {level: debug}\n" + goodPolicy, "store log"},
		{"runtime: {gogc: 100}\nreload: {interval: 5s}\n" + goodPolicy, "runtime reload"},
	} {
		if got := strings.Join(base.RestartOnlyChanges(mustParse(t, tc.yaml)), " "); got != tc.want {
			t.Errorf("%q: restart-only changes %q, want %q", tc.yaml, got, tc.want)
		}
	}
	base.Log.Format = "console" // as serve --log-format does: not a change in the file
	if got := base.RestartOnlyChanges(base); len(got) != 0 {
		t.Errorf("an override at start counted as a change: %q", got)
	}
}
