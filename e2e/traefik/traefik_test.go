// Package traefik holds the Traefik recipe (traefik.yaml, the entry point, and dynamic.yaml, the
// routers and middlewares: ForwardAuth to Floodgate's HTTP door). Its tests run those files in
// Traefik's own packages (v3.6.12: the harness in harness/, which wires the entry point, routers,
// middlewares and reverse proxy as cmd/traefik does; `make traefik-harness` builds it) on
// loopback, in front of the door and an upstream that records what reaches it
// (internal/proxytest).
//
// What Traefik does, read in v3.6.12's source and pinned here:
//   - pkg/middlewares/auth/forward.go, writeHeader: the authorization request carries the
//     client's headers; X-Forwarded-For is ForwardAuth's peer, or with trustForwardHeader the
//     list it received then its peer; X-Forwarded-Method, -Proto, -Host and -Uri are the
//     request's own unless the request already carries them and trustForwardHeader is set;
//     X-Forwarded-Uri is req.URL.RequestURI(), the path as the middlewares before left it.
//   - the same file, ServeHTTP: a 2xx lets the request through, copying authResponseHeaders
//     onto the request to the upstream; any other status reaches the client with all the
//     authorizer's headers and its body; a failed call (refused, or no answer within the
//     http.Client's fixed 30 s Timeout set in NewForward) is a 500. There is no fail-open.
//   - pkg/middlewares/forwardedheaders/forwarded_header.go, ServeHTTP: the entry point
//     removes every X-Forwarded-* header (X-Forwarded-Uri and -Method included) from a peer
//     outside forwardedHeaders.trustedIPs, and keeps them all from one inside.
//   - pkg/middlewares/headers/header.go, modifyCustomRequestHeaders and
//     PostRequestModifyResponseHeaders: an empty value deletes the header, on the request, or
//     on every response that passes back through the middleware.
package traefik

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	grpccodes "google.golang.org/grpc/codes"
	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/internal/proxytest"
)

// TestMain removes the floodgate binary the recipe's tests build (the door
// they run against).
func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// The addresses the recipe is written with, which the tests replace.
const (
	listenAddr    = "127.0.0.1:8080"
	doorAddr      = "127.0.0.1:9193"
	upstreamAddr  = "127.0.0.1:8081"
	grpcUpstream  = "127.0.0.1:8082"
	balancerRange = "192.0.2.0/24"
)

// door is the Floodgate configuration dynamic.yaml names (its header comment).
var door = proxytest.DoorConfig{OriginalURIHeader: "X-Forwarded-Uri", OriginalMethodHeader: "X-Forwarded-Method", OriginalHostHeader: "X-Forwarded-Host"}

// The policies the tests configure the door with, as the recipes' suite's.
var (
	apiPolicy   = proxytest.Policy{Name: "api", PathPrefix: "/api/", Key: []string{"header:x-api-key", "client_ip"}, Capacity: 3}
	loginPolicy = proxytest.Policy{Name: "login", Path: "/login", Methods: []string{"POST"}, Key: []string{"client_ip"}, Capacity: 1}
	adminPolicy = proxytest.Policy{Name: "admin", Hosts: []string{"admin.example"}, Key: []string{"client_ip"}, Capacity: 1}
)

// startWith runs traefik.yaml and dynamic.yaml in front of the door at authz
// and the upstream, the tests' client playing the load balancer (its
// 127.0.0.1 in trustedIPs), with the extra replacements (old, new, ...) of
// dynamic.yaml applied after the addresses.
func startWith(t *testing.T, authz, upstream string, extra ...string) string {
	t.Helper()
	static, dynamic := proxytest.Read(t, "traefik.yaml"), proxytest.Read(t, "dynamic.yaml")
	pairs := append([]string{doorAddr, authz, upstreamAddr, upstream, grpcUpstream, proxytest.FreeAddr(t)}, extra...)
	dynamic = proxytest.Render(t, dynamic, pairs...)
	return proxytest.StartTraefik(t, func(listen string) string {
		return proxytest.Render(t, static, listenAddr, listen, balancerRange, "127.0.0.1/32")
	}, dynamic).Addr
}

