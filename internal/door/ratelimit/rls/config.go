// Package rls reads the rate limit configuration of envoyproxy/ratelimit,
// unchanged, and selects the limit that applies to a rate limit descriptor
// exactly as that server does, so that its users can point Envoy's
// rate limit filter at Floodgate without touching their YAML.
//
// The format: each file holds one `domain` (or several, one a YAML
// document) and a tree of `descriptors`, each with a `key`, an optional
// `value` (a `*` in it matches any run of characters) and an optional
// `rate_limit` {unit, requests_per_unit, unlimited, name, replaces},
// `shadow_mode`, `detailed_metric` and `metadata`. A request's descriptor
// is a list of key/value entries; it is walked down the tree one entry a
// level, preferring at each level the exact key and value, then the first
// wildcard value that matches, then the key alone; the limit found applies
// only when the walk ends at the request's last entry (envoyproxy/ratelimit
// src/config/config_impl.go, GetLimit). Keys that ratelimit knows but
// Floodgate does not implement (quota_mode, share_threshold,
// value_to_metric) are refused by name when set, never ignored. The YAML is
// read as ratelimit's yaml.v2 reads it: anchors, aliases and `<<:` merge
// keys resolved, null as absent, yes/no and on/off as booleans.
package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/limiter"
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
	// (`test-domain.key1_value1.subkey1`). Two limits never share a Key:
	// where that name would be the same for two places (a top-level key
	// `a.b` and a key `a` with a key `b` below it), each is its Quoted
	// name instead (`d."a.b"` and `d.a."b"`).
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
	// value with its `*`s for a wildcard), so that a report can tell the
	// entries the configuration fixes from those the request brings.
	Values []string
	File   string // where it was configured, for messages
	Line   int

	// levels are the limit's place: its domain, then each level's key or
	// key_value.
	levels []string
	// bucket is the token bucket the limit is counted in, built when the
	// limit is loaded (and again when a burst changes it); zero for an
	// unlimited limit and a limit of 0, which no bucket holds.
	bucket limiter.Limit
	// bucketName names the limit's buckets in the store (Plan), made once
	// with the bucket.
	bucketName string
}

// Quoted is the limit's name in a form no other place in the tree can
// have: its levels (the domain, each key or key_value) joined by dots, a
// level written in double quotes when it holds a dot, a double quote or a
// backslash (`"` and `\` escaped with a backslash), and the last level
// quoted when no other is, so that the name always holds a quote
// (`edge."remote_address_10.0.0.1"`, `edge."api_key"`). A name that holds a
// quote is read level by level; one that does not is ratelimit's form, the
// Key. rls.burst accepts either: the Key when no other limit has it.
func (l *Limit) Quoted() string {
	var b strings.Builder
	quotedOne := false
	for i, lv := range l.levels {
		if i > 0 {
			b.WriteByte('.')
		}
		q := quoted(lv)
		if i == len(l.levels)-1 && !quotedOne && q == lv {
			q = `"` + lv + `"`
		}
		quotedOne = quotedOne || q != lv
		b.WriteString(q)
	}
	return b.String()
}

// Bucket is the token bucket the limit is counted in: capacity the burst
// (else requests_per_unit), refilled at requests_per_unit per unit. It is
// built at load; it is the zero Limit for an unlimited limit and for a
// limit of 0.
func (l *Limit) Bucket() limiter.Limit { return l.bucket }

// build makes the limit's token bucket, or says why it cannot be counted
// exactly.
func (l *Limit) build() error {
	l.bucket = limiter.Limit{}
	if len(l.levels) > 0 {
		l.bucketName = bucketPrefix + l.levels[0] + "/" + l.Key
	}
	if l.Unlimited || l.RequestsPerUnit == 0 {
		return nil
	}
	capacity := int64(l.RequestsPerUnit)
	if l.Burst > 0 {
		capacity = l.Burst
	}
	b, err := bucketOf(int64(l.RequestsPerUnit), l.Unit.Seconds, capacity)
	if err != nil {
		return err
	}
	l.bucket = b
	return nil
}

// bucketOf is the bucket of capacity tokens refilled at n per window
// seconds.
func bucketOf(n, window, capacity int64) (limiter.Limit, error) {
	rate, err := limiter.NewRate(n, window)
	if err != nil {
		return limiter.Limit{}, err
	}
	return limiter.NewLimit(capacity, rate)
}

