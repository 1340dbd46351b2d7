package rls

import (
	"strings"
	"testing"
)

// TestTheYAMLEnvoyGatewayAndItsToolsWriteLoads: Envoy Gateway's dump of a
// rate limit configuration (GetRateLimitServiceConfigStr,
// internal/xds/translator/ratelimit.go, which egctl prints too) starts with
// a top-level name, writes rate_limit: null at every level without a
// limit, and spells out every boolean, default or not; envoyproxy/ratelimit
// loads it (its validateYamlKeys, src/config/config_impl.go, knows every
// one of those keys, and yaml.v2 reads null as absent).
func TestTheYAMLEnvoyGatewayAndItsToolsWriteLoads(t *testing.T) {
	cfg := mustConfig(t, `name: first-listener
domain: first-listener
descriptors:
  - key: first-route
    value: first-route
    rate_limit: null
    descriptors:
      - key: rule-0-match-0
        value: rule-0-match-0
        rate_limit:
          requests_per_unit: 1001
          unit: MONTH
          unlimited: false
          name: ""
          replaces: []
        descriptors: []
        shadow_mode: false
        quota_mode: false
        detailed_metric: false
        value_to_metric: false
        share_threshold: false
        metadata: null
    shadow_mode: false
    quota_mode: false
    detailed_metric: false
    value_to_metric: false
    share_threshold: false
`)
	lim := cfg.Select("first-listener", kv("first-route", "first-route", "rule-0-match-0", "rule-0-match-0"))
	if lim == nil || lim.RequestsPerUnit != 1001 || lim.Unit.Name != "MONTH" {
		t.Fatalf("selected %+v, want 1001 a month", lim)
	}
	if cfg.Select("first-listener", kv("first-route", "first-route")) != nil {
		t.Error("rate_limit: null made a limit")
	}
}

// TestAnchorsAliasesAndMergeKeysLoadAsTheyReadInYAML: envoyproxy/ratelimit
// reads its files with gopkg.in/yaml.v2, which resolves anchors, aliases
// and `<<:` merge keys, a merge setting its keys where it stands (over a
// key written before it; a key written after it wins: decoder.merge and
// mappingStruct in yaml.v2's decode.go); so does Floodgate, and the limits
// they build are the ones the resolved YAML says, each at its own place.
func TestAnchorsAliasesAndMergeKeysLoadAsTheyReadInYAML(t *testing.T) {
	cfg := mustConfig(t, `domain: edge
descriptors:
  - key: api_key
    rate_limit: &per-minute
      unit: minute
      requests_per_unit: 10
  - key: remote_address
    rate_limit: *per-minute
  - key: tenant
    value: acme
    descriptors: &users
      - key: user
        rate_limit:
          <<: *per-minute
          requests_per_unit: 20
          name: user
  - key: tenant
    value: other
    descriptors: *users
  - <<: {key: path, rate_limit: {unit: hour, requests_per_unit: 3}}
    value: /login
  - key: merged_last
    rate_limit:
      requests_per_unit: 5
      <<: [*per-minute, {requests_per_unit: 7, unit: hour}]
`)
	for _, c := range []struct {
		entries []Entry
		rpu     uint32
		unit    string
		key     string
	}{
		{kv("api_key", "k"), 10, "MINUTE", "edge.api_key"},
		{kv("remote_address", "10.0.0.1"), 10, "MINUTE", "edge.remote_address"},
		{kv("tenant", "acme", "user", "u"), 20, "MINUTE", "edge.tenant_acme.user"},
		{kv("tenant", "other", "user", "u"), 20, "MINUTE", "edge.tenant_other.user"},
		{kv("path", "/login"), 3, "HOUR", "edge.path_/login"},
		{kv("merged_last", "x"), 10, "MINUTE", "edge.merged_last"}, // the merge after the key wins, its first mapping first
	} {
		lim := cfg.Select("edge", c.entries)
		if lim == nil || lim.RequestsPerUnit != c.rpu || lim.Unit.Name != c.unit || lim.Key != c.key {
			t.Errorf("%s: selected %+v, want %d/%s at %s", entriesString(c.entries), lim, c.rpu, c.unit, c.key)
		}
	}
	if a, b := cfg.Select("edge", kv("tenant", "acme", "user", "u")), cfg.Select("edge", kv("tenant", "other", "user", "u")); a == b {
		t.Error("one aliased list of descriptors made one limit for two places")
	}
	// A merge that brings a key the mapping does not know is refused as
	// that key would be.
	_, err := Parse([]string{"m.yaml"}, map[string][]byte{"m.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      <<: {unit: second, requests_per_unti: 1}\n")})
	if err == nil || !strings.Contains(err.Error(), "m.yaml:5") || !strings.Contains(err.Error(), "requests_per_unti: unknown key") {
		t.Errorf("a merged misspelt key: %v", err)
	}
}

