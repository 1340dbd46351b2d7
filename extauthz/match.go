package extauthz

import (
	"fmt"
	"strconv"
	"strings"
)

// matcher is a compiled MatchSpec.
type matcher struct {
	tcp        bool
	pathPrefix string
	path       string
	foldCase   bool // path and pathPrefix match ignoring ASCII case
	methods    []string
	hosts      []string // exact hosts, and ".suffix" for "*.suffix"
	headers    []headerMatch
	context    [][2]string
	// principals and notPrincipals: exact principals, or prefixes (ending
	// in "*" as written, stored without it).
	principals, notPrincipals []principalMatch
}

type principalMatch struct {
	value  string
	prefix bool
}

func (p principalMatch) matches(principal string) bool {
	if p.prefix {
		return strings.HasPrefix(principal, p.value)
	}
	return principal == p.value
}

// compilePrincipals reads a principals list: each entry exact, or a prefix
// written with a trailing "*".
func compilePrincipals(list []string, at string, el *errorList) []principalMatch {
	var out []principalMatch
	for i, s := range list {
		p := principalMatch{value: strings.TrimSpace(s)}
		if strings.HasSuffix(p.value, "*") {
			p.value, p.prefix = strings.TrimSuffix(p.value, "*"), true
		}
		if p.value == "" || strings.Contains(p.value, "*") {
			el.add(fmt.Sprintf("%s[%d]", at, i), "want a principal such as spiffe://cluster.local/ns/NS/sa/SA, or a prefix ending in * (got %q)", s)
			continue
		}
		out = append(out, p)
	}
	return out
}

type headerMatch struct {
	name, value, prefix string
	absent              bool
}

var methods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true}

func compileMatch(s *MatchSpec, at string, el *errorList) matcher {
	m := matcher{pathPrefix: s.PathPrefix, path: s.Path}
	switch strings.ToLower(s.Protocol) {
	case "", "http":
	case "tcp":
		m.tcp = true
		if s.PathPrefix != "" || s.Path != "" || len(s.Methods) > 0 || len(s.Hosts) > 0 || len(s.Headers) > 0 {
			el.add(at, "a tcp policy cannot match on HTTP fields (path, methods, hosts, headers)")
		}
	default:
		el.add(at+".protocol", "must be http or tcp (got %q)", s.Protocol)
	}
	m.compilePaths(s, at, el)
	for i, meth := range s.Methods {
		u := strings.ToUpper(strings.TrimSpace(meth))
		if !methods[u] {
			el.add(fmt.Sprintf("%s.methods[%d]", at, i), "unknown HTTP method %q", meth)
		}
		m.methods = append(m.methods, u)
	}
	m.hosts = compileHosts(s.Hosts, at, el)
	m.headers = compileHeaders(s.Headers, at, el)
	for k, v := range s.Context {
		m.context = append(m.context, [2]string{k, v})
	}
	m.principals = compilePrincipals(s.Principals, at+".principals", el)
	m.notPrincipals = compilePrincipals(s.NotPrincipals, at+".not_principals", el)
	return m
}

// compilePaths checks path and path_prefix and reads them as requests' are
// read.
func (m *matcher) compilePaths(s *MatchSpec, at string, el *errorList) {
	if s.PathPrefix != "" && !strings.HasPrefix(s.PathPrefix, "/") {
		el.add(at+".path_prefix", "must start with / (got %q)", s.PathPrefix)
	}
	if s.Path != "" && !strings.HasPrefix(s.Path, "/") {
		el.add(at+".path", "must start with / (got %q)", s.Path)
	}
	if strings.ContainsAny(s.Path+s.PathPrefix, "?#") {
		el.add(at, "paths are matched without the query string: remove ? and # from path/path_prefix")
	}
	// Requests are matched by the forms of their path (View.MatchPaths),
	// the fully decoded one among them: the rule's own path is read as that
	// one (NormalizePath), so /v1/./items or /v1//items in
	// a rule means /v1/items. A prefix keeps its trailing slash.
	if m.path != "" {
		m.path = NormalizePath(m.path)
	}
	if s.CaseSensitive != nil && !*s.CaseSensitive {
		if m.path == "" && m.pathPrefix == "" {
			el.add(at+".case_sensitive", "applies to path and path_prefix: set one, or remove case_sensitive")
		}
		m.foldCase = true
	}
	if m.pathPrefix != "" {
		m.pathPrefix = NormalizePath(m.pathPrefix)
	}
}

