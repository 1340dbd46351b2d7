package extauthz

import (
	"net/netip"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// FuzzClientIP: any X-Forwarded-For and source address give either no
// client or an address that really was in the header or the source, and
// with enough valid entries exactly the one Envoy's rule names.
func FuzzClientIP(f *testing.F) {
	f.Add("198.51.100.23, 192.0.2.10,10.0.0.5", "10.0.0.5", 2, false, "")
	f.Add("", "2001:db8::1", 0, false, "")
	f.Add("[2001:db8::1]:443, 1.2.3.4:80", "::ffff:10.0.0.1", 1, true, "203.0.113.7")
	f.Add(",,, ,", "", 3, false, "x")
	f.Fuzz(func(t *testing.T, xff, source string, hops int, useExt bool, ext string) {
		hops = ((hops % MaxXFFEntries) + MaxXFFEntries) % MaxXFFEntries
		c := ClientIP{TrustedHops: hops, UseExternalAddress: useExt, IPv4Prefix: 32, IPv6Prefix: 128}
		h := map[string]string{"x-forwarded-for": xff}
		if ext != "" {
			h["x-envoy-external-address"] = ext
		}
		got := c.Resolve(viewWith(source, h))
		if !got.IsValid() {
			return
		}
		appears := func(s string, parse func(string) (netip.Addr, bool)) bool {
			a, ok := parse(s)
			return ok && a == got.Addr()
		}
		inXFF := false
		for _, e := range strings.Split(xff, ",") {
			inXFF = inXFF || appears(e, parseBareIP)
		}
		if !inXFF && !appears(source, parseIP) && !(useExt && appears(ext, parseBareIP)) {
			t.Fatalf("client %s is in neither XFF %q, source %q nor external %q", got, xff, source, ext)
		}
		entries := strings.Split(xff, ",")
		if !useExt && xff != "" && len(entries) > hops {
			if a, ok := parseBareIP(entries[len(entries)-1-hops]); ok && a != got.Addr() {
				t.Fatalf("hops %d of %q: got %s, Envoy's rule names %s", hops, xff, got, a)
			}
		}
	})
}

// FuzzHeaderMap: raw header_map entries with any names, bytes and
// duplicates: lookups never fail, and a name's entries read joined by ",".
func FuzzHeaderMap(f *testing.F) {
	f.Add("x-api-key", "k1", "X-Api-Key", "k2\xff", ":path", "/a?b")
	f.Add("", "", "x", "", "x", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: k1, RawValue: []byte(v1)}, {Key: k2, RawValue: []byte(v2)}, {Key: k3, Value: v3},
			}}},
		}}}
		v := NewView(req)
		name := strings.ToLower(k1)
		got, ok := v.Header(name)
		var want []string
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}} {
			if strings.EqualFold(kv[0], name) && len(kv[0]) == len(name) {
				want = append(want, kv[1])
			}
		}
		if ok != (len(want) > 0) || (ok && got != strings.Join(want, ",")) {
			t.Fatalf("Header(%q) = %q %v, want %q", name, got, ok, want)
		}
	})
}
