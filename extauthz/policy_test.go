package extauthz

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func compileOne(t *testing.T, p PolicySpec, opts Options) (*Engine, *Policy) {
	t.Helper()
	if p.Name == "" {
		p.Name = "p"
	}
	if len(p.Key) == 0 {
		p.Key = []string{"client_ip"}
	}
	if p.Capacity == 0 {
		p.Capacity, p.RefillPerSecond = 10, "1"
	}
	e, err := Compile([]PolicySpec{p}, opts)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return e, e.Policies[0]
}

func TestMatchingTable(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name  string
		match MatchSpec
		hdrs  map[string]string
		ctx   map[string]string
		want  bool
	}{
		{"an empty match takes every HTTP request", MatchSpec{}, nil, nil, true},
		{"path prefix", MatchSpec{PathPrefix: "/api/"}, map[string]string{":path": "/api/v1?x=1"}, nil, true},
		{"path prefix miss", MatchSpec{PathPrefix: "/api/"}, map[string]string{":path": "/apix"}, nil, false},
		{"exact path ignores the query", MatchSpec{Path: "/login"}, map[string]string{":path": "/login?next=/"}, nil, true},
		{"exact path is exact", MatchSpec{Path: "/login"}, map[string]string{":path": "/login/x"}, nil, false},
		{"methods, case-insensitive in config", MatchSpec{Methods: []string{"post", "PUT"}}, map[string]string{":method": "POST"}, nil, true},
		{"methods miss", MatchSpec{Methods: []string{"POST"}}, map[string]string{":method": "GET"}, nil, false},
		{"an exact host, port and case ignored", MatchSpec{Hosts: []string{"API.example.com"}}, map[string]string{":authority": "api.EXAMPLE.com:8443"}, nil, true},
		{"a wildcard host", MatchSpec{Hosts: []string{"*.example.com"}}, map[string]string{":authority": "eu.api.example.com"}, nil, true},
		{"a wildcard does not match the bare domain", MatchSpec{Hosts: []string{"*.example.com"}}, map[string]string{":authority": "example.com"}, nil, false},
		{"a header value", MatchSpec{Headers: []HeaderMatchSpec{{Name: "X-Tier", Value: "gold"}}}, map[string]string{"x-tier": "gold"}, nil, true},
		{"a header value miss", MatchSpec{Headers: []HeaderMatchSpec{{Name: "x-tier", Value: "gold"}}}, map[string]string{"x-tier": "silver"}, nil, false},
		{"a header prefix", MatchSpec{Headers: []HeaderMatchSpec{{Name: "authorization", Prefix: "Bearer "}}}, map[string]string{"authorization": "Bearer x"}, nil, true},
		{"header presence", MatchSpec{Headers: []HeaderMatchSpec{{Name: "x-api-key"}}}, map[string]string{"x-api-key": "k"}, nil, true},
		{"header presence miss", MatchSpec{Headers: []HeaderMatchSpec{{Name: "x-api-key"}}}, nil, nil, false},
		{"header absence", MatchSpec{Headers: []HeaderMatchSpec{{Name: "x-api-key", Present: &no}}}, nil, nil, true},
		{"header absence miss", MatchSpec{Headers: []HeaderMatchSpec{{Name: "x-api-key", Present: &no}}}, map[string]string{"x-api-key": "k"}, nil, false},
		{"context", MatchSpec{Context: map[string]string{"route": "items"}}, nil, map[string]string{"route": "items", "vh": "api"}, true},
		{"context miss", MatchSpec{Context: map[string]string{"route": "items"}}, nil, map[string]string{"route": "orders"}, false},
		{"every field must fit", MatchSpec{PathPrefix: "/api/", Methods: []string{"GET"}}, map[string]string{":path": "/api/x", ":method": "POST"}, nil, false},
		{"an HTTP request never matches a tcp policy", MatchSpec{Protocol: "tcp"}, nil, nil, false},
		// Paths are case-sensitive unless case_sensitive: false, as in
		// Envoy's RouteMatch (see matcher.pathMatches).
		{"a path prefix is case-sensitive by default", MatchSpec{PathPrefix: "/api/"}, map[string]string{":path": "/API/x"}, nil, false},
		{"an exact path is case-sensitive by default", MatchSpec{Path: "/login"}, map[string]string{":path": "/Login"}, nil, false},
		{"case_sensitive false: a prefix ignores case", MatchSpec{PathPrefix: "/api/", CaseSensitive: &no}, map[string]string{":path": "/API/x"}, nil, true},
		{"case_sensitive false: the rule's case is ignored too", MatchSpec{PathPrefix: "/Api/V1/", CaseSensitive: &no}, map[string]string{":path": "/aPI/v1/items"}, nil, true},
		{"case_sensitive false: an exact path ignores case", MatchSpec{Path: "/login", CaseSensitive: &no}, map[string]string{":path": "/LOGIN?next=/"}, nil, true},
		{"case_sensitive false: an exact path is still exact", MatchSpec{Path: "/login", CaseSensitive: &no}, map[string]string{":path": "/LOGIN/x"}, nil, false},
		{"case_sensitive false: an escaped letter decodes, then folds", MatchSpec{PathPrefix: "/api/", CaseSensitive: &no}, map[string]string{":path": "/%41pI/x"}, nil, true},
		{"case_sensitive false folds ASCII only", MatchSpec{Path: "/k", CaseSensitive: &no}, map[string]string{":path": "/\u212a"}, nil, false},
		{"case_sensitive false: a prefix still needs every byte", MatchSpec{PathPrefix: "/api/", CaseSensitive: &no}, map[string]string{":path": "/AP"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, p := compileOne(t, PolicySpec{Match: tc.match}, Options{})
			req := checkRequest("10.0.0.1", tc.hdrs)
			h := req.Attributes.Request.Http
			h.Method, h.Path, h.Host = h.Headers[":method"], h.Headers[":path"], h.Headers[":authority"]
			req.Attributes.ContextExtensions = tc.ctx
			if got := p.match.matches(NewView(req)); got != tc.want {
				t.Errorf("matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIdentitiesAreHashedAndKeptApart(t *testing.T) {
	e, p := compileOne(t, PolicySpec{Key: []string{"header:x-api-key", "header:x-user", "client_ip"}}, Options{})
	id := func(h map[string]string) string {
		got, ok := e.identity(p, NewView(checkRequest("198.51.100.1", h)))
		if !ok {
			t.Fatal("no identity")
		}
		return got
	}
	k := id(map[string]string{"x-api-key": "secret-key"})
	if len(k) != 22 || strings.Contains(k, "secret") {
		t.Errorf("identity %q is not a 22-character hash", k)
	}
	if k != id(map[string]string{"x-api-key": " secret-key ", "x-user": "u"}) {
		t.Error("the first source does not win, or surrounding spaces matter")
	}
	if k == id(map[string]string{"x-user": "secret-key"}) {
		t.Error("the same value from two sources shares a bucket")
	}
	if id(nil) != id(map[string]string{"x-api-key": ""}) {
		t.Error("an empty header does not fall through to the next source")
	}
	e2, p2 := compileOne(t, PolicySpec{Key: []string{"header:x-api-key"}}, Options{HashSecret: []byte("another secret!!")})
	if other, _ := e2.identity(p2, NewView(checkRequest("198.51.100.1", map[string]string{"x-api-key": "secret-key"}))); other == k {
		t.Error("a different hash secret gives the same identity")
	}
	long := strings.Repeat("x", 1<<20)
	if got := id(map[string]string{"x-api-key": long}); len(got) != 22 {
		t.Errorf("a megabyte key gave %q", got)
	}
	// The whole value is hashed: keys equal in their first 4,100 bytes (or
	// a megabyte) but not after are two callers.
	prefix := strings.Repeat("k", 4100)
	if id(map[string]string{"x-api-key": prefix + "-alice"}) == id(map[string]string{"x-api-key": prefix + "-bob"}) {
		t.Error("two keys that differ after 4,100 bytes share a bucket")
	}
	if id(map[string]string{"x-api-key": long + "a"}) == id(map[string]string{"x-api-key": long + "b"}) {
		t.Error("two keys that differ after a megabyte share a bucket")
	}
}

func TestMissingKeysShareABucketOrSkipThePolicy(t *testing.T) {
	e, shared := compileOne(t, PolicySpec{Key: []string{"header:x-api-key"}}, Options{})
	if id, ok := e.identity(shared, NewView(checkRequest("1.2.3.4", nil))); !ok || id != sharedID {
		t.Errorf("shared: %q %v", id, ok)
	}
	e, skip := compileOne(t, PolicySpec{Key: []string{"header:x-api-key"}, OnMissingKey: "skip"}, Options{})
	if _, ok := e.identity(skip, NewView(checkRequest("1.2.3.4", nil))); ok {
		t.Error("skip: the policy applied without a key")
	}
}

func TestContextMetadataAndFingerprintSources(t *testing.T) {
	e, p := compileOne(t, PolicySpec{
		Key:                []string{"metadata:envoy.filters.http.jwt_authn:jwt_payload.sub", "context:tenant", "fingerprint"},
		FingerprintHeaders: []string{"User-Agent", "x-ja4"},
		OnMissingKey:       "skip",
	}, Options{})
	claims, _ := structpb.NewStruct(map[string]any{"jwt_payload": map[string]any{"sub": "user-1"}})
	withClaim := checkRequest("1.2.3.4", map[string]string{"user-agent": "curl"})
	withClaim.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": claims}}
	withCtx := checkRequest("1.2.3.4", map[string]string{"user-agent": "curl"})
	withCtx.Attributes.ContextExtensions = map[string]string{"tenant": "acme"}
	ua := checkRequest("1.2.3.4", map[string]string{"user-agent": "curl"})
	ua2 := checkRequest("5.6.7.8", map[string]string{"user-agent": "curl", "x-ja4": "t13d1516h2"})
	none := checkRequest("1.2.3.4", nil)

	id := func(req *authv3.CheckRequest) (string, bool) { return e.identity(p, NewView(req)) }
	claim, _ := id(withClaim)
	ctx, _ := id(withCtx)
	fp1, _ := id(ua)
	fp2, _ := id(ua2)
	if claim == ctx || claim == fp1 || ctx == fp1 || fp1 == fp2 {
		t.Errorf("distinct sources gave equal identities: claim %s ctx %s fp %s fp2 %s", claim, ctx, fp1, fp2)
	}
	other := checkRequest("9.9.9.9", map[string]string{"user-agent": "curl"})
	if got, _ := id(other); got != fp1 {
		t.Error("the same fingerprint from another address is another caller")
	}
	if _, ok := id(none); ok {
		t.Error("a request with no claim, context or fingerprint header got an identity under skip")
	}
}

// principals and not_principals select by the caller's principal
// (attributes.source.principal, which Envoy fills from the downstream peer's
// certificate, CheckRequestUtils::setAttrContextPeer in
// source/extensions/filters/common/ext_authz/check_request_utils.cc). Behind
// an Istio ingress gateway that is the gateway's SPIFFE ID for every outside
// client, so a policy can tell gateway-forwarded traffic from in-mesh callers.
func TestPrincipalsMatch(t *testing.T) {
	const gw = "spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"
	outside, _ := compileOne(t, PolicySpec{Match: MatchSpec{Principals: []string{"spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway*"}}}, Options{})
	inside, _ := compileOne(t, PolicySpec{Match: MatchSpec{NotPrincipals: []string{gw}}}, Options{})
	view := func(principal string) *View {
		req := checkRequest("10.0.0.9", nil)
		req.Attributes.Source.Principal = principal
		return NewView(req)
	}
	for principal, want := range map[string][2]bool{
		gw: {true, false},
		"spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway": {true, true},
		"spiffe://cluster.local/ns/shop/sa/cart":                         {false, true},
		"":                                                               {false, true},
	} {
		v := view(principal)
		if got := [2]bool{outside.Policies[0].match.matches(v), inside.Policies[0].match.matches(view(principal))}; got != want {
			t.Errorf("principal %q: principals/not_principals match %v, want %v", principal, got, want)
		}
	}
	for _, bad := range []string{"", "spiffe://*/ns/x", "*"} {
		if _, err := Compile([]PolicySpec{{Name: "p", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1", Match: MatchSpec{Principals: []string{bad}}}}, Options{}); err == nil || !strings.Contains(err.Error(), "policies[0].match.principals[0]") {
			t.Errorf("principal %q: error %v, want one at policies[0].match.principals[0]", bad, err)
		}
	}
}
