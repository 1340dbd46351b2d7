package rls

import "strings"

// Entry is one key/value of a request's descriptor.
type Entry struct{ Key, Value string }

// Select returns the limit configured for a descriptor's entries in domain,
// or nil when none applies (an unknown domain, a walk that leaves the tree,
// or one that ends above or below a limit). At each level the walk takes the
// exact key_value, else the first wildcard (in file order) the key_value
// matches, else the key alone; it goes one level down per entry and stops
// where the tree has no deeper level. The limit counts only at the
// request's last entry (envoyproxy/ratelimit src/config/config_impl.go,
// rateLimitConfigImpl.GetLimit).
func (c *Limits) Select(domain string, entries []Entry) *Limit {
	lv := c.domains[domain]
	if lv == nil || len(entries) == 0 {
		return nil
	}
	for i, e := range entries {
		kv := e.Key + "_" + e.Value
		n := lv.next[kv]
		if n == nil {
			for _, w := range lv.wildcards {
				if wildcardMatch(w.parts, kv) {
					n = lv.next[w.name]
					break
				}
			}
		}
		if n == nil {
			n = lv.next[e.Key]
		}
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.limit
		}
		if len(n.next) == 0 {
			return nil
		}
		lv = &n.level
	}
	return nil
}

// wildcardMatch reports whether s matches a name split at its `*`s
// (parts): each `*` stands for any run of characters, the empty one
// included, so s starts with the first part, ends with the last, and holds
// the others in order between them, none overlapping another; a name
// without `*` matches only itself. This is how envoyproxy/ratelimit has
// matched a `*` anywhere in a value since 2026-03 (wildcardMatch,
// src/config/config_impl.go); with one `*` at the end it is the prefix
// match it had before.
func wildcardMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// HasDomain reports whether domain is configured.
func (c *Limits) HasDomain(domain string) bool { return c.domains[domain] != nil }

// selectAll selects the limit of each of a request's descriptors in order,
// then applies ratelimit's request-wide rules: an unlimited limit is
// reported as unlimited[i] and selects nothing, and a named limit that
// another selected limit `replaces` selects nothing (envoyproxy/ratelimit
// src/service/ratelimit.go, constructLimitsToCheck). A descriptor that
// brings its own limit (overridden) is not looked up: ratelimit gives it a
// limit with no name that replaces nothing (GetLimit,
// src/config/config_impl.go). selected[i] is nil where no limit applies.
func (c *Limits) selectAll(domain string, descriptors [][]Entry, overridden func(int) bool) (selected []*Limit, unlimited []bool) {
	selected = make([]*Limit, len(descriptors))
	unlimited = make([]bool, len(descriptors))
	var replaced map[string]bool
	for i, d := range descriptors {
		if overridden(i) {
			continue
		}
		lim := c.Select(domain, d)
		if lim == nil {
			continue
		}
		for _, r := range lim.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		if lim.Unlimited {
			unlimited[i] = true
			continue
		}
		selected[i] = lim
	}
	for i, lim := range selected {
		if lim != nil && lim.Name != "" && replaced[lim.Name] {
			selected[i] = nil
		}
	}
	return selected, unlimited
}
