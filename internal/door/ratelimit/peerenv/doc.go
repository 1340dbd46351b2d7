package peerenv

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// doc is the Floodgate configuration being built: a YAML tree whose every
// setting carries, as its line comment, the variables it came from, so
// that the file explains itself and a problem Floodgate finds at a line
// names them.
type doc struct {
	root *yaml.Node
	vars map[string][]string // setting path → its variables
}

func newDoc() *doc {
	return &doc{root: &yaml.Node{Kind: yaml.MappingNode}, vars: map[string][]string{}}
}

// set puts value at path (dot-separated keys), from vars.
func (d *doc) set(path string, value any, vars ...string) {
	keys := strings.Split(path, ".")
	m := d.root
	for _, k := range keys[:len(keys)-1] {
		m = child(m, k)
	}
	v := node(value)
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: keys[len(keys)-1]}
	if len(vars) > 0 {
		c := "# " + strings.Join(vars, ", ")
		if v.Kind == yaml.ScalarNode {
			v.LineComment = c
		} else {
			k.LineComment = c
		}
	}
	d.vars[path] = vars
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == k.Value {
			m.Content[i], m.Content[i+1] = k, v
			return
		}
	}
	m.Content = append(m.Content, k, v)
}

func child(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	c := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, c)
	return c
}

func node(v any) *yaml.Node {
	scalar := func(tag, s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s} }
	switch x := v.(type) {
	case string:
		return scalar("!!str", x)
	case int:
		return scalar("!!int", strconv.Itoa(x))
	case int64:
		return scalar("!!int", strconv.FormatInt(x, 10))
	case bool:
		return scalar("!!bool", strconv.FormatBool(x))
	case float64:
		return scalar("!!float", strconv.FormatFloat(x, 'g', -1, 64))
	case []string:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, s := range x {
			n.Content = append(n.Content, scalar("!!str", s))
		}
		return n
	case map[string]string:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			n.Content = append(n.Content, scalar("!!str", k), scalar("!!str", x[k]))
		}
		return n
	case map[string]int64:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			n.Content = append(n.Content, scalar("!!str", k), scalar("!!int", strconv.FormatInt(x[k], 10)))
		}
		return n
	}
	panic(fmt.Sprintf("peerenv: no YAML for %T", v))
}

// bytes renders the configuration, headed by a comment saying where it
// came from.
func (d *doc) bytes() []byte {
	var buf bytes.Buffer
	buf.WriteString("# Floodgate's configuration, built from envoyproxy/ratelimit's environment variables\n" +
		"# (docs/ratelimit.md): each setting names the variables it came from.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(d.root); err != nil {
		panic("peerenv: rendering the configuration: " + err.Error())
	}
	enc.Close()
	return buf.Bytes()
}

// varsOf names the variables behind a setting path, or its nearest
// enclosing setting's.
func (d *doc) varsOf(path string) []string {
	for p := path; p != ""; {
		if v, ok := d.vars[p]; ok {
			return v
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return nil
}
