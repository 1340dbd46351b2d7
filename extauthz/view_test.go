package extauthz

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestViewReadsTheDefaultHeadersMode(t *testing.T) {
	v := NewView(fixture(t, "checkrequest-get-apikey.json"))
	if v.Method != "GET" || v.Path != "/v1/items" || v.Host != "api.example.com" || v.Source != "203.0.113.7" || !v.HTTP {
		t.Errorf("view = method %q path %q host %q source %q http %v", v.Method, v.Path, v.Host, v.Source, v.HTTP)
	}
	if k, ok := v.Header("x-api-key"); !ok || k != "k_live_3f9a2c7d" {
		t.Errorf("x-api-key = %q %v", k, ok)
	}
	if r, ok := v.Context("route"); !ok || r != "items" {
		t.Errorf("context route = %q %v", r, ok)
	}
	if _, ok := v.Header("x-missing"); ok {
		t.Error("a missing header reads as present")
	}
}

func TestViewReadsRawHeaderMapWithDuplicates(t *testing.T) {
	v := NewView(fixture(t, "checkrequest-raw-header-map-h2-tls.json"))
	if v.Path != "/v1/items/42" || v.Method != "GET" || v.Host != "api.example.com" {
		t.Errorf("view = %q %q %q", v.Method, v.Path, v.Host)
	}
	if k, _ := v.Header("x-api-key"); k != "k_live_3f9a2c7d" {
		t.Errorf("x-api-key from header_map = %q", k)
	}
	if ten, _ := v.Header("x-tenant"); ten != "acme,acme-eu" {
		t.Errorf("duplicate x-tenant = %q, want the values joined as Envoy joins them", ten)
	}
}

func TestViewFallsBackToPseudoHeadersAndNormalises(t *testing.T) {
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("post")},
			{Key: ":path", RawValue: []byte("/a/b?token=secret#frag")},
			{Key: ":authority", RawValue: []byte("API.Example.COM:8443")},
			{Key: "X-Api-Key", Value: "from-value-field"},
		}}},
	}}}
	v := NewView(req)
	if v.Method != "POST" || v.Path != "/a/b" || v.Host != "api.example.com" {
		t.Errorf("view = %q %q %q", v.Method, v.Path, v.Host)
	}
	if k, _ := v.Header("x-api-key"); k != "from-value-field" {
		t.Errorf("mixed-case raw header = %q", k)
	}
	// A headers map with upper-case keys (not Envoy, but a hand-written client).
	v = NewView(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Path: "/x", Headers: map[string]string{"X-Api-Key": "k"}}}}})
	if k, ok := v.Header("x-api-key"); !ok || k != "k" {
		t.Errorf("upper-case map key = %q %v", k, ok)
	}
	for in, want := range map[string]string{"[2001:db8::1]:443": "[2001:db8::1]", "Example.com.": "example.com", "h:80": "h", "2001:db8::1": "2001:db8::1"} {
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestViewOfATCPCheckHasNoHTTP(t *testing.T) {
	v := NewView(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: checkRequest("10.1.2.3", nil).Attributes.Source}})
	if v.HTTP || v.Source != "10.1.2.3" {
		t.Errorf("tcp view: http %v source %q", v.HTTP, v.Source)
	}
	if NewView(&authv3.CheckRequest{}).HTTP {
		t.Error("an empty CheckRequest reads as HTTP")
	}
}

func TestViewReadsMetadataClaims(t *testing.T) {
	claims, _ := structpb.NewStruct(map[string]any{"sub": "user-42", "n": 7.0, "admin": true, "nested": map[string]any{"org": "acme"}, "list": []any{"a"}})
	req := checkRequest("10.0.0.1", nil)
	req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.filters.http.jwt_authn": {Fields: map[string]*structpb.Value{"jwt_payload": structpb.NewStructValue(claims)}},
	}}
	v := NewView(req)
	for path, want := range map[string]string{"sub": "user-42", "n": "7", "admin": "true", "nested.org": "acme"} {
		got, ok := v.Metadata("envoy.filters.http.jwt_authn", append([]string{"jwt_payload"}, splitDots(path)...))
		if !ok || got != want {
			t.Errorf("claim %s = %q %v, want %q", path, got, ok, want)
		}
	}
	for _, path := range []string{"list", "missing", "sub.deeper"} {
		if got, ok := v.Metadata("envoy.filters.http.jwt_authn", append([]string{"jwt_payload"}, splitDots(path)...)); ok {
			t.Errorf("claim %s = %q, want absent", path, got)
		}
	}
	if _, ok := v.Metadata("other.namespace", []string{"sub"}); ok {
		t.Error("a missing namespace reads as present")
	}
}

func splitDots(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// Envoy sends either `headers` or `header_map` (CheckRequestUtils::setHttpRequest,
// source/extensions/filters/common/ext_authz/check_request_utils.cc), but a
// request carrying both is read whole: each name from either, a name in both
// joined, the map's value first.
func TestViewReadsBothHeadersAndHeaderMap(t *testing.T) {
	req := checkRequest("10.0.0.5", map[string]string{"x-api-key": "from-map", "x-tenant": "acme"})
	req.Attributes.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: "x-user", RawValue: []byte("u1")},
		{Key: "x-tenant", RawValue: []byte("acme-eu")},
		{Key: "X-Tenant", Value: "acme-us"},
	}}
	v := NewView(req)
	for name, want := range map[string]string{"x-api-key": "from-map", "x-user": "u1", "x-tenant": "acme,acme-eu,acme-us"} {
		if got, ok := v.Header(name); !ok || got != want {
			t.Errorf("%s = %q %v, want %q", name, got, ok, want)
		}
	}
	if _, ok := v.Header("x-missing"); ok {
		t.Error("a header in neither reads as present")
	}
}
