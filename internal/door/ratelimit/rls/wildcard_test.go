package rls

import "testing"

// TestAWildcardMatchesAnywhereInAValue pins envoyproxy/ratelimit's
// matching of a `*` anywhere in a configured value since 2026-03
// (wildcardMatch and GetLimit, src/config/config_impl.go at its HEAD; the
// cases of its TestWildcardConfig, test/config/config_test.go): each `*`
// matches any run of characters, the empty one included, the literal parts
// in order, the first at the start and the last at the end; an exact
// key_value is preferred, then the wildcards in file order, then the key
// alone. The version the Go module proxy serves predates it, so the
// differential test cannot run it: this table is the reference.
func TestAWildcardMatchesAnywhereInAValue(t *testing.T) {
	cfg := mustConfig(t, `domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 21}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*/items
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: path
    value: /api/v2/items
    rate_limit: {unit: minute, requests_per_unit: 31}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 32}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 33}
  - key: host
    value: "*.example.com"
    descriptors:
      - key: path
        value: "*/admin/*"
        rate_limit: {unit: minute, requests_per_unit: 40}
  - key: same
    value: a*a
    rate_limit: {unit: minute, requests_per_unit: 50}
`)
	for _, c := range []struct {
		entries []Entry
		key     string // "" for none
	}{
		{kv("wild", "foo1"), "test-domain.wild_foo*"},
		{kv("wild", "foo"), "test-domain.wild_foo*"},
		{kv("wild", "bar"), ""},
		{kv("midWild", "barab"), "test-domain.midWild_bar*b"},
		{kv("midWild", "bar123b"), "test-domain.midWild_bar*b"},
		{kv("midWild", "barb"), "test-domain.midWild_bar*b"},
		{kv("midWild", "bara"), ""},
		{kv("midWild", "xbarb"), ""},
		{kv("multiWild", "foo123bar456baz"), "test-domain.multiWild_foo*bar*baz"},
		{kv("multiWild", "foobarbaz"), "test-domain.multiWild_foo*bar*baz"},
		{kv("multiWild", "foo123baz"), ""},
		{kv("multiWild", "bar456baz"), ""},
		{kv("multiWild", "foobazbarbaz"), "test-domain.multiWild_foo*bar*baz"},
		{kv("path", "/api/v1/items"), "test-domain.path_/api/*/items"},
		{kv("path", "/api/v2/items"), "test-domain.path_/api/v2/items"}, // the exact value first
		{kv("path", "/api/v1/orders"), "test-domain.path_/api/*"},       // the first wildcard that matches
		{kv("path", "/health"), "test-domain.path"},                     // the key alone last
		{kv("host", "api.example.com", "path", "/v1/admin/users"), "test-domain.host_*.example.com.path_*/admin/*"},
		{kv("host", "example.com", "path", "/v1/admin/users"), ""},
		{kv("same", "a"), ""}, // the literal parts may not overlap
		{kv("same", "aa"), "test-domain.same_a*a"},
	} {
		got := cfg.Select("test-domain", c.entries)
		switch {
		case c.key == "" && got != nil:
			t.Errorf("%s: selected %s, want none", entriesString(c.entries), got.Key)
		case c.key != "" && (got == nil || got.Key != c.key):
			t.Errorf("%s: selected %+v, want %s", entriesString(c.entries), got, c.key)
		}
	}
}
