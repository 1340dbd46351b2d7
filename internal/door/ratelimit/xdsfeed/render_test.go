package xdsfeed

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/peertest"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// parseRendered renders configs as a push would be and loads them as the
// door does.
func parseRendered(t *testing.T, configs ...*rlsconfv3.RateLimitConfig) (*rls.Limits, error) {
	t.Helper()
	var names []string
	sources := map[string][]byte{}
	for i, c := range configs {
		name := "xds:" + c.GetName()
		if c.GetName() == "" {
			name = "xds:" + string(rune('a'+i))
		}
		data, _ := Render(c)
		names = append(names, name)
		sources[name] = data
	}
	return rls.Parse(names, sources)
}

// TestARenderedPushSelectsWhatItsFileSelects reads envoyproxy/ratelimit's
// own example configuration (examples/ratelimit/config/example.yaml of the
// module, in the module cache), turns it into the RateLimitConfig Envoy
// Gateway or any control plane would push for it, renders that, and
// requires the limits internal/door/ratelimit/rls selects from the file for a set of
// descriptors to be the ones it selects from the rendering: the same key,
// rate, name, replaces, shadow mode and unlimited.
func TestARenderedPushSelectsWhatItsFileSelects(t *testing.T) {
	dir := peertest.Module(t, peertest.Ratelimit)
	file := filepath.Join(dir, "examples", "ratelimit", "config", "example.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := rls.Parse([]string{file}, map[string][]byte{file: data})
	if err != nil {
		t.Fatal(err)
	}
	pbs, err := peertest.FromYAML(data)
	if err != nil {
		t.Fatal(err)
	}
	fromPush, err := parseRendered(t, pbs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, entries := range [][]rls.Entry{
		{{Key: "category", Value: "account"}},
		{{Key: "source_cluster", Value: "proxy"}, {Key: "destination_cluster", Value: "bkthomps"}},
		{{Key: "source_cluster", Value: "proxy"}, {Key: "destination_cluster", Value: "fake"}},
		{{Key: "foo", Value: "x"}},
		{{Key: "foo", Value: "x"}, {Key: "bar", Value: "y"}},
		{{Key: "foo", Value: "x"}, {Key: "bar", Value: "banned"}},
		{{Key: "foo", Value: "x"}, {Key: "baz", Value: "shady"}},
		{{Key: "foo", Value: "x"}, {Key: "bay", Value: "z"}},
		{{Key: "qux", Value: "q"}},
		{{Key: "unspec", Value: "u"}},
		{{Key: "nothing", Value: "n"}},
	} {
		a, b := fromFile.Select("rl", entries), fromPush.Select("rl", entries)
		if describe(a) != describe(b) {
			t.Errorf("%v: the file selects %s, the rendered push %s", entries, describe(a), describe(b))
		}
		if a == nil && entries[0].Key != "nothing" && entries[0].Key != "foo" && entries[0].Key != "source_cluster" {
			t.Errorf("%v: the file selects no limit; the case tests nothing", entries)
		}
	}
}

func describe(l *rls.Limit) string {
	if l == nil {
		return "no limit"
	}
	return strings.Join([]string{l.Key, l.Name, l.Unit.Name, strings.Join(l.Replaces, ","),
		map[bool]string{true: "shadow"}[l.ShadowMode], map[bool]string{true: "unlimited"}[l.Unlimited]}, "|") +
		"|" + strconv.FormatUint(uint64(l.RequestsPerUnit), 10)
}

// TestEveryPeerTestConfigIsJudgedAsItsFile: each of envoyproxy/ratelimit's
// own test configurations (test/config of the module) that a
// RateLimitConfig can carry is refused by internal/door/ratelimit/rls as a rendered push
// exactly when it is refused as a file, so a push is validated like a file.
func TestEveryPeerTestConfigIsJudgedAsItsFile(t *testing.T) {
	dir := filepath.Join(peertest.Module(t, peertest.Ratelimit), "test", "config")
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) < 10 {
		t.Fatalf("%d configurations in %s", len(files), dir)
	}
	carried := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pbs, err := peertest.FromYAML(data)
		if err != nil {
			t.Logf("%s: no RateLimitConfig can carry it (%v)", filepath.Base(f), err)
			continue
		}
		carried++
		_, fileErr := rls.Parse([]string{f}, map[string][]byte{f: data})
		_, pushErr := parseRendered(t, pbs...)
		if (fileErr == nil) != (pushErr == nil) {
			t.Errorf("%s: as a file %v, as a push %v", filepath.Base(f), fileErr, pushErr)
		}
	}
	if carried < 8 {
		t.Errorf("only %d of the configurations were compared", carried)
	}
}

