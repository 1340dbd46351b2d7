package rls

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// envoyGatewayTestdata returns the directory of Envoy Gateway's own
// translator goldens (internal/xds/translator/testdata/out/ratelimit-config)
// in the Go module cache, at the version go.mod requires, downloading the
// module through the Go module proxy when the cache lacks it. Nothing of
// it is copied into this repository.
func envoyGatewayTestdata(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/envoyproxy/gateway")
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go mod download github.com/envoyproxy/gateway (this test reads Envoy Gateway's testdata from the module cache; it needs the Go module proxy once): %v %s %s", err, out, msg)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json github.com/envoyproxy/gateway: %v %s", err, out)
	}
	return filepath.Join(mod.Dir, "internal", "xds", "translator", "testdata", "out", "ratelimit-config")
}

// TestEnvoyGatewaysRateLimitConfigsLoadAndSelect loads each rate limit
// configuration Envoy Gateway's translator writes for its tests (one file
// per case, one YAML document per domain, as GetRateLimitServiceConfigStr
// writes them: internal/xds/translator/ratelimit.go and translator_test.go,
// TestTranslateRateLimitConfig), then builds the descriptor Envoy sends for
// each rate limit of each route in the case's .routes.yaml golden
// (TestBuildRouteRateLimits) and requires the limit it implies: the one at
// the place its actions name, each action one level (Envoy's
// source/common/router/router_ratelimit.cc): generic_key and
// header_value_match put their descriptor_value there, as does a
// remote_address_match with a fixed value; request_headers and a
// remote_address_match of the client's own address bring a value of the
// request's, which the configuration counts under the key alone.
func TestEnvoyGatewaysRateLimitConfigsLoadAndSelect(t *testing.T) {
	dir := envoyGatewayTestdata(t)
	goldens, err := filepath.Glob(filepath.Join(dir, "*.routes.yaml"))
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no .routes.yaml golden in %s: %v", dir, err)
	}
	checked := 0
	for _, golden := range goldens {
		name := strings.TrimSuffix(golden, ".routes.yaml") + ".yaml"
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := Parse([]string{name}, map[string][]byte{name: data})
		if err != nil {
			t.Errorf("%s does not load: %v", filepath.Base(name), err)
			continue
		}
		for _, route := range routeGoldens(t, golden) {
			for domain, limits := range route.RateLimitsByDomain {
				for i, rl := range limits {
					entries, want := descriptorOf(t, rl.Actions)
					want = domain + "." + want
					lim := cfg.Select(domain, entries)
					if lim == nil || lim.Unlimited || lim.RequestsPerUnit == 0 || lim.Key != want {
						t.Errorf("%s, route %s, rate limit %d (%s): selected %+v, want the limit at %s", filepath.Base(golden), route.RouteName, i, entriesString(entries), lim, want)
					}
					checked++
				}
			}
		}
	}
	if checked < len(goldens) {
		t.Fatalf("%d rate limits checked in %d goldens", checked, len(goldens))
	}
	t.Logf("%d rate limits of %d cases", checked, len(goldens))
}

// routeGolden is one document of a .routes.yaml golden: a route's rate
// limits by domain, each a list of actions (go-control-plane's
// RateLimit_Action, as yaml.Marshal writes it).
type routeGolden struct {
	RouteName          string `yaml:"routeName"`
	RateLimitsByDomain map[string][]struct {
		Actions []struct {
			ActionSpecifier map[string]map[string]any `yaml:"ActionSpecifier"`
		} `yaml:"actions"`
	} `yaml:"rateLimitsByDomain"`
}

func routeGoldens(t *testing.T, path string) []routeGolden {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []routeGolden
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var r routeGolden
		if err := dec.Decode(&r); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, r)
	}
}

// descriptorOf builds the entries Envoy sends for a list of actions, with
// a value standing for the request's where the action takes one from it,
// and the place in the configuration they should select (see the test).
func descriptorOf(t *testing.T, actions []struct {
	ActionSpecifier map[string]map[string]any `yaml:"ActionSpecifier"`
}) ([]Entry, string) {
	t.Helper()
	var es []Entry
	var levels []string
	for _, a := range actions {
		for kind, f := range a.ActionSpecifier {
			key, _ := f["descriptor_key"].(string)
			value, _ := f["descriptor_value"].(string)
			fixed := true
			switch kind {
			case "GenericKey":
				key = orDefault(key, "generic_key")
			case "HeaderValueMatch":
				key = orDefault(key, "header_match")
			case "QueryParameterValueMatch":
				key = orDefault(key, "query_match")
			case "RemoteAddressMatch":
				key = orDefault(key, "remote_address_match")
				if strings.Contains(value, "%") { // a substitution: the client's own address
					value, fixed = "192.168.7.9", false
				}
			case "RequestHeaders":
				value, fixed = "a-value-of-"+f["header_name"].(string), false
			default:
				t.Fatalf("an action this test does not know: %s %v", kind, f)
			}
			es = append(es, Entry{Key: key, Value: value})
			if fixed {
				levels = append(levels, key+"_"+value)
			} else {
				levels = append(levels, key)
			}
		}
	}
	return es, strings.Join(levels, ".")
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
