package extauthz

import (
	"net"
	"net/http"
	"net/textproto"
	"strings"
)

// HTTPRequestOptions say how the HTTP door reads an authorization request:
// where the original request's path, method and host are.
type HTTPRequestOptions struct {
	// PathPrefix is stripped from the request's path before the policies
	// match it (Envoy's http_service sends path_prefix + the original
	// path).
	PathPrefix string
	// OriginalURIHeader, OriginalMethodHeader and OriginalHostHeader, when
	// set, name the headers a proxy that sends every authorization request
	// to one URI puts the original request's URI (path and query), method
	// and host in (nginx's recipe: X-Original-URI, X-Original-Method;
	// Traefik and Caddy: X-Forwarded-Uri, X-Forwarded-Method,
	// X-Forwarded-Host). A header named here and absent from a request
	// leaves that request's own.
	OriginalURIHeader, OriginalMethodHeader, OriginalHostHeader string
	// GRPCStatusAlways puts gRPC's status (grpc-status 8, RESOURCE_EXHAUSTED)
	// and grpc-retry-pushback-ms on every denial, not only on a request whose
	// content-type is gRPC: Envoy's http_service must not send the door a
	// content-type (a gRPC one makes Envoy's own errors read as allows,
	// envoyproxy/envoy#32476), and Envoy keeps a grpc-status the denial
	// carries when it answers a gRPC caller (Utility::prepareLocalReply).
	GRPCStatusAlways bool
}

// canonical returns o with its header names in net/http's form, in which
// a request's headers are keyed.
func (o HTTPRequestOptions) canonical() HTTPRequestOptions {
	o.OriginalURIHeader = textproto.CanonicalMIMEHeaderKey(o.OriginalURIHeader)
	o.OriginalMethodHeader = textproto.CanonicalMIMEHeaderKey(o.OriginalMethodHeader)
	o.OriginalHostHeader = textproto.CanonicalMIMEHeaderKey(o.OriginalHostHeader)
	return o
}

// resetHTTP makes v a view of r, an authorization request a proxy sent the
// HTTP door, read as o says (o's header names canonical): the original
// request's method, path (no query) and host, the request's headers (a
// repeated one read as Envoy joins it, values separated by ","), and the
// connection's peer as the source address, which is the proxy: the client
// address comes from X-Forwarded-For (ClientIP).
func (v *View) resetHTTP(r *http.Request, o *HTTPRequestOptions) {
	*v = View{HTTP: true, hh: r.Header, hostHdr: r.Host}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		v.Source = host
	} else {
		v.Source = r.RemoteAddr
	}
	v.Method = r.Method
	if s := v.first(o.OriginalMethodHeader); s != "" {
		v.Method = strings.TrimSpace(s)
	}
	if hasLower(v.Method) {
		v.Method = strings.ToUpper(v.Method)
	}
	path := ""
	if s := v.first(o.OriginalURIHeader); s != "" {
		path = strings.TrimSpace(s)
	} else {
		path = stripPrefix(requestPath(r), o.PathPrefix)
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	v.Path = path
	host := r.Host
	if s := v.first(o.OriginalHostHeader); s != "" {
		host = strings.TrimSpace(s)
	}
	v.Host = normalizeHost(host)
	if ct := v.first("Content-Type"); ct != "" {
		v.GRPC = isGRPC(ct)
	}
	v.GRPC = v.GRPC || o.GRPCStatusAlways
}

// first is the first value of the header whose canonical name is key ("":
// none, or key is "").
func (v *View) first(key string) string {
	if key == "" {
		return ""
	}
	if vs := v.hh[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// requestPath is the request's target as the proxy sent it, undecoded
// (RequestURI, not URL.Path, which net/http has decoded): what Envoy's
// :path is, and what the policies' path normalization starts from.
func requestPath(r *http.Request) string {
	if u := r.RequestURI; strings.HasPrefix(u, "/") || u == "*" {
		return u
	}
	if r.URL != nil { // absolute-form: http://host/path
		return r.URL.EscapedPath()
	}
	return r.RequestURI
}

// stripPrefix removes Envoy's path_prefix from path: what is left is the
// original path, which starts with / (Envoy appends the request's :path to
// the prefix). A path without the prefix is left as it is.
func stripPrefix(path, prefix string) string {
	if prefix == "" {
		return path
	}
	rest, ok := strings.CutPrefix(path, prefix)
	switch {
	case !ok:
		return path
	case rest == "*" || strings.HasPrefix(rest, "/"):
		return rest
	}
	return "/" + rest
}

// httpHeader looks name (lower case) up in the HTTP door's request:
// net/http keys headers by their canonical form and keeps Host apart.
// Envoy's pseudo-headers read as a CheckRequest carries them.
func (v *View) httpHeader(name string) (string, bool) {
	switch name {
	case "host", ":authority":
		return v.hostHdr, v.hostHdr != ""
	case ":method":
		return v.Method, true
	case ":path":
		return v.Path, true
	}
	var vs []string
	var buf [64]byte
	if len(name) <= len(buf) {
		k, ok := canonicalKey(buf[:0], name)
		if !ok {
			return "", false // no such header can reach net/http's map
		}
		vs = v.hh[string(k)]
	} else {
		vs = v.hh[textproto.CanonicalMIMEHeaderKey(name)]
	}
	switch len(vs) {
	case 0:
		return "", false
	case 1:
		return vs[0], true
	}
	return strings.Join(vs, ","), true
}

// canonicalKey appends name in net/http's canonical form (textproto's
// CanonicalMIMEHeaderKey: the first letter and each letter after a hyphen
// upper case, the rest lower case) to b; false when name is not a header
// name, which net/http refuses in a request.
func canonicalKey(b []byte, name string) ([]byte, bool) {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isTokenByte(c) {
			return b, false
		}
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b = append(b, c)
		upper = c == '-'
	}
	return b, len(name) > 0
}

// isTokenByte reports whether c may appear in a header name (RFC 9110's
// tchar).
func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
