package extauthz

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/search":             "/v1/search",
		"/v1%2Fsearch":           "/v1/search",
		"/v1%2fsearch":           "/v1/search",
		"/v1%5Csearch":           "/v1/search",
		"/v1\\search":            "/v1/search",
		"/v1//search":            "/v1/search",
		"//v1///search/":         "/v1/search/",
		"/v1/./search":           "/v1/search",
		"/v1/x/../search":        "/v1/search",
		"/v1/x/%2E%2e/search":    "/v1/search",
		"/v1/x%2F..%2Fsearch":    "/v1/search",
		"/%76%31/search":         "/v1/search", // unreserved characters decode
		"/v1/search?q=%2F":       "/v1/search",
		"/v1/search#frag":        "/v1/search",
		"/caf%c3%a9":             "/caf%C3%A9", // other escapes stay, upper case
		"/a%20b":                 "/a%20b",
		"/100%":                  "/100%25",
		"/%%32%46":               "/%252F", // decoding never forms a new escape
		"/../../etc":             "/etc",
		"":                       "/",
		"v1/search":              "/v1/search",
		"/a/b/..":                "/a/",
		"/a/.":                   "/a/",
		"/a/..b/.c":              "/a/..b/.c",
		"/a//../b":               "/b", // slashes merge before dot segments resolve
		"/%2e%2e/%2e%2e/%2fetc/": "/etc/",
	} {
		if got := NormalizePath(in); got != want {
			t.Errorf("NormalizePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// Whatever Envoy can be told to treat as one path, the normaliser treats as
// one path: for each pair from Envoy's own tests, the input and Envoy's
// output normalise alike (PathUtil::canonicalPath for normalize_path,
// PathUtil::mergeSlashes for merge_slashes, PathUtil::unescapeSlashes for
// path_with_escaped_slashes_action UNESCAPE_*, in
// source/common/http/path_utility.cc; pairs from test/common/http/path_utility_test.cc).
func TestNormalizePathIsAtLeastAsStrictAsEnvoy(t *testing.T) {
	b, err := os.ReadFile("testdata/envoy/envoy-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	type pairs struct {
		Pairs [][2]string `json:"pairs"`
	}
	var vectors struct {
		Normalize pairs `json:"normalize_path"`
		Merge     pairs `json:"merge_slashes"`
		Unescape  pairs `json:"unescape_slashes"`
	}
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	n := 0
	for group, ps := range map[string]pairs{"normalize_path": vectors.Normalize, "merge_slashes": vectors.Merge, "unescape_slashes": vectors.Unescape} {
		for _, p := range ps.Pairs {
			n++
			if a, b := NormalizePath(p[0]), NormalizePath(p[1]); a != b {
				t.Errorf("%s: Envoy makes %q of %q; normalised, %q and %q", group, p[1], p[0], b, a)
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d path vectors read", n)
	}
}

// No encoding of a path dodges a policy written for it.
func TestAnEncodedPathDoesNotDodgeAPolicy(t *testing.T) {
	p := PolicySpec{Name: "search", Match: MatchSpec{Path: "/v1/search"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"}
	q := PolicySpec{Name: "admin", Match: MatchSpec{PathPrefix: "/admin/"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"}
	r := newRig(t, []PolicySpec{p, q}, Options{}, nil, ServerOptions{})
	for i, path := range []string{"/v1/search", "/v1%2Fsearch", "/v1//search?x=1", "/v1/./x/../search", "/%76%31/search"} {
		resp := r.check(t, checkRequest("198.51.100.1", map[string]string{":path": path}))
		if allowed(resp) != (i == 0) {
			t.Errorf("%s: allowed %v, want the search policy to apply (its one token spent by the first)", path, allowed(resp))
		}
	}
	for i, path := range []string{"/admin/users", "/x/..%2Fadmin/users", "/Admin/../admin%5cusers"} {
		resp := r.check(t, checkRequest("198.51.100.2", map[string]string{":path": path}))
		if allowed(resp) != (i == 0) {
			t.Errorf("%s: allowed %v, want the admin policy to apply", path, allowed(resp))
		}
	}
}

// RoutePath is the path Envoy's route matches with normalize_path on and
// %2F kept: for each normalize_path vector from Envoy's own tests
// (PathUtil::canonicalPath, source/common/http/path_utility.cc;
// test/common/http/path_utility_test.cc), RoutePath of the input is Envoy's
// output, escapes written upper case.
func TestRoutePathIsEnvoysCanonicalPath(t *testing.T) {
	b, err := os.ReadFile("testdata/envoy/envoy-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Normalize struct {
			Pairs [][2]string `json:"pairs"`
		} `json:"normalize_path"`
	}
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	upper := regexp.MustCompile(`%[0-9a-fA-F]{2}`)
	for _, p := range vectors.Normalize.Pairs {
		want := upper.ReplaceAllStringFunc(p[1], strings.ToUpper)
		if got := RoutePath(p[0]); got != want {
			t.Errorf("RoutePath(%q) = %q, Envoy routes %q", p[0], got, p[1])
		}
	}
	if len(vectors.Normalize.Pairs) < 10 {
		t.Fatalf("only %d vectors", len(vectors.Normalize.Pairs))
	}
	for in, want := range map[string]string{
		"/api/orders%2F..%2F..%2Fx": "/api/orders%2F..%2F..%2Fx", // no real dot segment: still under /api/
		"/api/orders%2f..%2f..%2fx": "/api/orders%2F..%2F..%2Fx",
		"/a//../b":                  "/a/b", // the empty segment is a segment (NormalizePath: /b)
		"/api//orders":              "/api/orders",
		"/%61pi/./orders?x=%2F":     "/api/orders",
		"/v1%5Csearch":              "/v1%5Csearch",
	} {
		if got := RoutePath(in); got != want {
			t.Errorf("RoutePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// Istio's own path normalisation vectors (tests/integration/security/normalization_test.go, the
// "Base" and "MergeSlashes" cases: the path the upstream, and the route, receive under meshConfig
// pathNormalization BASE, Istio's default, and MERGE_SLASHES). Istio's HCM sets normalize_path and
// leaves path_with_escaped_slashes_action KEEP_UNCHANGED for both (buildHTTPConnectionManager in
// pilot/pkg/networking/core/listener_builder.go). RoutePath is the MERGE_SLASHES path, and the BASE
// path with its slashes merged (a policy's path never holds "//", so merging only adds matches).
// Path parameters are kept by both ("/..;/admin" stays), which ParamPath covers.
func TestRoutePathIsIstiosRoutedPath(t *testing.T) {
	upper := regexp.MustCompile(`%[0-9a-fA-F]{2}`)
	for _, v := range [][3]string{ // input, BASE, MERGE_SLASHES
		{"/", "/", "/"},
		{"/app#foo", "/app", "/app"},
		{"/app/", "/app/", "/app/"},
		{"/app/../admin", "/admin", "/admin"},
		{"/app//", "/app//", "/app/"},
		{"/app/%2f", "/app/%2f", "/app/%2f"},
		{"/app%2f/", "/app%2f/", "/app%2f/"},
		{"/xyz%30..//abc", "/xyz0..//abc", "/xyz0../abc"},
		{"/app/%2E./admin", "/admin", "/admin"},
		{`/app\admin`, "/app/admin", "/app/admin"},
		{`/app/\/\/\admin`, "/app//////admin", "/app/admin"},
		{`/%2Fapp%5cadmin%5Cabc`, `/%2Fapp%5cadmin%5Cabc`, `/%2Fapp%5cadmin%5Cabc`},
		{`/%5Capp%2f%5c%2F%2e%2e%2fadmin%5c\abc`, `/%5Capp%2f%5c%2F..%2fadmin%5c/abc`, `/%5Capp%2f%5c%2F..%2fadmin%5c/abc`},
		{"/app//../admin", "/app/admin", "/app/admin"},
		{"/app//../../admin", "/admin", "/admin"},
	} {
		got := RoutePath(v[0])
		if want := upper.ReplaceAllStringFunc(v[2], strings.ToUpper); got != want {
			t.Errorf("RoutePath(%q) = %q, Istio MERGE_SLASHES routes %q", v[0], got, v[2])
		}
		if base := mergeSlashes(upper.ReplaceAllStringFunc(v[1], strings.ToUpper)); got != base {
			t.Errorf("RoutePath(%q) = %q, Istio BASE routes %q (%q merged)", v[0], got, v[1], base)
		}
	}
}

func TestParamPathDropsPathParameters(t *testing.T) {
	for in, want := range map[string]string{
		"/admin;jsessionid=1/x": "/admin/x",
		"/admin;/x":             "/admin/x",
		"/..;/admin/x":          "/admin/x",
		"/a;b=c;d=e/x;y":        "/a/x",
		"/admin%3Bx/y":          "/admin%3Bx/y", // an escaped ";" is no parameter
		"/plain/path":           "/plain/path",
		"/a;x\\b":               "/a/b",
	} {
		if got := ParamPath(in); got != want {
			t.Errorf("ParamPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// Under Istio, Envoy keeps %2F (Istio's listener builder sets normalize_path
// but leaves path_with_escaped_slashes_action at KEEP_UNCHANGED:
// buildHTTPConnectionManager in pilot/pkg/networking/core/listener_builder.go), so
// /api/orders%2F..%2F..%2Fx is routed, and served, as a path under
// /api/orders while its fully decoded form is /x. The policy for
// /api/orders limits it; the earlier guarantee holds (a %2F spelling of a
// limited path is limited).
func TestAnIstioEncodedPathDoesNotEscapeItsPolicy(t *testing.T) {
	orders := PolicySpec{Name: "orders", Match: MatchSpec{PathPrefix: "/api/orders"}, Key: []string{"client_ip"}, Capacity: 5, RefillPerSecond: "1/60"}
	r := newRig(t, []PolicySpec{orders}, Options{}, nil, ServerOptions{})
	limited := 0
	for i := 0; i < 300; i++ {
		if !allowed(r.check(t, checkRequest("198.51.100.1", map[string]string{":path": "/api/orders%2F..%2F..%2Fx"}))) {
			limited++
		}
	}
	if limited != 295 {
		t.Errorf("%d of 300 requests limited, want 295 (capacity 5)", limited)
	}
	for i := 0; i < 5; i++ {
		r.check(t, checkRequest("198.51.100.3", map[string]string{":path": "/api/orders"}))
	}
	if allowed(r.check(t, checkRequest("198.51.100.3", map[string]string{":path": "/api%2Forders"}))) {
		t.Error("a %2F spelling of a limited path passed an empty bucket")
	}
}

// A path parameter does not dodge a policy: /admin;jsessionid=1/x,
// /admin;/x and /..;/admin/x are /admin/x to a Servlet container, and the
// /admin/ policy applies to them.
func TestAPathParameterDoesNotDodgeAPolicy(t *testing.T) {
	admin := PolicySpec{Name: "admin", Match: MatchSpec{PathPrefix: "/admin/"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"}
	r := newRig(t, []PolicySpec{admin}, Options{}, nil, ServerOptions{})
	for i, path := range []string{"/admin;jsessionid=1/x", "/admin;/x", "/..;/admin/x", "/admin/x;v=2"} {
		src := fmt.Sprintf("198.51.100.%d", 10+i)
		if !allowed(r.check(t, checkRequest(src, map[string]string{":path": path}))) {
			t.Fatalf("%s: the first request was denied", path)
		}
		resp := r.check(t, checkRequest(src, map[string]string{":path": path}))
		if allowed(resp) {
			t.Errorf("%s: the second request passed: the /admin/ policy did not apply", path)
		}
	}
	// A path the policy does not cover stays free.
	other := checkRequest("198.51.100.20", map[string]string{":path": "/administrator;x/y"})
	r.check(t, other)
	if !allowed(r.check(t, other)) {
		t.Error("/administrator;x/y was limited by the /admin/ policy")
	}
}

// FuzzNormalizePath: any path normalises without panicking, to a path that
// starts with "/", has no repeated slash, backslash, dot segment or query,
// and normalises to itself.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/v1%2Fsearch", "/a/b/../../../../c", "/%%32%46", "%2fa%5Cb%2fc%5c?%2fabcd%5C%%2f%", "//.././/a/.%2e/", "/caf%c3%a9", "", "/..;/admin/x", "/a;b\\c/%2e%2E;x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		n := NormalizePath(p)
		if again := NormalizePath(n); again != n {
			t.Fatalf("NormalizePath(%q) = %q, normalised again %q", p, n, again)
		}
		if !strings.HasPrefix(n, "/") || strings.Contains(n, "//") || strings.ContainsAny(n, "\\?#") {
			t.Fatalf("NormalizePath(%q) = %q", p, n)
		}
		for _, seg := range strings.Split(n, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("NormalizePath(%q) = %q keeps a dot segment", p, n)
			}
		}
		for name, f := range map[string]func(string) string{"RoutePath": RoutePath, "ParamPath": ParamPath} {
			r := f(p)
			if again := f(r); again != r {
				t.Fatalf("%s(%q) = %q, again %q", name, p, r, again)
			}
			if !strings.HasPrefix(r, "/") || strings.Contains(r, "//") || strings.ContainsAny(r, "\\?#") {
				t.Fatalf("%s(%q) = %q", name, p, r)
			}
		}
		v := &View{Path: p}
		if !slices.Contains(v.MatchPaths(), NormalizePath(p)) {
			t.Fatalf("MatchPaths(%q) = %q lacks the decoded form", p, v.MatchPaths())
		}
	})
}