// Limits are a loaded set of domains and their limits. It is immutable once loaded, so one
// value can serve every request while a reload builds the next.
type Limits struct {
	domains map[string]*level
	limits  []*Limit // in file order
	// byKey and byLevels find a limit by the names rls.burst may give it:
	// ratelimit's form of its Key (which may name several), and its
	// levels joined by NULs.
	byKey    map[string][]*Limit
	byLevels map[string]*Limit
	files    []string
}

// level is one level of a domain's descriptor tree.
type level struct {
	next      map[string]*node // by "key" or "key_value", as ratelimit keys them
	wildcards []wildcard       // the entries of next holding a `*`, in file order
	tag       string           // a domain's top level: the tag its identities are hashed under
}

// wildcard is an entry of a level whose name holds a `*`, split at each
// `*` once, when it is loaded.
type wildcard struct {
	name  string
	parts []string
}

type node struct {
	level
	limit *Limit
}

// Domains lists the loaded domains, sorted.
func (c *Limits) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Files lists the files the configuration was read from.
func (c *Limits) Files() []string { return c.files }

// maxFileBytes bounds one file, as Floodgate's own configuration is bounded
// (what one ConfigMap holds).
const maxFileBytes = 1 << 20

// Load reads a file, or every *.yaml and *.yml file directly in a directory
// (ratelimit's RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config layout; names that
// start with a dot, such as a ConfigMap's ..data, are passed over, their
// content being reached through the links beside them).
// A directory holding no such file configures no domain; a path that does
// not exist is an error.
func Load(path string) (*Limits, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var files []string
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
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
			return nil, err
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

// Parse builds Limits from files already read (names in the order given,
// each with its content). It reports every problem it finds, each at its
// file and line (a fielderr.List), and builds nothing when there is one.
func Parse(names []string, sources map[string][]byte) (*Limits, error) {
	l := loader{cfg: &Limits{domains: map[string]*level{}, files: names}, domainAt: map[string]*fielderr.Error{}}
	for _, name := range names {
		l.file(name, sources[name])
	}
	if len(l.problems) > 0 {
		return nil, l.problems
	}
	l.cfg.name()
	for _, lim := range l.cfg.limits {
		if err := lim.build(); err != nil {
			l.problems = append(l.problems, &fielderr.Error{File: lim.File, Line: lim.Line,
				Msg: fmt.Sprintf("%s: rate_limit: %d per %s cannot be counted exactly: %v", lim.Key, lim.RequestsPerUnit, strings.ToLower(lim.Unit.Name), err)})
		}
	}
	if len(l.problems) > 0 {
		return nil, l.problems
	}
	return l.cfg, nil
}

// name gives every limit a Key no other has (its Quoted name where
// ratelimit's form is the same for several places), and indexes them by
// the names rls.burst may give them.
func (c *Limits) name() {
	c.byKey = make(map[string][]*Limit, len(c.limits))
	c.byLevels = make(map[string]*Limit, len(c.limits))
	for _, lim := range c.limits {
		c.byKey[lim.Key] = append(c.byKey[lim.Key], lim)
		c.byLevels[strings.Join(lim.levels, "\x00")] = lim
	}
	for _, lims := range c.byKey {
		if len(lims) > 1 {
			for _, lim := range lims {
				lim.Key = lim.Quoted()
			}
		}
	}
}

// named finds the limit a burst names: by its levels when the name holds a
// quote, else by ratelimit's form (the Key before ambiguity), which must
// then name a single limit. ambiguous lists the Quoted names of the
// limits an ambiguous name could mean.
func (c *Limits) named(name string) (lim *Limit, ambiguous []string) {
	if strings.Contains(name, `"`) {
		levels, ok := splitLevels(name)
		if !ok {
			return nil, nil
		}
		return c.byLevels[strings.Join(levels, "\x00")], nil
	}
	switch lims := c.byKey[name]; len(lims) {
	case 0:
		return nil, nil
	case 1:
		return lims[0], nil
	default:
		for _, l := range lims {
			ambiguous = append(ambiguous, l.Quoted())
		}
		sort.Strings(ambiguous)
		return nil, ambiguous
	}
}

// splitLevels reads a name written as Quoted writes it into its levels.
func splitLevels(name string) ([]string, bool) {
	var levels []string
	var b strings.Builder
	for i := 0; i <= len(name); i++ {
		switch {
		case i == len(name) || name[i] == '.':
			levels = append(levels, b.String())
			b.Reset()
		case name[i] == '"' && b.Len() == 0 && (i == 0 || name[i-1] == '.'):
			// A quoted level runs to the next unescaped quote, which ends it.
			for i++; ; i++ {
				if i >= len(name) {
					return nil, false
				}
				if name[i] == '\\' && i+1 < len(name) {
					i++
				} else if name[i] == '"' {
					break
				}
				b.WriteByte(name[i])
			}
			if i+1 < len(name) && name[i+1] != '.' {
				return nil, false
			}
		default:
			b.WriteByte(name[i])
		}
	}
	return levels, true
}

// maxDescriptorsPerFile bounds the descriptors one file may build, counted
// as YAML aliases expand them: a file that would build more (aliases
// nested to multiply) is refused rather than held in memory. A 1 MiB file
// written out holds under 100,000.
const maxDescriptorsPerFile = 200_000

type loader struct {
	cfg      *Limits
	problems fielderr.List
	domainAt map[string]*fielderr.Error // where each domain was first defined
	domain   string                     // the document's domain
	current  string
	built    int // descriptors built from the current file
}

func (l *loader) errorf(n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.problems = append(l.problems, &fielderr.Error{File: l.current, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) file(name string, data []byte) {
	l.current, l.built = name, 0
	dec := yaml.NewDecoder(bytes.NewReader(data))
	docs := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if err == io.EOF {
			break
		}
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			line := 0
			if m := yamlLine.FindStringSubmatch(msg); m != nil {
				line, _ = strconv.Atoi(m[1])
				msg = strings.TrimPrefix(msg, m[0])
			}
			l.problems = append(l.problems, &fielderr.Error{File: name, Line: line, Msg: "not YAML: " + msg})
			return
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue // an empty document (a --- with nothing after it)
		}
		docs++
		l.document(doc.Content[0])
	}
	if docs == 0 {
		l.errorf(nil, "empty file: want a domain and its descriptors")
	}
}

// document loads one YAML document: a domain and its descriptors.
func (l *loader) document(root *yaml.Node) {
	root = resolve(root)
	if root.Kind != yaml.MappingNode {
		l.errorf(root, "want a mapping with domain and descriptors")
		return
	}
	// name is what Envoy Gateway's dump of a configuration (and egctl)
	// writes before the domain: the RateLimitConfig's name, which
	// ratelimit's key check accepts and its loader ignores.
	fields := l.fields(root, "", map[string]bool{"domain": true, "descriptors": true, "name": true})
	l.str(fields["name"], "name")
	domain := l.str(fields["domain"], "domain")
	if domain == "" {
		l.errorf(root, "domain is empty: every file names its domain")
		return
	}
	if at, dup := l.domainAt[domain]; dup {
		l.errorf(fields["domain"], "domain %q is already defined at %s:%d (one file per domain, as envoyproxy/ratelimit requires without MERGE_DOMAIN_CONFIG)", domain, at.File, at.Line)
		return
	}
	l.domainAt[domain] = &fielderr.Error{File: l.current, Line: fields["domain"].Line}
	top := &level{next: map[string]*node{}, tag: "rls:" + domain}
	l.cfg.domains[domain] = top
	l.domain = domain
	l.descriptors(fields["descriptors"], top, domain, []string{domain}, nil)
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is YAML's null (written null, ~ or nothing),
// which ratelimit's yaml.v2 reads as a field left out.
func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// pair is one key and its value in a mapping.
type pair struct{ k, v *yaml.Node }

// pairs lists a mapping's keys and values as ratelimit's yaml.v2 reads
// them: in order, a `<<` merge key setting the keys of the mapping it
// names (or of each mapping of a list, the first one's winning) where it
// stands, over any set before it, and a key written after it over the
// merged one. twice lists keys the mapping itself writes more than once;
// bad is the value of a merge key that is not a mapping or a list of
// mappings.
func pairs(m *yaml.Node) (out []pair, twice []*yaml.Node, bad *yaml.Node) {
	at := map[string]int{} // index in out, by key
	explicit := map[string]bool{}
	set := func(p pair) {
		if p.k.Kind != yaml.ScalarNode {
			out = append(out, p)
			return
		}
		if i, ok := at[p.k.Value]; ok {
			out[i] = p
			return
		}
		at[p.k.Value] = len(out)
		out = append(out, p)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!merge" {
			if k.Kind == yaml.ScalarNode && explicit[k.Value] {
				twice = append(twice, k)
			}
			explicit[k.Value] = true
			set(pair{k, v})
			continue
		}
		var sources []*yaml.Node
		switch v = resolve(v); v.Kind {
		case yaml.MappingNode:
			sources = []*yaml.Node{v}
		case yaml.SequenceNode:
			for j := len(v.Content) - 1; j >= 0; j-- { // the first wins: set last
				e := resolve(v.Content[j])
				if e.Kind != yaml.MappingNode {
					return out, twice, e
				}
				sources = append(sources, e)
			}
		default:
			return out, twice, v
		}
		for _, src := range sources {
			merged, _, bad := pairs(src)
			if bad != nil {
				return out, twice, bad
			}
			for _, p := range merged {
				set(p)
			}
		}
	}
	return out, twice, nil
}

// fields reads a mapping's keys, merge keys resolved (pairs), refusing any
// not in known with the place and the key's path. A value written null is left
// out, as yaml.v2 leaves the field it would fill.
func (l *loader) fields(m *yaml.Node, path string, known map[string]bool) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	ps, twice, bad := pairs(m)
	if bad != nil {
		l.errorf(bad, "%s<<: want a mapping, or a list of mappings, to merge", path)
	}
	for _, k := range twice {
		if known[k.Value] {
			l.errorf(k, "%s%s: given twice", path, k.Value)
		}
	}
	for _, p := range ps {
		k, v := p.k, resolve(p.v)
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			l.errorf(k, "%skey %q is not a string", path, k.Value)
			continue
		}
		switch {
		case refused[k.Value] != "":
			if b, ok := yamlBool(v); isNull(v) || (ok && !b) {
				continue // the default: harmless to accept
			}
			l.errorf(k, "%s%s: %s", path, k.Value, refused[k.Value])
			continue
		case !known[k.Value]:
			l.errorf(k, "%s%s: unknown key", path, k.Value)
			continue
		}
		if isNull(v) {
			continue
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
	if n = resolve(n); n == nil {
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
	b, ok := yamlBool(n)
	if !ok {
		l.errorf(n, "%s: want true or false", path)
	}
	return b
}

// yamlBool reads a boolean as yaml.v2, which ratelimit reads its files
// with, does (YAML 1.1): true and false, yes and no, on and off, y and n,
// each in lower case, capitalised or upper case, unquoted. A quoted value
// is a string, which yaml.v2 will not put in a boolean either.
func yamlBool(n *yaml.Node) (value, ok bool) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode || (n.Tag != "!!bool" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0) {
		return false, false
	}
	switch n.Value {
	case "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y":
		return true, true
	case "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "n", "N":
		return false, true
	}
	return false, false
}

var descriptorKeys = map[string]bool{"key": true, "value": true, "rate_limit": true, "descriptors": true, "shadow_mode": true, "detailed_metric": true, "metadata": true}

// descriptors loads a list of descriptors into a level of the tree: parent
// is the level's Key (ratelimit's stats name), at its levels.
func (l *loader) descriptors(list *yaml.Node, into *level, parent string, at, values []string) {
	if list == nil {
		return
	}
	list = resolve(list)
	if list.Kind != yaml.SequenceNode {
		l.errorf(list, "%s: descriptors: want a list", parent)
		return
	}
	for i, d := range list.Content {
		path := fmt.Sprintf("%s: descriptors[%d]: ", parent, i)
		if d = resolve(d); d.Kind != yaml.MappingNode {
			l.errorf(d, "%swant a mapping with key, value, rate_limit or descriptors", path)
			continue
		}
		if l.built++; l.built > maxDescriptorsPerFile {
			if l.built == maxDescriptorsPerFile+1 {
				l.errorf(d, "%smore than %d descriptors in one file (counted as its aliases expand them)", path, maxDescriptorsPerFile)
			}
			return
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
		full, fullAt := parent+"."+name, append(at[:len(at):len(at)], name)
		if _, dup := into.next[name]; dup {
			l.errorf(f["key"], "duplicate descriptor %s", full)
			continue
		}
		if md := f["metadata"]; md != nil && md.Kind != yaml.MappingNode {
			// Any mapping: ratelimit returns it in the response's dynamic
			// metadata when asked to (RESPONSE_DYNAMIC_METADATA), Floodgate
			// does not; anything else yaml.v2 refuses.
			l.errorf(md, "%smetadata: want a mapping", path)
		}
		shadow := l.boolean(f["shadow_mode"], path+"shadow_mode")
		detailed := l.boolean(f["detailed_metric"], path+"detailed_metric")
		n := &node{level: level{next: map[string]*node{}}}
		if rl := f["rate_limit"]; rl != nil {
			n.limit = l.rateLimit(rl, full, path+"rate_limit: ")
			if n.limit != nil {
				n.limit.levels = fullAt
				l.cfg.limits = append(l.cfg.limits, n.limit)
				n.limit.ShadowMode, n.limit.DetailedMetric = shadow, detailed
				n.limit.Values = here
			}
		}
		into.next[name] = n
		if strings.Contains(name, "*") {
			into.wildcards = append(into.wildcards, wildcard{name: name, parts: strings.Split(name, "*")})
		}
		l.descriptors(f["descriptors"], &n.level, full, fullAt, here)
	}
}

// quoted is one level of a Path: as it is, or in double quotes when it
// holds a dot, a double quote or a backslash (the last two escaped).
func quoted(level string) string {
	if !strings.ContainsAny(level, `."\`) {
		return level
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(level) + `"`
}

var rateLimitKeys = map[string]bool{"unit": true, "requests_per_unit": true, "unlimited": true, "name": true, "replaces": true}

func (l *loader) rateLimit(n *yaml.Node, full, path string) *Limit {
	n = resolve(n)
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
				if e = resolve(e); e.Kind != yaml.MappingNode {
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

// BurstError is a problem with one rls.burst entry, named by its key.
type BurstError struct{ Key, Msg string }

// BurstErrors are the problems SetBursts found, sorted by key.
type BurstErrors []BurstError

func (e BurstErrors) Error() string {
	s := make([]string, len(e))
	for i, b := range e {
		s[i] = b.Key + ": " + b.Msg
	}
	return strings.Join(s, "; ")
}

// SetBursts gives the limits named in bursts that capacity instead of
// their requests_per_unit; their rate stays requests_per_unit per unit. A
// burst may be below requests_per_unit: the bucket then holds fewer tokens
// than a unit's worth, which smooths the limit (1000 an hour with a burst
// of 10 lets 10 through at once, then one every 3.6 s). A limit is named
// by its Quoted name, or by its Key when no other limit has it. It changes
// nothing and returns BurstErrors when a key names no limit (or several),
// names an unlimited limit or one of 0, or a capacity that cannot be
// counted exactly.
func (c *Limits) SetBursts(bursts map[string]int64) error {
	var problems BurstErrors
	for k, n := range bursts {
		lim, ambiguous := c.named(k)
		switch {
		case len(ambiguous) > 0:
			problems = append(problems, BurstError{k, fmt.Sprintf("names %d limits; write one of %s (each level holding a dot in double quotes)", len(ambiguous), strings.Join(ambiguous, ", "))})
		case lim == nil:
			problems = append(problems, BurstError{k, "names no limit (a limit is named by its domain, then each level's key or key_value, joined by dots; a level holding a dot in double quotes)"})
		case lim.Unlimited:
			problems = append(problems, BurstError{k, fmt.Sprintf("names an unlimited limit (%s:%d): it has no bucket", lim.File, lim.Line)})
		case lim.RequestsPerUnit == 0:
			problems = append(problems, BurstError{k, fmt.Sprintf("names a limit of 0 requests (%s:%d), which no burst lets through", lim.File, lim.Line)})
		default:
			if _, err := bucketOf(int64(lim.RequestsPerUnit), lim.Unit.Seconds, n); err != nil {
				problems = append(problems, BurstError{k, fmt.Sprintf("a burst of %d at %d per %s (%s:%d) cannot be counted exactly: %v", n, lim.RequestsPerUnit, strings.ToLower(lim.Unit.Name), lim.File, lim.Line, err)})
			}
		}
	}
	if len(problems) > 0 {
		sort.Slice(problems, func(i, j int) bool { return problems[i].Key < problems[j].Key })
		return problems
	}
	for k, n := range bursts {
		lim, _ := c.named(k)
		lim.Burst = n
		lim.build() // checked above
	}
	return nil
}

// Empty is a configuration with no domain: every descriptor meets no limit.
func Empty() *Limits {
	return &Limits{domains: map[string]*level{}}
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
