package rls

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ratelimitModule is the envoyproxy/ratelimit version whose own test
// configurations these tests read: the one `make bench-tools` builds the
// reference server from (Makefile, RATELIMIT).
const ratelimitModule = "github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36"

// upstreamConfigs returns the directory of envoyproxy/ratelimit's own test
// configurations (test/config) in the Go module cache, downloading the
// module through the Go module proxy when the cache lacks it. Nothing of it
// is copied into this repository.
func upstreamConfigs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", ratelimitModule).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go mod download %s (these tests read envoyproxy/ratelimit's own configurations from the module cache; it needs the Go module proxy once): %v %s %s", ratelimitModule, err, out, msg)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json %s: %v %s", ratelimitModule, err, out)
	}
	return filepath.Join(mod.Dir, "test", "config")
}

func loadUpstream(t *testing.T, dir string, files ...string) (*Limits, error) {
	t.Helper()
	names := make([]string, len(files))
	sources := map[string][]byte{}
	for i, f := range files {
		names[i] = filepath.Join(dir, f)
		data, err := os.ReadFile(names[i])
		if err != nil {
			t.Fatal(err)
		}
		sources[names[i]] = data
	}
	return Parse(names, sources)
}

func kv(pairs ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, Entry{pairs[i], pairs[i+1]})
	}
	return out
}

// TestSelectsTheLimitRatelimitSelects walks envoyproxy/ratelimit's own
// configurations with the descriptors its config tests ask about
// (test/config/config_test.go) and requires the limit that server selects:
// its requests_per_unit and unit, shadow mode, unlimited, or none.
func TestSelectsTheLimitRatelimitSelects(t *testing.T) {
	dir := upstreamConfigs(t)
	type want struct {
		rpu       uint32
		unit      string
		shadow    bool
		unlimited bool
	}
	none := (*want)(nil)
	cases := []struct {
		file    string
		domain  string
		entries []Entry
		want    *want
	}{
		{"basic_config.yaml", "foo_domain", kv("key1", "value1"), none},
		{"basic_config.yaml", "test-domain", nil, none},
		{"basic_config.yaml", "test-domain", kv("key1", "something"), none},
		{"basic_config.yaml", "test-domain", kv("key1", "value1"), none},
		{"basic_config.yaml", "test-domain", kv("key2", "value2", "subkey", "subvalue"), none},
		{"basic_config.yaml", "test-domain", kv("key5", "value5", "subkey5", "subvalue"), none},
		{"basic_config.yaml", "test-domain", kv("key1", "value1", "subkey1", "something"), &want{rpu: 5, unit: "SECOND"}},
		{"basic_config.yaml", "test-domain", kv("key1", "value1", "subkey1", "subvalue1"), &want{rpu: 10, unit: "SECOND"}},
		{"basic_config.yaml", "test-domain", kv("key2", "something"), &want{rpu: 20, unit: "MINUTE"}},
		{"basic_config.yaml", "test-domain", kv("key2", "value2"), &want{rpu: 30, unit: "MINUTE"}},
		{"basic_config.yaml", "test-domain", kv("key2", "value3"), none},
		{"basic_config.yaml", "test-domain", kv("key3", "foo"), &want{rpu: 1, unit: "HOUR"}},
		{"basic_config.yaml", "test-domain", kv("key4", "foo"), &want{rpu: 1, unit: "DAY"}},
		{"basic_config.yaml", "test-domain", kv("key5", "value5"), &want{rpu: 15, unit: "DAY"}},
		{"basic_config.yaml", "test-domain", kv("key5", "value5", "subkey5", "subvalue5"), &want{rpu: 25, unit: "DAY"}},
		{"basic_config.yaml", "test-domain", kv("key6", "foo"), &want{unlimited: true}},
		{"basic_config.yaml", "test-domain", kv("key7", "unspecified_value"), &want{rpu: 70, unit: "MINUTE"}},
		{"shadowmode_config.yaml", "test-domain", kv("key1", "value1", "subkey1", "something"), &want{rpu: 5, unit: "SECOND"}},
		{"shadowmode_config.yaml", "test-domain", kv("key1", "value1", "subkey1", "subvalue1"), &want{rpu: 10, unit: "SECOND", shadow: true}},
		{"shadowmode_config.yaml", "test-domain", kv("key2", "something"), &want{rpu: 20, unit: "MINUTE", shadow: true}},
		{"shadowmode_config.yaml", "test-domain", kv("key2", "value2"), &want{rpu: 30, unit: "MINUTE"}},
		{"wildcard.yaml", "test-domain", kv("noVal", "foo1"), &want{rpu: 20, unit: "MINUTE"}},
		{"wildcard.yaml", "test-domain", kv("wild", "foo1"), &want{rpu: 20, unit: "MINUTE"}},
		{"wildcard.yaml", "test-domain", kv("wild", "foo2"), &want{rpu: 20, unit: "MINUTE"}},
		{"wildcard.yaml", "test-domain", kv("nestedWild", "val1", "wild", "goo2"), &want{rpu: 20, unit: "MINUTE"}},
		{"wildcard.yaml", "test-domain", kv("wild", "bar"), none},
		{"wildcard.yaml", "test-domain", kv("noWild", "foo1"), none},
		{"wildcard.yaml", "test-domain", kv("midWildcard", "barab"), none},
	}
	for _, c := range cases {
		cfg, err := loadUpstream(t, dir, c.file)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		got := cfg.Select(c.domain, c.entries)
		name := c.file + " " + c.domain + " " + entriesString(c.entries)
		switch {
		case c.want == nil && got != nil:
			t.Errorf("%s: selected %s (%d/%s), want no limit", name, got.Key, got.RequestsPerUnit, got.Unit.Name)
		case c.want != nil && got == nil:
			t.Errorf("%s: selected no limit, want %+v", name, *c.want)
		case c.want != nil && (got.RequestsPerUnit != c.want.rpu || got.Unit.Name != c.want.unit || got.ShadowMode != c.want.shadow || got.Unlimited != c.want.unlimited):
			t.Errorf("%s: selected %d/%s shadow=%v unlimited=%v, want %+v", name, got.RequestsPerUnit, got.Unit.Name, got.ShadowMode, got.Unlimited, *c.want)
		}
	}
}

