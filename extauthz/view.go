package extauthz

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// View is the part of a CheckRequest that policies look at, read once.
// Headers come from the `headers` map and, in Envoy's encode_raw_headers
// mode, from `header_map` (both are read when both are set), with names
// matched case-insensitively. The HTTP door reads its requests into the
// same View (resetHTTP), so the policies see a request alike through
// either door.
type View struct {
	// HTTP is false for a check from Envoy's network (TCP) filter.
	HTTP   bool
	Method string // upper case
	Path   string // without query string or fragment
	Host   string // lower case, without port
	Source string // the connection's remote address (IP, no port)
	// Principal is the caller's authenticated identity as Envoy saw it
	// (attributes.source.principal): the URI SAN, else the DNS SAN, else
	// the subject of the peer's TLS certificate; under Istio mTLS the
	// calling workload's SPIFFE ID. Empty without a client certificate.
	Principal string
	// GRPC is true when the downstream request is gRPC to Envoy (content-type
	// application/grpc or application/grpc+...; see isGRPC): Envoy then
	// answers a denial as a gRPC status (see denyResponse).
	GRPC bool

	headers map[string]string
	raw     []*corev3.HeaderValue
	folded  bool // headers has keys that are not lower case: look up by folding
	// hh and hostHdr are an HTTP door request's headers (resetHTTP), read
	// when neither headers nor raw is set.
	hh      http.Header
	hostHdr string

	context  map[string]string
	metadata map[string]*structpb.Struct

	normPath string // MatchPath, once computed
	normDone bool
	forms    [3]string // MatchPaths, once computed
	nForms   int
}

// MatchPath is Path fully decoded: NormalizePath(Path), computed once per
// request.
func (v *View) MatchPath() string {
	if !v.normDone {
		v.normPath, v.normDone = NormalizePath(v.Path), true
	}
	return v.normPath
}

// MatchPaths are the forms of Path a policy's path or path_prefix is
// matched against; the policy applies when any of them matches. They are
// the path fully decoded (MatchPath), the form Envoy's route matched when
// Envoy keeps %2F (RoutePath: Istio's setting), and, when the path has
// path parameters, the path without them (ParamPath: what a Servlet
// container serves). Equal forms are listed once; an ordinary path has
// one. Computed once per request.
func (v *View) MatchPaths() []string {
	if v.nForms == 0 {
		v.forms[0], v.nForms = v.MatchPath(), 1
		if !isNormalPath(v.Path) || strings.IndexByte(v.Path, ';') >= 0 {
			for _, f := range [...]string{RoutePath(v.Path), ParamPath(v.Path)} {
				if !slices.Contains(v.forms[:v.nForms], f) {
					v.forms[v.nForms] = f
					v.nForms++
				}
			}
		}
	}
	return v.forms[:v.nForms]
}

// NewView reads req. It never fails: whatever is missing reads as empty.
func NewView(req *authv3.CheckRequest) *View {
	v := &View{}
	v.Reset(req)
	return v
}

