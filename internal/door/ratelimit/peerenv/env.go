package peerenv

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// env reads variables as envoyproxy/ratelimit's settings do
// (github.com/kelseyhightower/envconfig, src/settings/settings.go): an unset
// variable takes its default, a set one is parsed even when empty (an
// empty number, boolean or duration is an error, as it is there), booleans
// by strconv.ParseBool, integers by strconv.ParseInt base 0, maps as
// "k:v,k2:v2". Every problem names its variable.
type env struct {
	lookup  func(string) (string, bool)
	read    map[string]bool // every variable looked up
	refused []Note
	warned  []Note
}

// Note is what start-up says about one or more variables.
type Note struct {
	Vars []string
	Msg  string
}

func (n Note) String() string { return strings.Join(n.Vars, ", ") + ": " + n.Msg }

func (e *env) get(name string) (string, bool) {
	e.read[name] = true
	return e.lookup(name)
}

// isSet reports whether name is in the environment.
func (e *env) isSet(name string) bool {
	_, ok := e.get(name)
	return ok
}

// setOf returns those of names that are set.
func (e *env) setOf(names ...string) []string {
	var out []string
	for _, n := range names {
		if e.isSet(n) {
			out = append(out, n)
		}
	}
	return out
}

func (e *env) refuse(msg string, vars ...string) {
	e.refused = append(e.refused, Note{Vars: vars, Msg: msg})
}

func (e *env) warn(msg string, vars ...string) {
	if len(vars) > 0 {
		e.warned = append(e.warned, Note{Vars: vars, Msg: msg})
	}
}

// warnIfSet warns about those of names that are set, in one note.
func (e *env) warnIfSet(msg string, names ...string) {
	e.warn(msg, e.setOf(names...)...)
}

func (e *env) str(name, def string) string {
	if v, ok := e.get(name); ok {
		return v
	}
	return def
}

func (e *env) boolean(name string, def bool) bool {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.refuse(fmt.Sprintf("want true or false (got %q); envoyproxy/ratelimit does not start with it either", v), name)
		return def
	}
	return b
}

func (e *env) integer(name string, def int) int {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		e.refuse(fmt.Sprintf("want a whole number (got %q); envoyproxy/ratelimit does not start with it either", v), name)
		return def
	}
	return int(n)
}

func (e *env) float(name string, def float64) float64 {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		e.refuse(fmt.Sprintf("want a number (got %q); envoyproxy/ratelimit does not start with it either", v), name)
		return def
	}
	return f
}

func (e *env) duration(name string, def time.Duration) time.Duration {
	v, ok := e.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.refuse(fmt.Sprintf("want a duration such as 10s (got %q); envoyproxy/ratelimit does not start with it either", v), name)
		return def
	}
	return d
}

// strmap reads envconfig's map: "k1:v1,k2:v2", a pair without exactly one
// colon refused as it is there.
func (e *env) strmap(name string) map[string]string {
	v, ok := e.get(name)
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		kv := strings.Split(pair, ":")
		if len(kv) != 2 {
			e.refuse(fmt.Sprintf("invalid map item %q: want key:value pairs separated by commas; envoyproxy/ratelimit does not start with it either", pair), name)
			return nil
		}
		out[kv[0]] = kv[1]
	}
	return out
}

// unread lists the variables of names that were never looked up: the test
// that every one of the peer's variables is read uses it.
func (e *env) unread(names []string) []string {
	var out []string
	for _, n := range names {
		if !e.read[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
