package peertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

// FromYAML reads envoyproxy/ratelimit's YAML, as Envoy Gateway's translator
// goldens dump it (one document per domain, every field spelled out, from
// the RateLimitConfig it pushes through envoyproxy/ratelimit's
// config.ConfigXdsProtoToYaml), back into the RateLimitConfig resources it
// came from. It is strict: an unknown key is an error, and so are
// value_to_metric and share_threshold when true, which the resource cannot
// carry.
func FromYAML(data []byte) ([]*rlsconfv3.RateLimitConfig, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []*rlsconfv3.RateLimitConfig
	for {
		var r yRoot
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		ds, err := r.Descriptors.proto(r.Domain)
		if err != nil {
			return nil, err
		}
		out = append(out, &rlsconfv3.RateLimitConfig{Name: r.Name, Domain: r.Domain, Descriptors: ds})
	}
}

type yRoot struct {
	Name        string `yaml:"name"`
	Domain      string `yaml:"domain"`
	Descriptors yDescs `yaml:"descriptors"`
}

type yDescs []yDesc

type yDesc struct {
	Key            string         `yaml:"key"`
	Value          string         `yaml:"value"`
	RateLimit      *yLimit        `yaml:"rate_limit"`
	Descriptors    yDescs         `yaml:"descriptors"`
	ShadowMode     bool           `yaml:"shadow_mode"`
	DetailedMetric bool           `yaml:"detailed_metric"`
	QuotaMode      bool           `yaml:"quota_mode"`
	ValueToMetric  bool           `yaml:"value_to_metric"`
	ShareThreshold bool           `yaml:"share_threshold"`
	Metadata       map[string]any `yaml:"metadata"`
}

type yLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

func (ds yDescs) proto(at string) ([]*rlsconfv3.RateLimitDescriptor, error) {
	var out []*rlsconfv3.RateLimitDescriptor
	for _, d := range ds {
		here := at + "." + d.Key
		if d.ValueToMetric || d.ShareThreshold {
			return nil, fmt.Errorf("%s: value_to_metric and share_threshold have no field in a RateLimitConfig", here)
		}
		pd := &rlsconfv3.RateLimitDescriptor{Key: d.Key, Value: d.Value, ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric, QuotaMode: d.QuotaMode}
		if d.Metadata != nil {
			md, err := structpb.NewStruct(d.Metadata)
			if err != nil {
				return nil, fmt.Errorf("%s: metadata: %w", here, err)
			}
			pd.Metadata = md
		}
		if l := d.RateLimit; l != nil {
			unit := rlsconfv3.RateLimitUnit_UNKNOWN
			if l.Unit != "" {
				u, ok := rlsconfv3.RateLimitUnit_value[strings.ToUpper(l.Unit)]
				if !ok {
					return nil, fmt.Errorf("%s: unit %q", here, l.Unit)
				}
				unit = rlsconfv3.RateLimitUnit(u)
			}
			pd.RateLimit = &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: l.RequestsPerUnit, Unlimited: l.Unlimited, Name: l.Name}
			for _, r := range l.Replaces {
				pd.RateLimit.Replaces = append(pd.RateLimit.Replaces, &rlsconfv3.RateLimitReplace{Name: r.Name})
			}
		}
		sub, err := d.Descriptors.proto(here)
		if err != nil {
			return nil, err
		}
		pd.Descriptors = sub
		out = append(out, pd)
	}
	return out, nil
}

// Module returns the directory of module in the Go module cache: path@version,
// downloaded through the Go module proxy when the cache lacks it, or a path
// alone for the version go.mod requires. The peers' own files
// (envoyproxy/ratelimit's examples, Envoy Gateway's testdata) are read there
// at test time, never copied.
func Module(t testing.TB, module string) string {
	t.Helper()
	// go mod download, not go list -m: the latter names no Dir for a
	// module not yet in the cache (a fresh machine's). Without a version it
	// downloads the one go.mod requires.
	out, err := exec.Command("go", "mod", "download", "-json", module).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go mod download %s (this test reads the module's files from the module cache; it needs the Go module proxy once): %v %s %s", module, err, out, msg)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json %s: %v %s", module, err, out)
	}
	return mod.Dir
}

// Ratelimit is the envoyproxy/ratelimit module whose files the tests read
// and whose server they build: the version internal/door/ratelimit/rls's differential
// test runs.
const Ratelimit = "github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36"

// Gateway is the Envoy Gateway module, at the version go.mod requires.
const Gateway = "github.com/envoyproxy/gateway"