// TestMetadataIsAccepted: envoyproxy/ratelimit's HEAD reads a descriptor's
// metadata (any mapping, returned in the response's dynamic metadata when
// RESPONSE_DYNAMIC_METADATA is on; YamlDescriptor.Metadata and
// validateYamlKeys, which does not look inside it, src/config/config_impl.go).
// Floodgate loads it and answers without it; anything but a mapping is
// refused, as yaml.v2 refuses it there.
func TestMetadataIsAccepted(t *testing.T) {
	cfg := mustConfig(t, `domain: test-domain
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
    metadata:
      service_with_quota:
        name: service_2
        anything: [1, {deep: true}]
`)
	if lim := cfg.Select("test-domain", kv("key2", "x")); lim == nil || lim.RequestsPerUnit != 20 {
		t.Fatalf("selected %+v", lim)
	}
	_, err := Parse([]string{"m.yaml"}, map[string][]byte{"m.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    metadata: a string\n")})
	if err == nil || !strings.Contains(err.Error(), "m.yaml:4") || !strings.Contains(err.Error(), "metadata") {
		t.Errorf("metadata that is not a mapping: %v", err)
	}
}

// TestBooleansAreReadAsYAML11ReadsThem: yaml.v2, which envoyproxy/ratelimit
// reads its files with, takes yes/no, on/off, y/n in any of their usual
// cases for booleans (YAML 1.1); Floodgate reads them so too, and a
// default written out (quota_mode: no) is as harmless as false.
func TestBooleansAreReadAsYAML11ReadsThem(t *testing.T) {
	cfg := mustConfig(t, `domain: d
descriptors:
  - key: a
    shadow_mode: yes
    quota_mode: n
    share_threshold: No
    value_to_metric: OFF
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    shadow_mode: False
    detailed_metric: on
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: c
    rate_limit: {unlimited: Y}
`)
	if a := cfg.Select("d", kv("a", "x")); a == nil || !a.ShadowMode {
		t.Errorf("shadow_mode: yes: %+v", a)
	}
	if b := cfg.Select("d", kv("b", "x")); b == nil || b.ShadowMode || !b.DetailedMetric {
		t.Errorf("shadow_mode: False, detailed_metric: on: %+v", b)
	}
	if c := cfg.Select("d", kv("c", "x")); c == nil || !c.Unlimited {
		t.Errorf("unlimited: Y: %+v", c)
	}
	_, err := Parse([]string{"b.yaml"}, map[string][]byte{"b.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    quota_mode: yes\n")})
	if err == nil || !strings.Contains(err.Error(), "b.yaml:4") || !strings.Contains(err.Error(), "quota_mode: not implemented") {
		t.Errorf("quota_mode: yes: %v, want it refused as true", err)
	}
	// A quoted "false" is a string, which yaml.v2 will not put in a
	// boolean either.
	_, err = Parse([]string{"q.yaml"}, map[string][]byte{"q.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: \"false\"\n")})
	if err == nil || !strings.Contains(err.Error(), "q.yaml:4") || !strings.Contains(err.Error(), "want true or false") {
		t.Errorf("shadow_mode: \"false\": %v", err)
	}
}

// TestEveryDocumentOfAFileIsADomain: a file may hold several YAML
// documents (Envoy Gateway writes one per domain, separated by ---); each
// is loaded as a domain of its own, and a second document naming a domain
// already loaded is refused at its line. (envoyproxy/ratelimit's yaml.v2
// reads the first document only and drops the others without a word.)
func TestEveryDocumentOfAFileIsADomain(t *testing.T) {
	cfg := mustConfig(t, "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\n---\ndomain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	if got := strings.Join(cfg.Domains(), ","); got != "a,b" {
		t.Fatalf("domains %s, want a,b", got)
	}
	if lim := cfg.Select("b", kv("k", "v")); lim == nil || lim.RequestsPerUnit != 2 || lim.Line != 10 {
		t.Errorf("domain b: %+v", lim)
	}
	_, err := Parse([]string{"two.yaml"}, map[string][]byte{"two.yaml": []byte("domain: a\n---\ndomain: a\n")})
	if err == nil || !strings.Contains(err.Error(), "two.yaml:3") || !strings.Contains(err.Error(), "already defined at two.yaml:1") {
		t.Errorf("one domain twice in one file: %v", err)
	}
}