// The same limit reached through two values of a wildcard, or through a
// key-only entry, is one configured limit: one Key.
func TestAWildcardSelectsOneLimitForEveryValue(t *testing.T) {
	cfg, err := loadUpstream(t, upstreamConfigs(t), "wildcard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Select("test-domain", kv("wild", "foo1")), cfg.Select("test-domain", kv("wild", "foo2"))
	if a == nil || a != b || a.Key != "test-domain.wild_foo*" {
		t.Fatalf("wild=foo1 and wild=foo2 selected %+v and %+v, want the one limit test-domain.wild_foo*", a, b)
	}
}

// TestRefusesWhatRatelimitRefuses loads each configuration
// envoyproxy/ratelimit's tests expect it to refuse, and requires a refusal
// that names the file and a line (a YAML syntax error, which the parser
// reports with its own line, names the file).
func TestRefusesWhatRatelimitRefuses(t *testing.T) {
	dir := upstreamConfigs(t)
	for _, c := range []struct {
		files []string
		want  string
	}{
		{[]string{"empty_domain.yaml"}, "domain is empty"},
		{[]string{"basic_config.yaml", "duplicate_domain.yaml"}, "already defined"},
		{[]string{"empty_key.yaml"}, "key is empty"},
		{[]string{"duplicate_key.yaml"}, "duplicate descriptor"},
		{[]string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, "already defined"},
		{[]string{"bad_limit_unit.yaml"}, "unit"},
		{[]string{"replaces_self.yaml"}, "cannot replace itself"},
		{[]string{"replaces_empty.yaml"}, "name is empty"},
		{[]string{"bad_yaml.yaml"}, "not YAML"},
		{[]string{"misspelled_key.yaml"}, "unknown key"},
		{[]string{"misspelled_key2.yaml"}, "requestsperunit: unknown key"},
		{[]string{"non_string_key.yaml"}, "not a string"},
		{[]string{"non_map_list.yaml"}, "want a mapping"},
		{[]string{"unlimited_with_unit.yaml"}, "not allowed with unlimited"},
		{[]string{"share_threshold.yaml"}, "share_threshold: not implemented by Floodgate"},
	} {
		_, err := loadUpstream(t, dir, c.files...)
		if err == nil {
			t.Errorf("%v loaded, want a refusal", c.files)
			continue
		}
		last := c.files[len(c.files)-1]
		if !strings.Contains(err.Error(), last) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v\nwant a message naming %s and saying %q", c.files, err, last, c.want)
		}
	}
}

func entriesString(es []Entry) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Key + "=" + e.Value)
	}
	return b.String()
}
