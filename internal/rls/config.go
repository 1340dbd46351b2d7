// Package rls reads the rate limit configuration of envoyproxy/ratelimit,
// unchanged, and selects the limit that applies to a rate limit descriptor
// exactly as that server does, so that its users can point Envoy's
// rate limit filter at Floodgate without touching their YAML.
//
// The format: each file holds one `domain` and a tree of `descriptors`, each
// with a `key`, an optional `value` (a value ending in `*` matches by prefix)
// and an optional `rate_limit` {unit, requests_per_unit, unlimited, name,
// replaces}, `shadow_mode` and `detailed_metric`. A request's descriptor is a
// list of key/value entries; it is walked down the tree one entry a level,
// preferring at each level the exact key and value, then a wildcard value, then
// the key alone; the limit found applies only when the walk ends at the
// request's last entry (envoyproxy/ratelimit src/config/config_impl.go,
// GetLimit). Keys that ratelimit knows but Floodgate does not implement
// (quota_mode, share_threshold) are refused by name when set, never ignored.
package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Unit is a rate limit's unit as ratelimit's YAML names it.
type Unit struct {
	Name    string // upper case, as Envoy's RateLimitResponse.RateLimit.Unit enum names it
	Seconds int64
}

// units are the units ratelimit accepts, with the length it gives each
// (envoyproxy/ratelimit src/utils/utilities.go, UnitToDivider: a month is
// 30 days, a year 365).
var units = map[string]Unit{
	"SECOND": {"SECOND", 1},
	"MINUTE": {"MINUTE", 60},
	"HOUR":   {"HOUR", 3600},
	"DAY":    {"DAY", 86400},
	"WEEK":   {"WEEK", 7 * 86400},
	"MONTH":  {"MONTH", 30 * 86400},
	"YEAR":   {"YEAR", 365 * 86400},
}

// Limit is one configured rate_limit, where the tree puts it.
type Limit struct {
	// Key names the limit's place in the tree, as ratelimit's stats do:
	// domain, then each level's key or key_value joined by dots
	// (`test-domain.key1_value1.subkey1`). Two limits never share a Key.
	Key             string
	Domain          string
	Name            string // rate_limit.name, "" when unnamed
	RequestsPerUnit uint32
	Unit            Unit
	Unlimited       bool
	// Burst is the bucket's capacity when Floodgate's own configuration
	// sets one (rls.burst), 0 otherwise: requests_per_unit.
	Burst          int64
	ShadowMode     bool
	DetailedMetric bool
	Replaces       []string
	// Values are the values the tree names on the way to the limit, one
	// per level from the top ("" where a level names its key alone, the
	// prefix and its `*` for a wildcard), so that a report can tell the
	// entries the configuration fixes from those the request brings.
	Values []string
	File   string // where it was configured, for messages
	Line   int
}

// Config is a loaded set of domains. It is immutable once loaded, so one
// value can serve every request while a reload builds the next.
type Config struct {
	domains map[string]*level
	limits  map[string]*Limit // by Key
	files   []string
}

// level is one level of a domain's descriptor tree.
type level struct {
	next      map[string]*node // by "key" or "key_value", as ratelimit keys them
	wildcards []string         // the "key_value*" entries of next, in file order
}

type node struct {
	level
	limit *Limit
}

// Domains lists the loaded domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Files lists the files the configuration was read from.
func (c *Config) Files() []string { return c.files }

// maxFileBytes bounds one file, as Floodgate's own configuration is bounded
// (what one ConfigMap holds).
const maxFileBytes = 1 << 20

// Load reads a file, or every *.yaml and *.yml file directly in a directory
// (ratelimit's RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config layout; names that
// start with a dot, such as a ConfigMap's ..data, are passed over, their
// content being reached through the links beside them).
// A directory holding no such file configures no domain; a path that does
// not exist is an error.
func Load(path string) (*Config, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rls.config: %w", err)
	}
	var files []string
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("rls.config: %w", err)
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
				continue
			}
			files = append(files, filepath.Join(path, name))
		}
		if len(files) == 0 {
			// An empty directory is a mounted ConfigMap not created yet
			// (optional: true): no domain until its files appear, when the
			// reload that sees them serves them.
			return Empty(), nil
		}
	} else {
		files = []string{path}
	}
	sources := make(map[string][]byte, len(files))
	for _, f := range files {
		data, err := readBounded(f)
		if err != nil {
			return nil, fmt.Errorf("rls.config: %w", err)
		}
		sources[f] = data
	}
	return Parse(files, sources)
}

func readBounded(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("not a regular file")}
	}
	if info.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a file may hold", name, info.Size(), maxFileBytes)
	}
	buf := bytes.NewBuffer(make([]byte, 0, info.Size()))
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}

