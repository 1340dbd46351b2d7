package extauthz

import "strings"

// NormalizePath returns the form of a request path that policies match: the
// path normalised as strictly as Envoy can be told to normalise it, whatever
// it was told, so that no encoding of a path dodges a rule written for it.
//
// Envoy keeps %2F unchanged by default (the HCM's
// path_with_escaped_slashes_action is KEEP_UNCHANGED), so /v1%2Fsearch
// would miss a /v1/search rule while many upstreams decode it. Here:
//
//   - the query string and fragment are dropped;
//   - %2F and %5C (any case) decode to "/", a backslash reads as "/"
//     (PathUtil::unescapeSlashes, and PathUtil::canonicalPath, which treats
//     "\" as a separator: source/common/http/path_utility.cc);
//   - escapes of unreserved characters (A-Z a-z 0-9 - . _ ~) are decoded and
//     every other escape is written upper case (RFC 3986 §6.2.2); a "%" that
//     starts no escape becomes %25, so a decoded character never forms a new
//     escape;
//   - repeated slashes merge (merge_slashes), then "." and ".." segments are
//     removed (RFC 3986 §5.2.4, normalize_path); ".." never climbs above "/".
//
// Normalising twice changes nothing (FuzzNormalizePath). A path that needs
// none of this is returned as it is, without allocating.
func NormalizePath(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if isNormalPath(p) {
		return p
	}
	b := make([]byte, 0, len(p)+1)
	b = append(b, '/')
	return removeDotSegments(unescape(b, p, true))
}

// unescape appends p to b (which holds at least "/") as a policy reads its
// characters: a backslash as "/"; escapes of unreserved characters decoded;
// with slashes, %2F and %5C as "/" and repeated slashes merged (the "/"
// already in b included), without, both kept as they are; every other
// escape written upper case; a "%" that starts no escape as %25, so a
// decoded character never forms a new escape. NormalizePath and RoutePath
// differ only in slashes.
func unescape(b []byte, p string, slashes bool) []byte {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch c {
		case '\\':
			c = '/'
		case '%':
			if i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
				d := unhex(p[i+1])<<4 | unhex(p[i+2])
				i += 2
				switch {
				case slashes && (d == '/' || d == '\\'):
					c = '/'
				case isUnreserved(d):
					c = d
				default:
					b = append(b, '%', upperHex[d>>4], upperHex[d&15])
					continue
				}
			} else {
				b = append(b, "%25"...)
				continue
			}
		}
		if slashes && c == '/' && b[len(b)-1] == '/' {
			continue // merge slashes (and the leading one added above)
		}
		b = append(b, c)
	}
	return b
}

// removeDotSegments resolves "." and ".." in b, which starts with "/" and
// has no repeated slashes.
func removeDotSegments(b []byte) string {
	out := b[:1] // "/": written in place, never ahead of what is read
	trailing := false
	for i := 1; i <= len(b); {
		j := i
		for j < len(b) && b[j] != '/' {
			j++
		}
		seg := b[i:j]
		last := j >= len(b)
		switch string(seg) {
		case ".":
			trailing = true
		case "..":
			if len(out) > 1 {
				k := len(out) - 2 // out ends with "/"
				for out[k] != '/' {
					k--
				}
				out = out[:k+1]
			}
			trailing = true
		case "":
			trailing = true // the path ended with "/"
		default:
			out = append(out, seg...)
			out = append(out, '/')
			trailing = false
		}
		if last {
			break
		}
		i = j + 1
	}
	if !trailing && len(out) > 1 {
		out = out[:len(out)-1]
	}
	return string(out)
}

// isNormalPath reports whether p is already what NormalizePath returns:
// starts with "/", no escape, backslash, repeated slash or dot segment.
func isNormalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '%', '\\':
			return false
		case '/':
			if i+1 < len(p) && p[i+1] == '/' {
				return false
			}
		case '.':
			if p[i-1] == '/' {
				rest := p[i+1:]
				if rest == "" || rest[0] == '/' || rest == "." || strings.HasPrefix(rest, "./") {
					return false
				}
			}
		}
	}
	return true
}

const upperHex = "0123456789ABCDEF"

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func isUnreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// RoutePath returns the form of a request path that Envoy's route matched
// when Envoy resolves dot segments but keeps %2F and %5C, as Istio
// configures it (normalize_path on, path_with_escaped_slashes_action left
// at KEEP_UNCHANGED): the query string and fragment dropped; escapes of
// unreserved characters decoded and every other escape, %2F and %5C
// included, kept (written upper case); a backslash read as "/"; "." and ".."
// segments resolved on the path as it is, empty segments included
// (PathUtil::canonicalPath, source/common/http/path_utility.cc, whose own
// test vectors TestRoutePathIsEnvoysCanonicalPath replays); then repeated
// slashes merged, which Envoy does after normalising when merge_slashes is
// on and which, for a policy's path (never with "//"), only adds matches.
//
// Under such an Envoy /api/orders%2F..%2F..%2Fx is routed as a path under
// /api/ while NormalizePath makes it /x: a policy applies when either form
// matches (View.MatchPaths).
func RoutePath(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if isNormalPath(p) {
		return p
	}
	b := make([]byte, 0, len(p)+1)
	if p == "" || (p[0] != '/' && p[0] != '\\') {
		b = append(b, '/')
	}
	return mergeSlashes(resolveDots(string(unescape(b, p, false))))
}

// resolveDots removes "." and ".." segments of p, which starts with "/", as
// RFC 3986 §5.2.4 does: an empty segment (from "//") is a segment, so
// /a//../b is /a/b; ".." never climbs above "/".
func resolveDots(p string) string {
	segs := strings.Split(p[1:], "/")
	out := segs[:0]
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
			continue
		}
		if last {
			out = append(out, "")
		}
	}
	return "/" + strings.Join(out, "/")
}

// mergeSlashes replaces each run of "/" in p with one.
func mergeSlashes(p string) string {
	if !strings.Contains(p, "//") {
		return p
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && len(b) > 0 && b[len(b)-1] == '/' {
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
}

// ParamPath returns p with its path parameters removed, then normalised
// (NormalizePath): in each segment, from ";" up to the next "/" or "\".
// Java Servlet containers (Tomcat, Jetty) and Spring drop path parameters
// before they route, so /admin;jsessionid=1/x, /admin;/x and /..;/admin/x
// are /admin/x to them, while Envoy's route sees the path as it is (its
// normalize_path keeps ";"). A policy for /admin/ applies to all three
// (View.MatchPaths). A path without ";" is returned normalised.
func ParamPath(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if strings.IndexByte(p, ';') < 0 {
		return NormalizePath(p)
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == ';' {
			for i+1 < len(p) && p[i+1] != '/' && p[i+1] != '\\' {
				i++
			}
			continue
		}
		b = append(b, p[i])
	}
	return NormalizePath(string(b))
}