// startGRPC runs the recipe in front of the door at authz and the gRPC
// application at upstream; gRPC clients dial the entry point (h2c).
func startGRPC(t *testing.T, authz, upstream string) string {
	t.Helper()
	static, dynamic := proxytest.Read(t, "traefik.yaml"), proxytest.Read(t, "dynamic.yaml")
	dynamic = proxytest.Render(t, dynamic, doorAddr, authz, upstreamAddr, proxytest.FreeAddr(t), grpcUpstream, upstream)
	return proxytest.StartTraefik(t, func(listen string) string {
		return proxytest.Render(t, static, listenAddr, listen, balancerRange, "127.0.0.1/32")
	}, dynamic).Addr
}

// TestGRPC runs the gRPC suite against the recipe's gRPC router and pins
// what Traefik can do for a gRPC client: ForwardAuth relays Floodgate's 429,
// which grpc-go reads as UNAVAILABLE (http2_client.operateHeaders maps the
// HTTP status of a response that is not gRPC, HTTPStatusConvTab); allowed
// calls carry no RateLimit headers (ForwardAuth gives them to the
// application only); with the door down the call fails with ForwardAuth's
// 500, UNKNOWN, and never reaches the application.
func TestGRPC(t *testing.T) {
	proxytest.RunGRPC(t, recipe)
}

// TestAttacks runs the shared ways around a recipe a spent client tries
// (proxytest.RunAttacks: odd bytes in any header value, a key holding one,
// the door's own 4xx, rotated X-Forwarded-For, forged forwarded headers)
// against the recipe, with the test's client as the trusted load balancer.
// Traefik answers the door's 431 with a 500 of its own, which refuses the
// request too: ForwardAuth never lets one through without an answer.
func TestAttacks(t *testing.T) {
	proxytest.RunAttacks(t, recipe)
}

// recipe is the shipped files as the shared suites run them, with what
// ForwardAuth cannot do said: no RateLimit headers on an allowed response,
// no fail-open (a 500, UNKNOWN to a gRPC client), a 429 relayed as it is
// (UNAVAILABLE to a gRPC client).
var recipe = proxytest.Recipe{
	Door:               door,
	Start:              func(t *testing.T, authz, upstream string) string { return startWith(t, authz, upstream) },
	GRPCStart:          startGRPC,
	FailureHeader:      "X-Floodgate-Failure-Mode-Allowed",
	NoRateLimitHeaders: true,
	FailsClosed:        true,
	GRPCDenied:         grpccodes.Unavailable,
	GRPCDoorDown:       grpccodes.Unknown,
}

// env is one run of the recipe: its door, upstream and Traefik.
type env struct {
	t        *testing.T
	door     proxytest.Door
	upstream *proxytest.Upstream
	proxy    string
	client   *http.Client
}