// Parse builds a Config from files already read (names in the order given,
// each with its content). It reports every problem it finds, each at its
// file and line (a fielderr.List), and builds nothing when there is one.
func Parse(names []string, sources map[string][]byte) (*Config, error) {
	l := loader{cfg: &Config{domains: map[string]*level{}, limits: map[string]*Limit{}, files: names}, domainAt: map[string]*fielderr.Error{}}
	for _, name := range names {
		l.file(name, sources[name])
	}
	if len(l.problems) > 0 {
		return nil, l.problems
	}
	return l.cfg, nil
}

type loader struct {
	cfg      *Config
	problems fielderr.List
	domainAt map[string]*fielderr.Error // where each domain was first defined
	domain   string                     // the file's domain
	current  string
}

func (l *loader) errorf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.problems = append(l.problems, &fielderr.Error{File: l.current, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) file(name string, data []byte) {
	l.current = name
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = strings.TrimPrefix(msg, m[0])
		}
		l.problems = append(l.problems, &fielderr.Error{File: name, Line: line, Msg: "not YAML: " + msg})
		return
	}
	if len(doc.Content) == 0 {
		l.errorf(nil, "empty file: want a domain and its descriptors")
		return
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		l.errorf(root, "want a mapping with domain and descriptors")
		return
	}
	fields := l.fields(root, "", map[string]bool{"domain": true, "descriptors": true})
	domain := l.str(fields["domain"], "domain")
	if domain == "" {
		l.errorf(root, "domain is empty: every file names its domain")
		return
	}
	if at, dup := l.domainAt[domain]; dup {
		l.errorf(fields["domain"], "domain %q is already defined at %s:%d (one file per domain, as envoyproxy/ratelimit requires without MERGE_DOMAIN_CONFIG)", domain, at.File, at.Line)
		return
	}
	l.domainAt[domain] = &fielderr.Error{File: name, Line: fields["domain"].Line}
	top := &level{next: map[string]*node{}}
	l.cfg.domains[domain] = top
	l.domain = domain
	l.descriptors(fields["descriptors"], top, domain, nil)
}

// fields reads a mapping's keys, refusing any not in known with the place
// and the key's path.
func (l *loader) fields(m *yaml.Node, path string, known map[string]bool) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			l.errorf(k, "%skey %q is not a string", path, k.Value)
			continue
		}
		switch {
		case refused[k.Value] != "":
			if v.Kind == yaml.ScalarNode && v.Value == "false" {
				continue // the default: harmless to accept
			}
			l.errorf(k, "%s%s: %s", path, k.Value, refused[k.Value])
			continue
		case !known[k.Value]:
			l.errorf(k, "%s%s: unknown key", path, k.Value)
			continue
		}
		if _, dup := out[k.Value]; dup {
			l.errorf(k, "%s%s: given twice", path, k.Value)
		}
		out[k.Value] = v
	}
	return out
}

// yamlLine finds the line yaml.v3 puts in a syntax error's message.
var yamlLine = regexp.MustCompile(`^line (\d+): `)

// refused names the keys envoyproxy/ratelimit accepts and Floodgate does not
// implement, with why.
var refused = map[string]string{
	"quota_mode":      "not implemented by Floodgate (ratelimit's quota mode turns over-limit answers into OK with metadata); remove it, or keep this domain on envoyproxy/ratelimit",
	"share_threshold": "not implemented by Floodgate (ratelimit's shared bucket for every value a wildcard matches); remove it, or keep this domain on envoyproxy/ratelimit",
	"value_to_metric": "not implemented by Floodgate (it names ratelimit's statsd metrics after values); remove it",
}

func (l *loader) str(n *yaml.Node, path string) string {
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" && n.Tag != "!!bool") {
		l.errorf(n, "%s: want a string", path)
		return ""
	}
	return n.Value
}

func (l *loader) boolean(n *yaml.Node, path string) bool {
	if n == nil {
		return false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		l.errorf(n, "%s: want true or false", path)
		return false
	}
	return n.Value == "true"
}

var descriptorKeys = map[string]bool{"key": true, "value": true, "rate_limit": true, "descriptors": true, "shadow_mode": true, "detailed_metric": true}

func (l *loader) descriptors(list *yaml.Node, into *level, parent string, values []string) {
	if list == nil || list.Tag == "!!null" {
		return
	}
	if list.Kind != yaml.SequenceNode {
		l.errorf(list, "%s: descriptors: want a list", parent)
		return
	}
	for i, d := range list.Content {
		path := fmt.Sprintf("%s: descriptors[%d]: ", parent, i)
		if d.Kind != yaml.MappingNode {
			l.errorf(d, "%swant a mapping with key, value, rate_limit or descriptors", path)
			continue
		}
		f := l.fields(d, path, descriptorKeys)
		key := l.str(f["key"], path+"key")
		if key == "" {
			l.errorf(d, "%skey is empty", path)
			continue
		}
		name := key
		v := l.str(f["value"], path+"value")
		if v != "" {
			name += "_" + v
		}
		here := append(values[:len(values):len(values)], v)
		full := parent + "." + name
		if _, dup := into.next[name]; dup {
			l.errorf(f["key"], "duplicate descriptor %s", full)
			continue
		}
		n := &node{level: level{next: map[string]*node{}}}
		if rl := f["rate_limit"]; rl != nil {
			n.limit = l.rateLimit(rl, full, path+"rate_limit: ")
			if n.limit != nil {
				l.cfg.limits[full] = n.limit
				n.limit.ShadowMode = l.boolean(f["shadow_mode"], path+"shadow_mode")
				n.limit.DetailedMetric = l.boolean(f["detailed_metric"], path+"detailed_metric")
				n.limit.Values = here
			}
		}
		into.next[name] = n
		if strings.HasSuffix(name, "*") {
			into.wildcards = append(into.wildcards, name)
		}
		l.descriptors(f["descriptors"], &n.level, full, here)
	}
}

