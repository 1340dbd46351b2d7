package extauthz

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// httpRig is an HTTP door on a real loopback HTTP server, beside the Check
// server whose state it shares, both on one in-memory store.
type httpRig struct {
	server *Server
	door   *HTTPServer
	url    string
	reg    *prometheus.Registry
	client *http.Client
}

func newHTTPRig(t *testing.T, policies []PolicySpec, opts Options, hops int, so ServerOptions, ho HTTPOptions, store limiter.Store) *httpRig {
	t.Helper()
	eng, err := Compile(policies, opts)
	if err != nil {
		t.Fatal(err)
	}
	if store == nil {
		store = storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0)))
	}
	r := &httpRig{reg: prometheus.NewRegistry(), client: &http.Client{Timeout: 5 * time.Second}}
	so.Registerer, ho.Registerer = r.reg, r.reg
	r.server = NewServer(eng, store, so)
	r.door = NewHTTPServer(r.server, eng.WithTrustedHops(hops), ho)
	srv := httptest.NewServer(r.door)
	t.Cleanup(srv.Close)
	t.Cleanup(r.client.CloseIdleConnections)
	r.url = srv.URL
	return r
}

// answer is what the door answered, with its body.
type answer struct {
	status int
	header http.Header
	body   string
}

// ask sends one authorization request: method to target (a path and
// query), with header lines (name, value, name, value...; a name may
// repeat) and Host host.
func (r *httpRig) ask(t *testing.T, method, target, host string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, r.url+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// doorHeaders are the headers the door may set; anything else in an
// answer is net/http's own (Date, Content-Length).
var doorHeaders = map[string]bool{"Ratelimit-Limit": true, "Ratelimit-Remaining": true, "Ratelimit-Reset": true, "Ratelimit-Policy": true,
	"Ratelimit": true, "Retry-After": true, "X-Ratelimit-Degraded": true, "Content-Type": true, "Grpc-Status": true, "Grpc-Retry-Pushback-Ms": true,
	"Date": true, "Content-Length": true}

func (a answer) only(t *testing.T) {
	t.Helper()
	for k, v := range a.header {
		if !doorHeaders[k] {
			t.Errorf("unexpected header %s: %q", k, v)
		}
		if len(v) != 1 {
			t.Errorf("header %s appears %d times: %q", k, len(v), v)
		}
	}
}

var doorPolicy = PolicySpec{Name: "api", Match: MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"}, Capacity: 2, RefillPerSecond: "1/60"}

// TestTheHTTPDoorAnswersAsEnvoysHTTPServiceExpects: the request's own
// method and path (path_prefix stripped) are the original's; allow is 200
// with the RateLimit fields, deny 429 with them, Retry-After, a JSON
// content type and body, as Envoy's http_service passes them on
// (RawHttpClientImpl::toResponse in
// source/extensions/filters/common/ext_authz/ext_authz_http_impl.cc: 200
// is OK, another status below 500 a denial with its headers and body).
func TestTheHTTPDoorAnswersAsEnvoysHTTPServiceExpects(t *testing.T) {
	r := newHTTPRig(t, []PolicySpec{doorPolicy}, Options{}, 0, ServerOptions{}, HTTPOptions{Request: HTTPRequestOptions{PathPrefix: "/authz"}}, nil)
	for i, left := range []string{"1", "0"} {
		a := r.ask(t, http.MethodPost, "/authz/v1/orders?id=7", "shop.example", "X-Api-Key", "k1")
		a.only(t)
		if a.status != 200 || a.header.Get("Ratelimit-Limit") != "2" || a.header.Get("Ratelimit-Remaining") != left || a.header.Get("Ratelimit-Reset") == "" ||
			a.header.Get("Ratelimit-Policy") != `"api";q=2;w=120` || !strings.HasPrefix(a.header.Get("Ratelimit"), `"api";r=`+left+`;t=`) || a.body != "" {
			t.Fatalf("request %d: %+v", i+1, a)
		}
	}
	a := r.ask(t, http.MethodPost, "/authz/v1/orders", "shop.example", "X-Api-Key", "k1")
	a.only(t)
	if a.status != 429 || a.header.Get("Retry-After") != "60" || a.header.Get("Content-Type") != "application/json" || a.header.Get("Ratelimit-Remaining") != "0" ||
		a.body != `{"error":"rate_limited","policy":"api","retry_after":60}` {
		t.Fatalf("after the burst: %+v", a)
	}
	if a := r.ask(t, http.MethodGet, "/authz/v1/orders", "shop.example", "X-Api-Key", "k2"); a.status != 200 {
		t.Errorf("another key: %+v", a)
	}
	// No policy matches: a plain 200, nothing added.
	a = r.ask(t, http.MethodGet, "/authz/healthz", "shop.example", "X-Api-Key", "k1")
	if a.status != 200 || a.header.Get("Ratelimit-Limit") != "" || a.header.Get("X-Ratelimit-Degraded") != "" {
		t.Errorf("an unmatched path: %+v", a)
	}
	// Without its prefix the path is read as it is.
	if a := r.ask(t, http.MethodGet, "/v1/orders", "shop.example", "X-Api-Key", "k1"); a.status != 429 {
		t.Errorf("a path without the prefix: %+v, want it matched as /v1/orders (429)", a)
	}
	m := r.door.Metrics()
	for outcome, want := range map[string]float64{"allowed": 3, "denied": 2, "unmatched": 1} {
		if got := testutil.ToFloat64(m.Requests.WithLabelValues(outcome)); got != want {
			t.Errorf("floodgate_http_authz_requests_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.ToFloat64(r.server.Metrics().Decisions.WithLabelValues("api", "denied")); got != 2 {
		t.Errorf("floodgate_decisions_total{policy=api,result=denied} = %v, want 2 (the door's decisions are the policy's)", got)
	}
	if got := testutil.ToFloat64(r.server.Metrics().Checks.WithLabelValues("allowed")); got != 0 {
		t.Errorf("floodgate_checks_total counted %v door requests: Checks are Check's", got)
	}
}

// TestTheDoorsShareThePoliciesBuckets: a caller's Checks and its HTTP
// door requests draw from one bucket.
func TestTheDoorsShareThePoliciesBuckets(t *testing.T) {
	r := newHTTPRig(t, []PolicySpec{doorPolicy}, Options{}, 0, ServerOptions{}, HTTPOptions{}, nil)
	resp, err := r.server.Check(context.Background(), checkRequest("198.51.100.7", map[string]string{":path": "/v1/x", "x-api-key": "k1"}))
	if err != nil || headerOf(resp, HeaderRemaining) != "1" {
		t.Fatalf("Check: %v %v", resp, err)
	}
	if a := r.ask(t, http.MethodGet, "/v1/x", "api.example.com", "X-Api-Key", "k1"); a.status != 200 || a.header.Get("Ratelimit-Remaining") != "0" {
		t.Fatalf("the door after a Check of the same caller: %+v, want the bucket's last token", a)
	}
	if resp, _ := r.server.Check(context.Background(), checkRequest("198.51.100.7", map[string]string{":path": "/v1/x", "x-api-key": "k1"})); allowed(resp) {
		t.Error("Check after the door took the last token: allowed")
	}
}

// TestTheOriginalRequestComesFromTheConfiguredHeadersOnly: a proxy that
// sends every authorization request to one URI (nginx, HAProxy, Traefik,
// Caddy) carries the original URI, method and host in headers; they are
// read when configured, and only then (a client could write them).
func TestTheOriginalRequestComesFromTheConfiguredHeadersOnly(t *testing.T) {
	login := PolicySpec{Name: "login", Match: MatchSpec{Path: "/login", Methods: []string{"POST"}, Hosts: []string{"shop.example"}}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"}
	spoof := []string{"X-Original-URI", "/login?next=/", "X-Original-Method", "post", "X-Forwarded-Host", "shop.example"}

	off := newHTTPRig(t, []PolicySpec{login}, Options{}, 0, ServerOptions{}, HTTPOptions{}, nil)
	for i := 0; i < 3; i++ {
		if a := off.ask(t, http.MethodGet, "/_floodgate", "floodgate", spoof...); a.status != 200 || a.header.Get("Ratelimit-Limit") != "" {
			t.Fatalf("headers not configured, request %d: %+v, want them ignored (no policy matches GET /_floodgate)", i+1, a)
		}
	}

	on := newHTTPRig(t, []PolicySpec{login}, Options{}, 0, ServerOptions{}, HTTPOptions{Request: HTTPRequestOptions{
		OriginalURIHeader: "x-original-uri", OriginalMethodHeader: "X-ORIGINAL-METHOD", OriginalHostHeader: "X-Forwarded-Host"}}, nil)
	if a := on.ask(t, http.MethodGet, "/_floodgate", "floodgate", spoof...); a.status != 200 || a.header.Get("Ratelimit-Limit") != "1" {
		t.Fatalf("headers configured: %+v, want POST /login on shop.example limited", a)
	}
	if a := on.ask(t, http.MethodGet, "/_floodgate", "floodgate", spoof...); a.status != 429 {
		t.Fatalf("the second POST /login: %+v, want 429", a)
	}
	// A configured header the request lacks leaves the request's own.
	if a := on.ask(t, http.MethodPost, "/login", "shop.example"); a.status != 429 {
		t.Errorf("POST /login itself, no headers: %+v, want the same bucket (429)", a)
	}
	if a := on.ask(t, http.MethodGet, "/_floodgate", "floodgate", "X-Original-URI", "/login", "X-Original-Method", "GET", "X-Forwarded-Host", "shop.example"); a.status != 200 || a.header.Get("Ratelimit-Limit") != "" {
		t.Errorf("GET /login: %+v, want no policy", a)
	}
}

// TestEnvoysHTTPClientAppendsItsOwnAddressToXForwardedFor pins why the
// door has its own trusted_hops. Envoy's ext_authz http_service sends the
// authorization request through Envoy's async HTTP client, which appends
// the Envoy's own (node) address to X-Forwarded-For unless its caller turns
// send_xff off (AsyncStreamImpl::sendHeaders in
// source/common/http/async_client_impl.cc: `if (send_xff_)
// Utility::appendXff(headers, localInfo().address())`; StreamOptions'
// send_xff defaults to true in envoy/http/async_client.h, and
// RawHttpClientImpl::check in ext_authz_http_impl.cc sets only the
// timeout, span and sampling). So an edge Envoy (use_remote_address,
// xff_num_trusted_hops 0), whose Check carries "client, peer" with the
// peer being the client, sends the HTTP door "client-list, peer, envoy":
// the client is one more hop from the right, trusted_hops 1.
func TestEnvoysHTTPClientAppendsItsOwnAddressToXForwardedFor(t *testing.T) {
	perIP := PolicySpec{Name: "per-ip", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"}
	const envoyNode = "10.0.0.5"
	xff := func(peer string) []string {
		// The client forged 203.0.113.66; the edge appended the peer it
		// saw; Envoy's HTTP client appended its own address.
		return []string{"X-Forwarded-For", "203.0.113.66, " + peer, "X-Forwarded-For", envoyNode}
	}
	gRPCHops := newHTTPRig(t, []PolicySpec{perIP}, Options{ClientIP: ClientIPSpec{TrustedHops: 0}}, 0, ServerOptions{}, HTTPOptions{}, nil)
	gRPCHops.ask(t, http.MethodGet, "/", "h", xff("198.51.100.1")...)
	if a := gRPCHops.ask(t, http.MethodGet, "/", "h", xff("198.51.100.2")...); a.status != 429 {
		t.Errorf("with the gRPC door's hops every client is Envoy itself: %+v, want the second client denied", a)
	}
	door := newHTTPRig(t, []PolicySpec{perIP}, Options{ClientIP: ClientIPSpec{TrustedHops: 0}}, 1, ServerOptions{}, HTTPOptions{}, nil)
	for _, peer := range []string{"198.51.100.1", "198.51.100.2"} {
		if a := door.ask(t, http.MethodGet, "/", "h", xff(peer)...); a.status != 200 {
			t.Errorf("client %s with the door's trusted_hops 1: %+v, want its own bucket", peer, a)
		}
	}
	if a := door.ask(t, http.MethodGet, "/", "h", xff("198.51.100.1")...); a.status != 429 {
		t.Errorf("198.51.100.1 again: %+v, want 429", a)
	}
	// Two header lines are one list, joined as Envoy joins them: a client
	// with a single line reads the same.
	if a := door.ask(t, http.MethodGet, "/", "h", "X-Forwarded-For", "203.0.113.66,198.51.100.2,"+envoyNode); a.status != 429 {
		t.Errorf("one line: %+v, want 198.51.100.2's bucket (429)", a)
	}
	// No X-Forwarded-For (allowed_headers does not list it): only Envoy's
	// own address arrives, and every client is the connection's peer.
	lone := newHTTPRig(t, []PolicySpec{perIP}, Options{}, 1, ServerOptions{}, HTTPOptions{}, nil)
	lone.ask(t, http.MethodGet, "/", "h", "X-Forwarded-For", envoyNode)
	if a := lone.ask(t, http.MethodGet, "/", "h", "X-Forwarded-For", envoyNode); a.status != 429 {
		t.Errorf("without the client's X-Forwarded-For: %+v, want one shared bucket (the peer)", a)
	}
}

// TestAStoreFailureIsAnsweredByTheDoorsFailureMode: allow (200, marked),
// deny (429 with the failure Retry-After, marked) and, when the operator
// asks for the proxy's own failure mode, 503; never another 5xx.
func TestAStoreFailureIsAnsweredByTheDoorsFailureMode(t *testing.T) {
	store := redisstore.New(unreachableRedis(t), "")
	for _, tc := range []struct {
		mode    decide.OnFailure
		status  int
		retry   string
		outcome string
	}{
		{decide.Allow, 200, "", "degraded_allowed"},
		{decide.Deny, 429, "2", "degraded_denied"},
		{decide.Error, 503, "", "error"},
	} {
		r := newHTTPRig(t, []PolicySpec{doorPolicy}, Options{}, 0, ServerOptions{OnFailure: decide.Allow, FailureRetryAfter: 2 * time.Second},
			HTTPOptions{OnFailure: tc.mode}, store)
		a := r.ask(t, http.MethodGet, "/v1/x", "h", "X-Api-Key", "k1")
		if a.status != tc.status || a.header.Get("Retry-After") != tc.retry {
			t.Errorf("%v: %+v, want %d with Retry-After %q", tc.mode, a, tc.status, tc.retry)
		}
		if degraded := a.header.Get("X-Ratelimit-Degraded"); (degraded == "true") != (tc.mode != decide.Error) {
			t.Errorf("%v: x-ratelimit-degraded %q", tc.mode, degraded)
		}
		if tc.mode == decide.Deny && a.body != `{"error":"rate_limited","retry_after":2,"degraded":true}` {
			t.Errorf("deny body %q", a.body)
		}
		if got := testutil.ToFloat64(r.door.Metrics().Requests.WithLabelValues(tc.outcome)); got != 1 {
			t.Errorf("%v: outcome %s counted %v, want 1", tc.mode, tc.outcome, got)
		}
		if got := testutil.ToFloat64(r.server.Metrics().StoreErrors); got != 1 {
			t.Errorf("%v: store errors %v, want 1", tc.mode, got)
		}
	}
}

// TestUnreadIsAWholeResponseByTheFailureMode: what the server writes for a
// request it could not read reads back as the failure mode's answer, and
// closes the connection.
func TestUnreadIsAWholeResponseByTheFailureMode(t *testing.T) {
	for _, tc := range []struct {
		mode   decide.OnFailure
		status int
	}{{decide.Allow, 200}, {decide.Deny, 429}, {decide.Error, 503}} {
		r := newHTTPRig(t, []PolicySpec{doorPolicy}, Options{}, 0, ServerOptions{FailureRetryAfter: time.Second}, HTTPOptions{OnFailure: tc.mode}, nil)
		raw := r.door.Unread()
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("%v: %q does not parse: %v", tc.mode, raw, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || !resp.Close || (tc.mode != decide.Error && resp.Header.Get("X-Ratelimit-Degraded") != "true") {
			t.Errorf("%v: %d close=%v %v", tc.mode, resp.StatusCode, resp.Close, resp.Header)
		}
		if tc.mode == decide.Deny && (resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), `"retry_after":1`)) {
			t.Errorf("deny: %v %q", resp.Header, body)
		}
		if got := testutil.ToFloat64(r.door.Metrics().Requests.WithLabelValues("unread")); got != 1 {
			t.Errorf("%v: unread counted %v", tc.mode, got)
		}
	}
}

// TestAGRPCCallerIsDeniedWithItsStatus: the original request is gRPC (its
// content type reached the door), so the denial carries grpc-status 8, as
// Check's does (denyResponse says why).
func TestAGRPCCallerIsDeniedWithItsStatus(t *testing.T) {
	tight := PolicySpec{Name: "tight", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"}
	r := newHTTPRig(t, []PolicySpec{tight}, Options{}, 0, ServerOptions{}, HTTPOptions{}, nil)
	r.ask(t, http.MethodPost, "/pkg.Svc/Call", "h", "Content-Type", "application/grpc")
	a := r.ask(t, http.MethodPost, "/pkg.Svc/Call", "h", "Content-Type", "application/grpc")
	if a.status != 429 || a.header.Get("Grpc-Status") != "8" || a.header.Get("Grpc-Retry-Pushback-Ms") != "60000" {
		t.Errorf("%+v", a)
	}
}

// TestGRPCStatusAlwaysMarksEveryDenial: with GRPCStatusAlways (Envoy's
// http_service, which must not send a content-type) a denial carries
// grpc-status 8 and the pushback without a gRPC content-type; without it, a
// plain HTTP request's denial carries neither.
func TestGRPCStatusAlwaysMarksEveryDenial(t *testing.T) {
	tight := PolicySpec{Name: "tight", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"}
	for _, always := range []bool{false, true} {
		r := newHTTPRig(t, []PolicySpec{tight}, Options{}, 0, ServerOptions{}, HTTPOptions{Request: HTTPRequestOptions{GRPCStatusAlways: always}}, nil)
		first := r.ask(t, http.MethodGet, "/items", "h")
		if first.status != 200 || first.header.Get("Grpc-Status") != "" {
			t.Errorf("GRPCStatusAlways %v: the allow is %d with grpc-status %q, want 200 without", always, first.status, first.header.Get("Grpc-Status"))
		}
		a := r.ask(t, http.MethodGet, "/items", "h")
		status, pushback := a.header.Get("Grpc-Status"), a.header.Get("Grpc-Retry-Pushback-Ms")
		if a.status != 429 || (always && (status != "8" || pushback != "60000")) || (!always && (status != "" || pushback != "")) {
			t.Errorf("GRPCStatusAlways %v: %d grpc-status %q pushback %q", always, a.status, status, pushback)
		}
	}
}

// TestTheDoorReloads: a new engine and new request options apply at once.
func TestTheDoorReloads(t *testing.T) {
	r := newHTTPRig(t, []PolicySpec{doorPolicy}, Options{}, 0, ServerOptions{}, HTTPOptions{}, nil)
	if a := r.ask(t, http.MethodGet, "/authz/v1/x", "h", "X-Api-Key", "k"); a.header.Get("Ratelimit-Limit") != "" {
		t.Fatalf("before: %+v, want no match for /authz/v1/x", a)
	}
	bigger := doorPolicy
	bigger.Capacity = 50
	r.door.SetEngine(mustCompile(t, bigger), HTTPOptions{Request: HTTPRequestOptions{PathPrefix: "/authz"}, OnFailure: decide.Error})
	if a := r.ask(t, http.MethodGet, "/authz/v1/x", "h", "X-Api-Key", "k"); a.header.Get("Ratelimit-Limit") != "50" {
		t.Errorf("after: %+v, want the new policy behind the new prefix", a)
	}
}

func TestHTTPHeadersReadAsACheckRequestsDo(t *testing.T) {
	h := http.Header{}
	h.Add("X-Tenant", "a")
	h.Add("X-Tenant", "b")
	h.Set("X-Api-Key", "k")
	h.Set("User_Agent", "u")
	req := httptest.NewRequest(http.MethodGet, "/authz/v1/x?y=1", nil)
	req.Header, req.Host = h, "API.Example.com:8443"
	var v View
	v.resetHTTP(req, &HTTPRequestOptions{PathPrefix: "/authz"})
	for _, tc := range []struct{ name, want string }{
		{"x-tenant", "a,b"}, {"x-api-key", "k"}, {"user_agent", "u"}, {"host", "API.Example.com:8443"}, {":authority", "API.Example.com:8443"},
		{":method", "GET"}, {":path", "/v1/x"},
	} {
		if got, ok := v.Header(tc.name); !ok || got != tc.want {
			t.Errorf("Header(%q) = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
	for _, name := range []string{"x-missing", "x api", "", strings.Repeat("x", 100)} {
		if got, ok := v.Header(name); ok {
			t.Errorf("Header(%q) = %q, want absent", name, got)
		}
	}
	h.Set(strings.Repeat("X", 100), "long")
	if got, _ := v.Header(strings.Repeat("x", 100)); got != "long" {
		t.Errorf("a 100-byte name: %q", got)
	}
	if v.Method != "GET" || v.Path != "/v1/x" || v.Host != "api.example.com" || v.Source != "192.0.2.1" || !v.HTTP {
		t.Errorf("view %+v", v)
	}
	for _, tc := range []struct{ target, prefix, want string }{
		{"/authz", "/authz", "/"}, {"/authz/", "/authz/", "/"}, {"/authz//v1", "/authz/", "/v1"}, {"/authz?q", "/authz", "/"},
		{"/authzv1", "/authz", "/v1"}, {"/other", "/authz", "/other"}, {"/%2e%2e/v1", "", "/%2e%2e/v1"},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.target, nil)
		v.resetHTTP(req, &HTTPRequestOptions{PathPrefix: tc.prefix})
		if v.Path != tc.want {
			t.Errorf("%s less %s: %q, want %q", tc.target, tc.prefix, v.Path, tc.want)
		}
	}
}

func TestCanonicalKeysAreNetHTTPs(t *testing.T) {
	for _, name := range []string{"x-api-key", "content-type", "x_weird-name", "a", "x-forwarded-for", "www-authenticate", "x-1-2", "-x", "x--y"} {
		got, ok := canonicalKey(nil, name)
		if want := http.CanonicalHeaderKey(name); !ok || string(got) != want {
			t.Errorf("%q: %q, want %q", name, got, want)
		}
	}
}