// TestRenderingQuotesWhatYAMLWouldReadOtherwise: keys and values that YAML
// reads as booleans, numbers, nulls or syntax come back as the strings they
// were.
func TestRenderingQuotesWhatYAMLWouldReadOtherwise(t *testing.T) {
	tricky := []string{"true", "no", "1", "0x10", "1e3", "~", "null", "*", "a: b", "- x", "#c", "x y", "'q'", "\"dq\"", "é/ü", "{}", "[1]", "&a", "!t", "%x", "@x", "`x`", "1.5", "yes"}
	var ds []*rlsconfv3.RateLimitDescriptor
	for _, v := range tricky {
		ds = append(ds, &rlsconfv3.RateLimitDescriptor{Key: "k" + v, Value: v, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 7, Name: "n" + v}})
	}
	cfg, err := parseRendered(t, &rlsconfv3.RateLimitConfig{Name: "t", Domain: "true", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range tricky {
		l := cfg.Select("true", []rls.Entry{{Key: "k" + v, Value: v}})
		if l == nil || l.Name != "n"+v || l.RequestsPerUnit != 7 {
			t.Errorf("value %q: %v", v, describe(l))
		}
	}
}

// TestAPushIsRefusedWhereItsFileWouldBe: what rls refuses in a file it
// refuses in a rendered push, at the line of the rendered file: quota mode,
// a unit with unlimited, no unit, an empty key, one domain twice.
func TestAPushIsRefusedWhereItsFileWouldBe(t *testing.T) {
	limit := func(u rlsconfv3.RateLimitUnit, n uint32, unlimited bool) *rlsconfv3.RateLimitPolicy {
		return &rlsconfv3.RateLimitPolicy{Unit: u, RequestsPerUnit: n, Unlimited: unlimited}
	}
	one := func(d *rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
	}
	for _, tc := range []struct {
		name    string
		configs []*rlsconfv3.RateLimitConfig
		want    string
	}{
		{"quota mode", []*rlsconfv3.RateLimitConfig{one(&rlsconfv3.RateLimitDescriptor{Key: "k", QuotaMode: true, RateLimit: limit(rlsconfv3.RateLimitUnit_SECOND, 1, false)})}, "xds:edge:7: edge: descriptors[0]: quota_mode: not implemented by Floodgate"},
		{"unit with unlimited", []*rlsconfv3.RateLimitConfig{one(&rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(rlsconfv3.RateLimitUnit_HOUR, 0, true)})}, "xds:edge:5: edge: descriptors[0]: rate_limit: unit: not allowed with unlimited: true"},
		{"no unit", []*rlsconfv3.RateLimitConfig{one(&rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: limit(rlsconfv3.RateLimitUnit_UNKNOWN, 3, false)})}, `xds:edge:5: edge: descriptors[0]: rate_limit: unit "UNKNOWN": want second`},
		{"empty key", []*rlsconfv3.RateLimitConfig{one(&rlsconfv3.RateLimitDescriptor{RateLimit: limit(rlsconfv3.RateLimitUnit_SECOND, 1, false)})}, "xds:edge:3: edge: descriptors[0]: key is empty"},
		{"a domain twice", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}}, `xds:b:1: domain "d" is already defined at xds:a:1`},
	} {
		_, err := parseRendered(t, tc.configs...)
		var list fielderr.List
		if !errors.As(err, &list) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a problem %q", tc.name, err, tc.want)
		}
	}
}

// TestMetadataIsLeftOutAndSaid: a descriptor's metadata, which changes no
// decision, is not rendered, and the note names the descriptor.
func TestMetadataIsLeftOutAndSaid(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"tier": "gold"})
	data, notes := Render(&rlsconfv3.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", Value: "v", Metadata: md,
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}})
	if strings.Contains(string(data), "metadata") || strings.Contains(string(data), "gold") {
		t.Errorf("metadata rendered:\n%s", data)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "d.k_v: metadata left out") {
		t.Errorf("notes %q", notes)
	}
}