// setup starts the door (store.on_failure onFailure, one trusted hop: the
// load balancer), the upstream and the recipe, with dynamic.yaml's extra
// replacements.
func setup(t *testing.T, onFailure string, extra ...string) *env {
	t.Helper()
	proxytest.TraefikHarness(t) // skip (or fail under CI) before starting anything
	cfg := door
	cfg.Policies = []proxytest.Policy{apiPolicy, loginPolicy, adminPolicy}
	cfg.OnFailure = onFailure
	cfg.TrustedHops = 1
	e := &env{t: t, door: proxytest.StartDoor(t, cfg), upstream: proxytest.StartUpstream(t)}
	e.proxy = startWith(t, e.door.Addr(), e.upstream.Addr, extra...)
	e.client = &http.Client{Timeout: 45 * time.Second}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

type response struct {
	status int
	header http.Header
	body   string
}

func (r response) String() string { return fmt.Sprintf("%d %v %q", r.status, r.header, r.body) }

// do sends one request to Traefik as the load balancer would: the client's
// request with header set (Host: host when set in it).
func (e *env) do(method, uri string, header map[string]string) response {
	e.t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("user=someone")
	}
	req, err := http.NewRequest(method, "http://"+e.proxy+uri, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s through Traefik: %v", method, uri, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// allowed requires the upstream's answer with no RateLimit header at all:
// Floodgate's cannot reach the client on an allow (authResponseHeaders go
// upstream), and the application's own are removed by floodgate-upstream.
func (e *env) allowed(what string, r response) {
	e.t.Helper()
	if r.status != http.StatusOK || r.body != proxytest.UpstreamBody {
		e.t.Fatalf("%s: %v, want the upstream's 200", what, r)
	}
	for _, h := range []string{"RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Policy", "RateLimit-Reset", "X-Ratelimit-Degraded"} {
		if v := r.header.Values(h); len(v) > 0 {
			e.t.Errorf("%s: %s %q reached the client", what, h, v)
		}
	}
}

// denied requires Floodgate's 429 as the door wrote it: Retry-After near the
// policies' refill time, the RateLimit headers, the JSON body naming policy.
func (e *env) denied(what string, r response, policy string) {
	e.t.Helper()
	if r.status != http.StatusTooManyRequests {
		e.t.Fatalf("%s: %v, want 429", what, r)
	}
	n, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || n > proxytest.RefillSeconds || n < proxytest.RefillSeconds-60 {
		e.t.Errorf("%s: Retry-After %q, want whole seconds near %d", what, r.header.Get("Retry-After"), proxytest.RefillSeconds)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		e.t.Errorf("%s: content-type %q, want application/json", what, ct)
	}
	if want := fmt.Sprintf(`{"error":"rate_limited","policy":%q,"retry_after":%d}`, policy, n); strings.TrimSpace(r.body) != want {
		e.t.Errorf("%s: body %q, want %s", what, r.body, want)
	}
	if r.header.Get("RateLimit-Remaining") != "0" || !strings.HasPrefix(r.header.Get("RateLimit"), fmt.Sprintf("%q;r=0;", policy)) {
		e.t.Errorf("%s: RateLimit headers %v, want Floodgate's with nothing remaining", what, r.header)
	}
}

// TestBurstThen429: a burst passes, the next request gets Floodgate's 429 as
// it is (status, Retry-After, RateLimit headers, body); the upstream saw the
// requests that passed, each with Floodgate's RateLimit headers in place of
// the client's forged ones (authResponseHeaders). The client's allowed
// responses carry no RateLimit header: ForwardAuth copies the authorizer's
// headers onto the request upstream only (forward.go, ServeHTTP), and
// floodgate-upstream removes the application's own.
func TestBurstThen429(t *testing.T) {
	e := setup(t, "allow")
	key := map[string]string{"X-Api-Key": "key-1", "RateLimit-Remaining": "99", "X-Ratelimit-Degraded": "true"}
	for i := int64(1); i <= apiPolicy.Capacity; i++ {
		e.allowed(fmt.Sprintf("request %d of the burst", i), e.do(http.MethodGet, fmt.Sprintf("/api/items?page=%d", i), key))
	}
	e.denied("the request after the burst", e.do(http.MethodGet, "/api/items?page=4", key), "api")
	seen := e.upstream.Requests()
	if len(seen) != int(apiPolicy.Capacity) {
		t.Fatalf("the upstream saw %d requests, want the %d that passed", len(seen), apiPolicy.Capacity)
	}
	for i, s := range seen {
		want := strconv.FormatInt(apiPolicy.Capacity-int64(i)-1, 10)
		if got := strings.Join(s.Header.Values("RateLimit-Remaining"), ","); got != want {
			t.Errorf("upstream request %d: RateLimit-Remaining %q, want Floodgate's %q", i+1, got, want)
		}
		if got := s.Header.Get("RateLimit-Policy"); got != fmt.Sprintf(`"api";q=3;w=%d`, 3*proxytest.RefillSeconds) {
			t.Errorf("upstream request %d: RateLimit-Policy %q", i+1, got)
		}
		if v := s.Header.Values("X-Ratelimit-Degraded"); len(v) > 0 {
			t.Errorf("upstream request %d: X-Ratelimit-Degraded %q: the client's own reached the application", i+1, v)
		}
	}
	e.allowed("another API key after key-1 ran out", e.do(http.MethodGet, "/api/items", map[string]string{"X-Api-Key": "key-2"}))
}

// TestClientAddressIsTheBalancersEntry: without an API key the client is
// the X-Forwarded-For entry one hop from the right: the load balancer's,
// which the entry point keeps (its peer is in trustedIPs) and ForwardAuth
// sends on with its peer appended (trustForwardHeader: true). Entries a
// client writes to the left change nothing, however they rotate.
func TestClientAddressIsTheBalancersEntry(t *testing.T) {
	e := setup(t, "allow")
	xff := func(v string) map[string]string { return map[string]string{"X-Forwarded-For": v} }
	for i := int64(1); i <= apiPolicy.Capacity; i++ {
		e.allowed(fmt.Sprintf("request %d from 198.51.100.1", i), e.do(http.MethodGet, "/api/items", xff("198.51.100.1")))
	}
	for i, forged := range []string{"203.0.113.66", "203.0.113.67, 203.0.113.68", "198.51.100.2", "10.0.0.1, 198.51.100.9"} {
		r := e.do(http.MethodGet, "/api/items", xff(forged+", 198.51.100.1"))
		if r.status != http.StatusTooManyRequests {
			t.Errorf("198.51.100.1 with forged entries %d (%s) in front: %v, want 429 (its own bucket is empty)", i, forged, r)
		}
	}
	e.allowed("another client address", e.do(http.MethodGet, "/api/items", xff("198.51.100.2")))
	if got := e.upstream.Count(func(s proxytest.Seen) bool {
		return strings.Contains(strings.Join(s.Header.Values("X-Forwarded-For"), ","), "198.51.100.1")
	}); got != int(apiPolicy.Capacity) {
		t.Errorf("the upstream saw %d requests of 198.51.100.1, want %d", got, apiPolicy.Capacity)
	}
}

// spoofed is what a client behind the load balancer writes to be decided as
// some other request: the headers the door reads, which a load balancer
// passes through and the entry point keeps from a trusted peer.
var spoofed = map[string]string{"X-Forwarded-Uri": "/public", "X-Forwarded-Method": "GET", "X-Forwarded-Host": "www.example"}

func with(base map[string]string, more map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for k, v := range more {
		m[k] = v
	}
	return m
}

// spend uses up the login, admin and api buckets of client ip, each with
// the request that policy limits.
func (e *env) spend(ip string) {
	e.t.Helper()
	me := map[string]string{"X-Forwarded-For": ip}
	e.allowed("the first POST /login", e.do(http.MethodPost, "/login", me))
	e.allowed("the first request to admin.example", e.do(http.MethodGet, "/", with(me, map[string]string{"Host": "admin.example"})))
	for i := int64(1); i <= apiPolicy.Capacity; i++ {
		e.allowed(fmt.Sprintf("API request %d", i), e.do(http.MethodGet, "/api/items", with(me, map[string]string{"X-Api-Key": "key-1"})))
	}
}

// TestSpoofedForwardedHeadersChangeNothing: a client that has spent its
// buckets, sending its own X-Forwarded-Uri, -Method and -Host through the
// trusted load balancer, is still denied: floodgate-clean removes them
// before ForwardAuth, which then writes the request's own (forward.go,
// writeHeader). Without floodgate-clean the same requests pass: Traefik
// believes them (trustForwardHeader: true, the peer in trustedIPs), which
// is what the middleware is for.
func TestSpoofedForwardedHeadersChangeNothing(t *testing.T) {
	attack := func(e *env) []response {
		me := with(spoofed, map[string]string{"X-Forwarded-For": "198.51.100.7"})
		return []response{
			e.do(http.MethodPost, "/login", me),
			e.do(http.MethodGet, "/", with(me, map[string]string{"Host": "admin.example"})),
			e.do(http.MethodGet, "/api/items", with(me, map[string]string{"X-Api-Key": "key-1"})),
		}
	}
	t.Run("the recipe", func(t *testing.T) {
		e := setup(t, "allow")
		e.spend("198.51.100.7")
		for i, r := range attack(e) {
			e.denied(fmt.Sprintf("spoofed request %d", i+1), r, []string{"login", "admin", "api"}[i])
		}
	})
	t.Run("without floodgate-clean the spoof works", func(t *testing.T) {
		e := setup(t, "allow", "middlewares: [floodgate-clean, floodgate,", "middlewares: [floodgate,")
		e.spend("198.51.100.7")
		for i, r := range attack(e) {
			if r.status != http.StatusOK {
				t.Errorf("spoofed request %d without floodgate-clean: %v, want 200: Traefik should have believed the client's headers", i+1, r)
			}
		}
	})
}

// TestTheOriginalMethodAndPathReachTheDoor: POST /login is limited and GET
// /login is not; a path no policy matches is not limited, whatever the
// client writes in X-Forwarded-Uri; the POST's body reached the upstream.
func TestTheOriginalMethodAndPathReachTheDoor(t *testing.T) {
	e := setup(t, "allow")
	ip := map[string]string{"X-Forwarded-For": "198.51.100.8", "X-Forwarded-Method": "GET"}
	e.allowed("the first POST /login", e.do(http.MethodPost, "/login", ip))
	e.denied("the second POST /login", e.do(http.MethodPost, "/login", ip), "login")
	for i := 1; i <= 3; i++ {
		e.allowed(fmt.Sprintf("GET /login %d (the policy limits POST)", i), e.do(http.MethodGet, "/login", with(ip, map[string]string{"X-Forwarded-Method": "POST"})))
	}
	for i := int64(1); i <= apiPolicy.Capacity+2; i++ {
		e.allowed(fmt.Sprintf("request %d to /public/page", i), e.do(http.MethodGet, "/public/page", map[string]string{"X-Api-Key": "key-1", "X-Forwarded-Uri": "/api/spoofed"}))
	}
	if got := e.upstream.Count(func(s proxytest.Seen) bool { return s.Method == http.MethodPost && string(s.Body) == "user=someone" }); got != 1 {
		t.Errorf("the upstream saw %d POSTs with their body, want 1", got)
	}
}

// TestARewrittenPathIsDecidedAsTheClientSentIt: /api/v2/ reaches the
// application at its root (stripPrefix after floodgate in the chain), and
// the door's /api/ policy still counts it. With stripPrefix before
// ForwardAuth the door is told the stripped path (forward.go, writeHeader:
// X-Forwarded-Uri is req.URL.RequestURI()), and /api/ never matches.
func TestARewrittenPathIsDecidedAsTheClientSentIt(t *testing.T) {
	key := map[string]string{"X-Api-Key": "key-v2"}
	t.Run("the recipe", func(t *testing.T) {
		e := setup(t, "allow")
		for i := int64(1); i <= apiPolicy.Capacity; i++ {
			e.allowed(fmt.Sprintf("request %d to /api/v2/orders", i), e.do(http.MethodGet, "/api/v2/orders?id=1", key))
		}
		e.denied("the request after the burst", e.do(http.MethodGet, "/api/v2/orders?id=1", key), "api")
		if got := e.upstream.Count(func(s proxytest.Seen) bool { return s.URI == "/orders?id=1" }); got != int(apiPolicy.Capacity) {
			t.Errorf("the upstream saw %d requests to /orders?id=1, want %d (stripPrefix applied)", got, apiPolicy.Capacity)
		}
	})
	t.Run("stripPrefix before floodgate misses the policy", func(t *testing.T) {
		e := setup(t, "allow", "[floodgate-clean, floodgate, floodgate-upstream, api-v2-root]", "[api-v2-root, floodgate-clean, floodgate, floodgate-upstream]")
		for i := int64(1); i <= apiPolicy.Capacity+2; i++ {
			e.allowed(fmt.Sprintf("request %d to /api/v2/orders", i), e.do(http.MethodGet, "/api/v2/orders?id=1", key))
		}
	})
}

// TestTheStoreDown: Redis hung, the door answers by store.on_failure within
// its store timeout. allow: the client gets the upstream's 200 (without
// the degraded mark, which cannot reach it), and the application gets
// X-Ratelimit-Degraded: true (authResponseHeaders). deny: Floodgate's 429
// reaches the client as it is.
func TestTheStoreDown(t *testing.T) {
	t.Run("on_failure: allow", func(t *testing.T) {
		e := setup(t, "allow")
		e.door.StoreDown()
		for i := 1; i <= 2; i++ {
			e.allowed(fmt.Sprintf("request %d while the store is down", i), e.do(http.MethodGet, "/api/items", map[string]string{"X-Api-Key": "key-1"}))
		}
		if got := e.upstream.Count(func(s proxytest.Seen) bool { return s.Header.Get("X-Ratelimit-Degraded") == "true" }); got != 2 {
			t.Errorf("the upstream saw %d requests marked X-Ratelimit-Degraded: true, want 2", got)
		}
	})
	t.Run("on_failure: deny", func(t *testing.T) {
		e := setup(t, "deny")
		e.door.StoreDown()
		r := e.do(http.MethodGet, "/api/items", map[string]string{"X-Api-Key": "key-1"})
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" || r.header.Get("X-Ratelimit-Degraded") != "true" {
			t.Fatalf("a request while the store is down: %v, want 429 with Retry-After 1, marked degraded", r)
		}
		if want := `{"error":"rate_limited","retry_after":1,"degraded":true}`; strings.TrimSpace(r.body) != want {
			t.Errorf("body %q, want %s", r.body, want)
		}
		if n := len(e.upstream.Requests()); n != 0 {
			t.Errorf("the upstream saw %d requests, want none", n)
		}
	})
}

// TestTheDoorDownFailsClosed: ForwardAuth has no fail-open: a door that
// refuses connections, or does not answer within ForwardAuth's fixed 30 s
// client timeout, gets the client a 500 (forward.go, ServeHTTP) and the
// upstream nothing.
func TestTheDoorDownFailsClosed(t *testing.T) {
	t.Run("stopped", func(t *testing.T) {
		e := setup(t, "allow")
		e.door.Stop()
		r := e.do(http.MethodGet, "/api/items", map[string]string{"X-Api-Key": "key-1"})
		if r.status != http.StatusInternalServerError {
			t.Errorf("the door stopped: %v, want 500", r)
		}
		if n := len(e.upstream.Requests()); n != 0 {
			t.Errorf("the upstream saw %d requests, want none", n)
		}
	})
	t.Run("hung", func(t *testing.T) {
		e := setup(t, "allow")
		e.door.Pause()
		defer e.door.Resume()
		start := time.Now()
		r := e.do(http.MethodGet, "/api/items", map[string]string{"X-Api-Key": "key-1"})
		took := time.Since(start)
		if r.status != http.StatusInternalServerError {
			t.Errorf("the door hung: %v, want 500", r)
		}
		if took < 29*time.Second || took > 40*time.Second {
			t.Errorf("the door hung: answered after %v, want ForwardAuth's 30 s", took)
		}
		if n := len(e.upstream.Requests()); n != 0 {
			t.Errorf("the upstream saw %d requests, want none", n)
		}
	})
}

// TestWhatTraefikSends pins the authorization request dynamic.yaml makes,
// as docs/http-authz.md describes it: GET to the address with the client's
// headers, the original URI (path and query), method and host in
// X-Forwarded-Uri, -Method and -Host (the client's own replaced),
// X-Forwarded-For with ForwardAuth's peer appended, and no body.
func TestWhatTraefikSends(t *testing.T) {
	sent := proxytest.SendThrough(t, "Traefik", func(t *testing.T, authz, upstream string) string { return startWith(t, authz, upstream) },
		with(spoofed, map[string]string{"X-Api-Key": "key-1", "X-Forwarded-For": "198.51.100.1"}))
	proxytest.WantAuthorization(t, sent.Door, map[string]string{
		"X-Forwarded-Uri":    "/api/orders?id=7",
		"X-Forwarded-Method": "POST",
		"X-Forwarded-Host":   "shop.example",
		"X-Forwarded-For":    "198.51.100.1, 127.0.0.1",
		"X-Api-Key":          "key-1",
	})
	if len(sent.App) != 1 || string(sent.App[0].Body) != "a body" {
		t.Errorf("the upstream saw %v, want the POST with its body", sent.App)
	}
}

// TestAClientOutsideTrustedIPsIsTraefiksPeer: a client that reaches the
// entry point directly (its address not in trustedIPs, here the shipped
// example range left as it is) has its X-Forwarded-For removed by the
// entry point, so the door sees Traefik's peer alone and every such client
// shares one bucket: why Traefik must be reachable only through the load
// balancers.
func TestAClientOutsideTrustedIPsIsTraefiksPeer(t *testing.T) {
	cfg := door
	cfg.Policies = []proxytest.Policy{apiPolicy}
	cfg.TrustedHops = 1
	d := proxytest.StartDoor(t, cfg)
	up := proxytest.StartUpstream(t)
	dynamic := proxytest.Render(t, proxytest.Read(t, "dynamic.yaml"), doorAddr, d.Addr(), upstreamAddr, up.Addr)
	static := proxytest.Read(t, "traefik.yaml")
	addr := proxytest.StartTraefik(t, func(listen string) string { return proxytest.Render(t, static, listenAddr, listen) }, dynamic).Addr
	codes := make([]int, 0, 4)
	for i := 0; i < 4; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/items", nil)
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", 20+i)) // a different client each time
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 429]" {
		t.Errorf("four direct clients: %v, want [200 200 200 429]: one bucket for all", codes)
	}
}