// compileHosts reads hosts: exact names, and ".suffix" for "*.suffix".
func compileHosts(list []string, at string, el *errorList) []string {
	var out []string
	for i, h := range list {
		h = strings.ToLower(strings.TrimSpace(h))
		switch {
		case h == "" || strings.ContainsAny(h, "/ "):
			el.add(fmt.Sprintf("%s.hosts[%d]", at, i), "not a host name: %q", list[i])
		case strings.HasPrefix(h, "*."):
			out = append(out, h[1:])
		case strings.Contains(h, "*"):
			el.add(fmt.Sprintf("%s.hosts[%d]", at, i), "a wildcard may only start a host, as in *.example.com (got %q)", list[i])
		default:
			out = append(out, normalizeHost(h))
		}
	}
	return out
}

// compileHeaders reads the header rules.
func compileHeaders(list []HeaderMatchSpec, at string, el *errorList) []headerMatch {
	var out []headerMatch
	for i, h := range list {
		p := fmt.Sprintf("%s.headers[%d]", at, i)
		name := strings.ToLower(strings.TrimSpace(h.Name))
		if !headerName.MatchString(name) {
			el.add(p+".name", "not a header name: %q", h.Name)
		}
		hm := headerMatch{name: name, value: h.Value, prefix: h.Prefix}
		if h.Value != "" && h.Prefix != "" {
			el.add(p, "set value or prefix, not both")
		}
		if h.Present != nil && !*h.Present {
			hm.absent = true
			if h.Value != "" || h.Prefix != "" {
				el.add(p, "present: false cannot be combined with value or prefix")
			}
		}
		out = append(out, hm)
	}
	return out
}

// matches reports whether the request in v fits.
func (m *matcher) matches(v *View) bool { return m.miss(v).cond == fits }

// condition names the first condition of a match that a request fails
// (fits: none), for Explain; i is the index of the header or context entry.
type condition struct {
	cond uint8
	i    int
}

// The conditions of a match, in the order miss checks them.
const (
	fits = iota
	failProtocol
	failPath
	failMethod
	failHost
	failHeader
	failContext
	failPrincipal
	failNotPrincipal
)

// miss is the first condition of m the request in v fails: matches and
// Explain both read it, so an explanation cannot drift from a decision.
func (m *matcher) miss(v *View) condition {
	if m.tcp != !v.HTTP {
		return condition{cond: failProtocol}
	}
	if (m.pathPrefix != "" || m.path != "") && !m.pathMatches(v.MatchPaths()) {
		return condition{cond: failPath}
	}
	if len(m.methods) > 0 && !contains(m.methods, v.Method) {
		return condition{cond: failMethod}
	}
	if len(m.hosts) > 0 && !m.hostMatches(v.Host) {
		return condition{cond: failHost}
	}
	for i := range m.headers {
		h := &m.headers[i]
		val, ok := v.Header(h.name)
		switch {
		case h.absent:
			if ok {
				return condition{failHeader, i}
			}
		case !ok:
			return condition{failHeader, i}
		case h.value != "" && val != h.value:
			return condition{failHeader, i}
		case h.prefix != "" && !strings.HasPrefix(val, h.prefix):
			return condition{failHeader, i}
		}
	}
	for i, kv := range m.context {
		if val, ok := v.Context(kv[0]); !ok || val != kv[1] {
			return condition{failContext, i}
		}
	}
	if len(m.principals) > 0 && !anyPrincipal(m.principals, v.Principal) {
		return condition{cond: failPrincipal}
	}
	if anyPrincipal(m.notPrincipals, v.Principal) {
		return condition{cond: failNotPrincipal}
	}
	return condition{}
}

