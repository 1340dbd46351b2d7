package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/limiter/fielderr"
)

// validator collects problems and knows the line of every path in the file.
type validator struct {
	file     string
	lines    map[string]int  // "policies[2].capacity" → line of that key
	reported map[string]bool // paths with a problem already: one problem per path
	problems fielderr.List
	// unread is set when yaml.v3 would leave part of the file unread (a key
	// set twice: it refuses the whole mapping) or the file's aliases expand
	// too far: the settings are then not checked further.
	unread  bool
	aliased int // values reached through aliases so far
}

// maxAliasedValues bounds the values the file's aliases expand to, counted
// over the whole file. Anchors and aliases save repeating a policy or two;
// a few anchored lists referenced many times over can expand a small file
// into millions of values (a "billion laughs"), which is refused before any
// of it is decoded.
const maxAliasedValues = 10_000

func (v *validator) problem(line int, format string, args ...any) {
	v.problems = append(v.problems, &fielderr.Error{File: v.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// at reports a problem at path, on the line of the path or of its nearest
// ancestor present in the file (a missing field is reported where its
// parent is). A path gets one problem: the first found, which is the most
// specific (the file's shape is checked before what the values mean).
func (v *validator) at(path, format string, args ...any) {
	v.atLine(v.lineOf(path), path, format, args...)
}

func (v *validator) atLine(line int, path, format string, args ...any) {
	if v.reported[path] {
		return
	}
	v.reported[path] = true
	v.problems = append(v.problems, &fielderr.Error{File: v.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) lineReported(line int) bool {
	for _, p := range v.problems {
		if p.Line == line {
			return true
		}
	}
	return false
}

func (v *validator) lineOf(path string) int {
	for p := path; p != ""; p = parent(p) {
		if l, ok := v.lines[p]; ok {
			return l
		}
	}
	return 0
}

func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// The duration types: the file's own (which knows whether the file set it)
// and a library's (redisstore.Options), read alike.
var durationTypes = map[reflect.Type]bool{reflect.TypeOf(Duration{}): true, reflect.TypeOf(time.Duration(0)): true}

// alias is where the walk entered an alias: expansions are reported there.
type alias struct {
	line int
	path string
}

// digits is a whole number yaml.v3 resolved as a float because it does not
// fit in 64 bits.
var digits = regexp.MustCompile(`^[-+]?[0-9]+$`)

// walk records the line of every key and checks the file's shape against
// t: unknown keys (with the known ones listed), keys set twice, whole
// numbers where whole numbers belong and within their type's range (yaml.v3
// would silently truncate 1.5 to 1), and how far aliases expand.
func (v *validator) walk(n *yaml.Node, t reflect.Type, path string, via *alias) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		if via == nil {
			via = &alias{line: n.Line, path: path}
		}
		n = n.Alias
	}
	if via != nil {
		if v.aliased++; v.aliased > maxAliasedValues {
			if v.aliased == maxAliasedValues+1 {
				v.problem(via.line, "%s: YAML aliases in this file expand to more than %d values; write the repeated parts out, or anchor less", orRoot(via.path), maxAliasedValues)
			}
			v.unread = true
			return
		}
	}
	if durationTypes[t] {
		if _, err := time.ParseDuration(strings.TrimSpace(n.Value)); n.Kind != yaml.ScalarNode || err != nil {
			v.atLine(n.Line, path, "must be a duration such as 50ms or 1.5s (got %q)", n.Value)
		}
		return
	}
	null := n.Kind == yaml.ScalarNode && n.Tag == "!!null"
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if !null {
				v.atLine(n.Line, orRoot(path), "must be a mapping of keys")
			}
			return
		}
		fields := map[string]reflect.StructField{}
		yamlFields(t, fields)
		names := make([]string, 0, len(fields))
		for name := range fields {
			names = append(names, name)
		}
		sort.Strings(names)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			f, ok := fields[k.Value]
			if !ok {
				v.problem(k.Line, "unknown key %q in %s (known: %s)", k.Value, orRoot(path), strings.Join(names, ", "))
				continue
			}
			if first, dup := v.lines[p]; dup {
				v.problem(k.Line, "%s: is set twice (also on line %d); YAML reads neither", p, first)
				v.unread = true
				continue
			}
			v.lines[p] = k.Line
			v.walk(val, f.Type, p, via)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if !null {
				v.atLine(n.Line, path, "must be a list")
			}
			return
		}
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			v.lines[p] = item.Line
			v.walk(item, t.Elem(), p, via)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			if !null {
				v.atLine(n.Line, path, "must be a mapping")
			}
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			v.lines[p] = n.Content[i].Line
			v.walk(n.Content[i+1], t.Elem(), p, via)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if null {
			return
		}
		lo, hi := int64(math.MinInt64)>>(64-t.Bits()), int64(math.MaxInt64)>>(64-t.Bits())
		// A whole number too long for 64 bits is resolved as a float.
		long := n.Tag == "!!float" && digits.MatchString(n.Value)
		switch {
		case n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && !long):
			v.atLine(n.Line, path, "must be a whole number (got %q)", n.Value)
		case !long && n.Decode(reflect.New(t).Interface()) == nil:
		case strings.HasPrefix(n.Value, "-"):
			v.atLine(n.Line, path, "is too small: at least %d (got %s)", lo, n.Value)
		default:
			v.atLine(n.Line, path, "is too large: at most %d (got %s)", hi, n.Value)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			v.atLine(n.Line, path, "must be a single value, not a list or mapping")
		}
	}
}

// yamlFields adds t's fields to fields under their yaml keys, those of
// an inlined struct (`yaml:",inline"`) as its parent's own.
func yamlFields(t reflect.Type, fields map[string]reflect.StructField) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opts == "inline" && f.Type.Kind() == reflect.Struct:
			yamlFields(f.Type, fields)
		case tag != "" && tag != "-" && f.IsExported():
			fields[tag] = f
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}