// TestEveryGuardedRouterCleansFirstAndRewritesLast reads dynamic.yaml as
// Traefik's file provider would see its routers: each router that uses
// floodgate lists floodgate-clean right before it, floodgate-upstream right
// after it, and every path-rewriting middleware after those.
func TestEveryGuardedRouterCleansFirstAndRewritesLast(t *testing.T) {
	var cfg struct {
		HTTP struct {
			Routers     map[string]struct{ Middlewares []string } `yaml:"routers"`
			Middlewares map[string]map[string]any                 `yaml:"middlewares"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal([]byte(proxytest.Read(t, "dynamic.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	rewrites := map[string]bool{"stripPrefix": true, "stripPrefixRegex": true, "replacePath": true, "replacePathRegex": true, "addPrefix": true}
	guarded := 0
	for name, r := range cfg.HTTP.Routers {
		at := -1
		for i, m := range r.Middlewares {
			if m == "floodgate" {
				at = i
			}
		}
		if at < 0 {
			t.Errorf("router %s does not use floodgate", name)
			continue
		}
		guarded++
		if at == 0 || r.Middlewares[at-1] != "floodgate-clean" || at+1 >= len(r.Middlewares) || r.Middlewares[at+1] != "floodgate-upstream" {
			t.Errorf("router %s: middlewares %v, want floodgate-clean, floodgate, floodgate-upstream in a row", name, r.Middlewares)
		}
		for i, m := range r.Middlewares {
			for kind := range cfg.HTTP.Middlewares[m] {
				if rewrites[kind] && i < at {
					t.Errorf("router %s: %s (%s) before floodgate: the door would decide the rewritten path", name, m, kind)
				}
			}
		}
	}
	if guarded != 3 {
		t.Errorf("%d guarded routers, want app, api-v2 and grpc", guarded)
	}
}