// describe says, for an operator, which condition of m the request in v
// failed (c from miss), with what the request carried: "" when it fits.
func (m *matcher) describe(c condition, v *View) string {
	switch c.cond {
	case failProtocol:
		if m.tcp {
			return "match.protocol: the policy is tcp, the request is HTTP"
		}
		return "match.protocol: the policy is http, the request is a TCP connection"
	case failPath:
		switch {
		case m.path != "" && m.pathPrefix != "":
			return fmt.Sprintf("match.path: the request's path %q is not %q under path_prefix %q", v.Path, m.path, m.pathPrefix)
		case m.path != "":
			return fmt.Sprintf("match.path: the request's path %q is not %q", v.Path, m.path)
		}
		return fmt.Sprintf("match.path_prefix: the request's path %q does not start with %q", v.Path, m.pathPrefix)
	case failMethod:
		return "match.methods: " + strconv.Quote(v.Method) + " is not one of " + strings.Join(m.methods, ", ")
	case failHost:
		return "match.hosts: " + strconv.Quote(v.Host) + " is not one of the policy's hosts"
	case failHeader:
		h := m.headers[c.i]
		val, ok := v.Header(h.name)
		switch {
		case h.absent:
			return fmt.Sprintf("match.headers[%d]: %s must be absent, and the request sends it", c.i, h.name)
		case !ok:
			return fmt.Sprintf("match.headers[%d]: the request does not send %s", c.i, h.name)
		case h.value != "":
			return fmt.Sprintf("match.headers[%d]: %s is %q, not %q", c.i, h.name, val, h.value)
		}
		return fmt.Sprintf("match.headers[%d]: %s %q does not start with %q", c.i, h.name, val, h.prefix)
	case failContext:
		kv := m.context[c.i]
		if val, ok := v.Context(kv[0]); ok {
			return fmt.Sprintf("match.context: %s is %q, not %q", kv[0], val, kv[1])
		}
		return fmt.Sprintf("match.context: the request has no context extension %s (want %q)", kv[0], kv[1])
	case failPrincipal:
		return "match.principals: the peer's principal " + strconv.Quote(v.Principal) + " is not one of the policy's"
	case failNotPrincipal:
		return "match.not_principals: the peer's principal " + strconv.Quote(v.Principal) + " is excluded"
	}
	return ""
}

func anyPrincipal(list []principalMatch, principal string) bool {
	for _, p := range list {
		if p.matches(principal) {
			return true
		}
	}
	return false
}

// pathMatches reports whether one of the forms of the request path fits
// both path and path_prefix: a path that reaches the upstream as a limited
// one, in any reading, is limited.
//
// With case_sensitive: false the comparison ignores ASCII case only, as
// Envoy's does: RouteMatch.case_sensitive reaches
// Matchers::PathMatcher::createPrefix / createExact with ignore_case
// (PrefixRouteEntryImpl and PathRouteEntryImpl in
// source/common/router/config_impl.cc), whose StringMatcher compares with
// absl::StartsWithIgnoreCase / EqualsIgnoreCase, ASCII letters folded and
// no other. A rule's escapes are written upper case and a request's too
// (NormalizePath), so %2f and %2F are one either way.
func (m *matcher) pathMatches(forms []string) bool {
	for _, f := range forms {
		if (m.pathPrefix == "" || m.same(f[:min(len(f), len(m.pathPrefix))], m.pathPrefix)) && (m.path == "" || m.same(f, m.path)) {
			return true
		}
	}
	return false
}

// same compares a request's path (or its start) with a rule's, ignoring
// ASCII case under case_sensitive: false.
func (m *matcher) same(a, b string) bool {
	if m.foldCase {
		return asciiEqualFold(a, b)
	}
	return a == b
}

// asciiEqualFold reports whether a and b are equal with ASCII letters
// folded (not strings.EqualFold's Unicode folding, under which the Kelvin
// sign U+212A is k: Envoy folds ASCII only).
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}

func (m *matcher) hostMatches(host string) bool {
	for _, h := range m.hosts {
		if h == host || (h[0] == '.' && strings.HasSuffix(host, h)) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