var rateLimitKeys = map[string]bool{"unit": true, "requests_per_unit": true, "unlimited": true, "name": true, "replaces": true}

func (l *loader) rateLimit(n *yaml.Node, full, path string) *Limit {
	if n.Kind != yaml.MappingNode {
		l.errorf(n, "%swant a mapping with unit and requests_per_unit", path)
		return nil
	}
	before := len(l.problems)
	f := l.fields(n, path, rateLimitKeys)
	lim := &Limit{Key: full, Domain: l.domain, File: l.current, Line: n.Line}
	lim.Name = l.str(f["name"], path+"name")
	lim.Unlimited = l.boolean(f["unlimited"], path+"unlimited")
	unitName := strings.ToUpper(l.str(f["unit"], path+"unit"))
	unit, validUnit := units[unitName]
	switch {
	case lim.Unlimited && validUnit:
		l.errorf(f["unit"], "%sunit: not allowed with unlimited: true", path)
	case !lim.Unlimited && !validUnit:
		l.errorf(firstNode(f["unit"], n), "%sunit %q: want second, minute, hour, day, week, month or year", path, unitName)
	}
	lim.Unit = unit
	if rpu := f["requests_per_unit"]; rpu != nil {
		v, err := strconv.ParseUint(rpu.Value, 10, 32)
		if rpu.Kind != yaml.ScalarNode || rpu.Tag != "!!int" || err != nil {
			l.errorf(rpu, "%srequests_per_unit: want a whole number from 0 to 4294967295", path)
		}
		lim.RequestsPerUnit = uint32(v)
	}
	if r := f["replaces"]; r != nil {
		if r.Kind != yaml.SequenceNode {
			l.errorf(r, "%sreplaces: want a list of {name: ...}", path)
		} else {
			for i, e := range r.Content {
				ep := fmt.Sprintf("%sreplaces[%d]: ", path, i)
				if e.Kind != yaml.MappingNode {
					l.errorf(e, "%swant {name: ...}", ep)
					continue
				}
				name := l.str(l.fields(e, ep, map[string]bool{"name": true})["name"], ep+"name")
				switch {
				case name == "":
					l.errorf(e, "%sname is empty", ep)
				case name == lim.Name:
					l.errorf(e, "%sa limit cannot replace itself (%q)", ep, name)
				default:
					lim.Replaces = append(lim.Replaces, name)
				}
			}
		}
	}
	if len(l.problems) > before {
		return nil
	}
	return lim
}

func firstNode(ns ...*yaml.Node) *yaml.Node {
	for _, n := range ns {
		if n != nil {
			return n
		}
	}
	return nil
}

// UnknownLimits names burst keys that name no configured limit.
type UnknownLimits []string

func (u UnknownLimits) Error() string {
	return "no such limit: " + strings.Join(u, ", ")
}

// SetBursts gives the limits named in bursts (by Key) that capacity
// instead of their requests_per_unit; their rate stays requests_per_unit
// per unit. It changes nothing and returns UnknownLimits when a key names
// no limit.
func (c *Config) SetBursts(bursts map[string]int64) error {
	var unknown UnknownLimits
	for k := range bursts {
		if lim := c.limits[k]; lim == nil || lim.Unlimited {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return unknown
	}
	for k, n := range bursts {
		c.limits[k].Burst = n
	}
	return nil
}

// Empty is a configuration with no domain: every descriptor meets no limit.
func Empty() *Config {
	return &Config{domains: map[string]*level{}, limits: map[string]*Limit{}}
}

// Snapshot is the content of the files a configuration at path is read
// from (a file, or a directory's *.yaml and *.yml files), with their names,
// so that a poll can tell a change (a ConfigMap's symlink swap included)
// without loading it; nil for "" or what cannot be read.
func Snapshot(path string) []byte {
	if path == "" {
		return nil
	}
	files := []string{path}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		files = files[:0]
		entries, _ := os.ReadDir(path)
		for _, e := range entries {
			if n := e.Name(); !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				files = append(files, filepath.Join(path, n))
			}
		}
	}
	var out []byte
	for _, f := range files {
		data, err := readBounded(f)
		if err != nil {
			continue
		}
		out = append(append(append(out, f...), 0), data...)
		out = append(out, 0)
	}
	return out
}