// Reset makes v a view of req, reusing v's memory.
func (v *View) Reset(req *authv3.CheckRequest) {
	attrs := req.GetAttributes()
	h := attrs.GetRequest().GetHttp()
	*v = View{
		HTTP:      h != nil,
		headers:   h.GetHeaders(),
		raw:       h.GetHeaderMap().GetHeaders(),
		context:   attrs.GetContextExtensions(),
		metadata:  attrs.GetMetadataContext().GetFilterMetadata(),
		Source:    attrs.GetSource().GetAddress().GetSocketAddress().GetAddress(),
		Principal: attrs.GetSource().GetPrincipal(),
	}
	for k := range v.headers {
		if hasUpper(k) {
			v.folded = true
			break
		}
	}
	v.Method = h.GetMethod()
	if v.Method == "" {
		v.Method, _ = v.Header(":method")
	}
	if hasLower(v.Method) {
		v.Method = strings.ToUpper(v.Method)
	}
	path := h.GetPath()
	if path == "" {
		path, _ = v.Header(":path")
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	v.Path = path
	host := h.GetHost()
	if host == "" {
		if host, _ = v.Header(":authority"); host == "" {
			host, _ = v.Header("host")
		}
	}
	v.Host = normalizeHost(host)
	if ct, ok := v.Header("content-type"); ok {
		v.GRPC = isGRPC(ct)
	}
}

// isGRPC reports whether a content-type is gRPC's, exactly as Envoy decides
// it (Grpc::Common::hasGrpcContentType, source/common/grpc/common.cc):
// "application/grpc" itself or anything starting with "application/grpc+",
// case-sensitive. application/grpc-web is not gRPC to Envoy (unless a
// grpc_web filter rewrote the request before ext_authz), and Envoy answers
// such a caller with a plain HTTP reply.
func isGRPC(ct string) bool {
	const p = "application/grpc"
	return strings.HasPrefix(ct, p) && (len(ct) == len(p) || ct[len(p)] == '+')
}

// Header returns the value of the named header; name must be lower case.
// Repeated headers read as Envoy joins them: values separated by ",".
//
// Envoy fills either `headers` or, with encode_raw_headers, `header_map`,
// never both (CheckRequestUtils::setHttpRequest in
// source/extensions/filters/common/ext_authz/check_request_utils.cc). A
// request that carries both is read as one list: a name present in both
// reads as its `headers` value, then its header_map values, joined by ",".
func (v *View) Header(name string) (string, bool) {
	if len(v.raw) == 0 {
		return v.mapHeader(name)
	}
	if len(v.headers) == 0 {
		return v.rawHeader(name)
	}
	m, inMap := v.mapHeader(name)
	r, inRaw := v.rawHeader(name)
	switch {
	case !inRaw:
		return m, inMap
	case !inMap:
		return r, true
	}
	return m + "," + r, true
}

// mapHeader looks name up in the `headers` map.
func (v *View) mapHeader(name string) (string, bool) {
	if s, ok := v.headers[name]; ok {
		return s, true
	}
	if v.folded {
		for k, s := range v.headers {
			if strings.EqualFold(k, name) {
				return s, true
			}
		}
	}
	if v.hh != nil {
		return v.httpHeader(name)
	}
	return "", false
}

// rawHeader looks name up in header_map, joining repeated entries.
func (v *View) rawHeader(name string) (string, bool) {
	// One pass to find the entries; a single entry (the usual case) needs
	// no joining, several are joined in one buffer (linear in their size).
	first, n := -1, 0
	for i, hv := range v.raw {
		if len(hv.GetKey()) == len(name) && strings.EqualFold(hv.GetKey(), name) {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	switch n {
	case 0:
		return "", false
	case 1:
		return rawValue(v.raw[first]), true
	}
	var b strings.Builder
	for _, hv := range v.raw[first:] {
		if len(hv.GetKey()) == len(name) && strings.EqualFold(hv.GetKey(), name) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(rawValue(hv))
		}
	}
	return b.String(), true
}

// rawValue reads a header_map entry: raw_value when set (Envoy's
// encode_raw_headers), else value.
func rawValue(hv *corev3.HeaderValue) string {
	if raw := hv.GetRawValue(); len(raw) > 0 {
		return string(raw)
	}
	return hv.GetValue()
}

// Context returns a context_extensions value (Envoy per-route check settings).
func (v *View) Context(name string) (string, bool) {
	s, ok := v.context[name]
	return s, ok
}

// Metadata returns the value at path inside the dynamic metadata namespace
// ns (e.g. a claim jwt_authn stored), rendered as text; lists and structs
// are not identities and read as absent.
func (v *View) Metadata(ns string, path []string) (string, bool) {
	st := v.metadata[ns]
	if st == nil || len(path) == 0 {
		return "", false
	}
	var val *structpb.Value
	for i, p := range path {
		val = st.GetFields()[p]
		if val == nil {
			return "", false
		}
		if i < len(path)-1 {
			if st = val.GetStructValue(); st == nil {
				return "", false
			}
		}
	}
	switch k := val.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue, k.StringValue != ""
	case *structpb.Value_NumberValue:
		return formatNumber(k.NumberValue), true
	case *structpb.Value_BoolValue:
		if k.BoolValue {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

// normalizeHost lower-cases host and drops a port (and IPv6 brackets' port).
func normalizeHost(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[:i+1]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ':') == i {
		h = h[:i]
	}
	if hasUpper(h) {
		h = strings.ToLower(h)
	}
	return strings.TrimSuffix(h, ".")
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

func hasLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return true
		}
	}
	return false
}

// formatNumber renders a metadata number as a JWT claim would read: 42, not 4.2e+01.
func formatNumber(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
