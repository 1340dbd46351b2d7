package xdsfeed

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// Render writes a RateLimitConfig as a file of envoyproxy/ratelimit's YAML,
// as that server turns one into its own YAML types before loading it
// (src/config/config_xds.go, ConfigXdsProtoToYaml), so that internal/door/ratelimit/rls
// validates a push exactly as it validates a file: the domain, and each
// descriptor's key, value, rate_limit (unit, requests_per_unit, unlimited,
// name, replaces), shadow_mode, detailed_metric and quota_mode (which
// internal/door/ratelimit/rls refuses by name when true) and descriptors. Only what rls
// reads is written (no top-level name, no null rate_limit, false booleans
// left out), so every line of the file, which problems are reported at, is
// one the push set.
//
// A descriptor's metadata is not written: Floodgate answers no dynamic
// metadata, and it changes no decision. notes says where some was left
// out.
func Render(c *rlsconfv3.RateLimitConfig) (data []byte, notes []string) {
	root := mapping()
	add(root, "domain", str(c.GetDomain()))
	if ds := c.GetDescriptors(); len(ds) > 0 {
		add(root, "descriptors", descriptors(ds, c.GetDomain(), &notes))
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		// A tree of strings, numbers and booleans always encodes.
		panic("xdsfeed: rendering a RateLimitConfig: " + err.Error())
	}
	enc.Close()
	return buf.Bytes(), notes
}

func descriptors(ds []*rlsconfv3.RateLimitDescriptor, parent string, notes *[]string) *yaml.Node {
	list := &yaml.Node{Kind: yaml.SequenceNode}
	for _, d := range ds {
		m := mapping()
		add(m, "key", str(d.GetKey()))
		if d.GetValue() != "" {
			add(m, "value", str(d.GetValue()))
		}
		place := parent + "." + placeName(d.GetKey(), d.GetValue())
		if rl := d.GetRateLimit(); rl != nil {
			add(m, "rate_limit", rateLimit(rl))
		}
		for _, f := range []struct {
			key string
			on  bool
		}{{"shadow_mode", d.GetShadowMode()}, {"detailed_metric", d.GetDetailedMetric()}, {"quota_mode", d.GetQuotaMode()}} {
			if f.on {
				add(m, f.key, scalar("!!bool", "true"))
			}
		}
		if len(d.GetMetadata().GetFields()) > 0 {
			*notes = append(*notes, place+": metadata left out (Floodgate answers no dynamic metadata)")
		}
		if sub := d.GetDescriptors(); len(sub) > 0 {
			add(m, "descriptors", descriptors(sub, place, notes))
		}
		list.Content = append(list.Content, m)
	}
	return list
}

func rateLimit(rl *rlsconfv3.RateLimitPolicy) *yaml.Node {
	m := mapping()
	// An unlimited limit has no unit (UNKNOWN is the proto's unset
	// value); any other unit is written as given, so that rls refuses
	// one with unlimited, or UNKNOWN without, as it refuses the file.
	if u := rl.GetUnit(); !(rl.GetUnlimited() && u == rlsconfv3.RateLimitUnit_UNKNOWN) {
		add(m, "unit", str(u.String()))
	}
	add(m, "requests_per_unit", scalar("!!int", strconv.FormatUint(uint64(rl.GetRequestsPerUnit()), 10)))
	if rl.GetUnlimited() {
		add(m, "unlimited", scalar("!!bool", "true"))
	}
	if rl.GetName() != "" {
		add(m, "name", str(rl.GetName()))
	}
	if rs := rl.GetReplaces(); len(rs) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode}
		for _, r := range rs {
			e := mapping()
			add(e, "name", str(r.GetName()))
			list.Content = append(list.Content, e)
		}
		add(m, "replaces", list)
	}
	return m
}

// placeName is a descriptor's name in its limit's place (rls.Limit.Key):
// its key, and _value when it has one.
func placeName(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, str(key), v)
}

// str is a string scalar, quoted by the encoder wherever YAML would read
// it as something else ("true", "1", "", "*").
func str(s string) *yaml.Node { return scalar("!!str", s) }

func scalar(tag, v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v} }

// limitLines describes the limits of c, one line each, under the names
// rls.burst and the metrics give them (domain, then each level's key or
// key_value joined by dots), for the debug page.
func limitLines(c *rlsconfv3.RateLimitConfig) []string {
	var out []string
	var walk func(ds []*rlsconfv3.RateLimitDescriptor, parent string)
	walk = func(ds []*rlsconfv3.RateLimitDescriptor, parent string) {
		for _, d := range ds {
			place := parent + "." + placeName(d.GetKey(), d.GetValue())
			if rl := d.GetRateLimit(); rl != nil {
				var b strings.Builder
				b.WriteString(place + ": ")
				if rl.GetUnlimited() {
					b.WriteString("unlimited")
				} else {
					fmt.Fprintf(&b, "%d per %s", rl.GetRequestsPerUnit(), strings.ToLower(rl.GetUnit().String()))
				}
				if rl.GetName() != "" {
					fmt.Fprintf(&b, ", name %q", rl.GetName())
				}
				for _, r := range rl.GetReplaces() {
					fmt.Fprintf(&b, ", replaces %q", r.GetName())
				}
				if d.GetShadowMode() {
					b.WriteString(", shadow mode")
				}
				out = append(out, b.String())
			}
			walk(d.GetDescriptors(), place)
		}
	}
	walk(c.GetDescriptors(), c.GetDomain())
	return out
}
