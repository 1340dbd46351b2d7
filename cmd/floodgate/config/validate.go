package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// validator collects problems and knows the line of every path in the file.
type validator struct {
	file     string
	lines    map[string]int // "policies[2].capacity" → line of that key
	problems Problems
}

func (v *validator) problem(line int, format string, args ...any) {
	v.problems = append(v.problems, Problem{File: v.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// at reports a problem at path, on the line of the path or of its nearest
// ancestor present in the file (a missing field is reported where its
// parent is).
func (v *validator) at(path, format string, args ...any) {
	v.problem(v.lineOf(path), "%s: %s", path, fmt.Sprintf(format, args...))
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

var durationType = reflect.TypeOf(Duration{})

// walk records the line of every key and checks the file's shape against
// t: unknown keys (with the known ones listed), and whole numbers where
// whole numbers belong (yaml.v3 would silently truncate 1.5 to 1).
func (v *validator) walk(n *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if t == durationType {
		if _, err := time.ParseDuration(strings.TrimSpace(n.Value)); n.Kind != yaml.ScalarNode || err != nil {
			v.problem(n.Line, "%s: must be a duration such as 50ms or 1.5s (got %q)", path, n.Value)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if !(n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
				v.problem(n.Line, "%s: must be a mapping of keys", orRoot(path))
			}
			return
		}
		fields := map[string]reflect.StructField{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			fields[tag] = f
			names = append(names, tag)
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
			if _, dup := v.lines[p]; dup {
				v.problem(k.Line, "%s: is set twice", p)
			}
			v.lines[p] = k.Line
			v.walk(val, f.Type, p)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if !(n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
				v.problem(n.Line, "%s: must be a list", path)
			}
			return
		}
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			v.lines[p] = item.Line
			v.walk(item, t.Elem(), p)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			if !(n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
				v.problem(n.Line, "%s: must be a mapping", path)
			}
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			v.lines[p] = n.Content[i].Line
			v.walk(n.Content[i+1], t.Elem(), p)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.Kind == yaml.ScalarNode && n.Tag != "!!int" && n.Tag != "!!null" {
			v.problem(n.Line, "%s: must be a whole number (got %q)", path, n.Value)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			v.problem(n.Line, "%s: must be a single value, not a list or mapping", path)
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
