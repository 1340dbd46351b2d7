// Package caddy holds the Caddy recipe (Caddyfile: a reverse_proxy to Floodgate's HTTP door ahead
// of the application's, inside a handle_path block and beside it). Its tests run that file in a
// real Caddy (Debian's package) on loopback, in front of the door and an upstream that records
// what reaches it (internal/proxytest).
package caddy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/internal/proxytest"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestMain removes the floodgate binary the recipe's tests build (the door
// they run against).
func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// The addresses the Caddyfile is written with, which the tests replace:
// the site (Caddy binds it to 127.0.0.1, so only its port changes), the
// door and the application.
const (
	siteAddr         = "http://:8080"
	doorAddr         = "127.0.0.1:9193"
	upstreamAddr     = "127.0.0.1:8081"
	grpcUpstreamAddr = "127.0.0.1:8082"
)

// failureHeader is what the Caddyfile sets on a request it lets through
// without Floodgate's answer.
const failureHeader = "X-Floodgate-Failure-Mode-Allowed"

// door is the Floodgate configuration the Caddyfile needs (its header
// comment).
var door = proxytest.DoorConfig{OriginalURIHeader: "X-Forwarded-Uri", OriginalMethodHeader: "X-Forwarded-Method"}

// startWith runs the Caddyfile, with the extra replacements (old, new, ...)
// applied after the addresses, in front of the door at authz and the
// upstream, and returns the address Caddy listens on.
func startWith(t *testing.T, authz, upstream string, extra ...string) string {
	t.Helper()
	return startBoth(t, authz, upstream, proxytest.FreeAddr(t), extra...)
}

// startGRPC runs the Caddyfile in front of the door at authz and the gRPC
// application at upstream; gRPC clients dial the site's address (h2c).
func startGRPC(t *testing.T, authz, upstream string) string {
	t.Helper()
	return startBoth(t, authz, proxytest.FreeAddr(t), upstream)
}

// startBoth is startWith with the gRPC application's address too.
func startBoth(t *testing.T, authz, upstream, grpcUpstream string, extra ...string) string {
	t.Helper()
	src := proxytest.Read(t, "Caddyfile")
	return proxytest.StartCaddy(t, func(listen string) string {
		_, port, err := net.SplitHostPort(listen)
		if err != nil {
			t.Fatal(err)
		}
		pairs := append([]string{siteAddr, "http://:" + port, doorAddr, authz, upstreamAddr, upstream, grpcUpstreamAddr, grpcUpstream}, extra...)
		return proxytest.Render(t, src, pairs...)
	}).Addr
}

func start(t *testing.T, authz, upstream string) string { return startWith(t, authz, upstream) }

// recipe is the shipped files as the shared suites run them: a denied gRPC
// call answered in gRPC by the recipe itself.
var recipe = proxytest.Recipe{Door: door, Start: start, GRPCStart: startGRPC, FailureHeader: failureHeader, GRPCDenied: codes.ResourceExhausted}

// TestRecipe runs the recipes' suite against the Caddyfile: the burst and
// its 429 (Floodgate's own answer, which reverse_proxy passes as it is),
// identities (Caddy trusts the test's client, a load balancer on loopback,
// through trusted_proxies), the original URI and method, the store and the
// door failing. Its /api/ requests go through the handle_path block, whose
// path Caddy has stripped before it asks the door.
func TestRecipe(t *testing.T) {
	proxytest.RunRecipe(t, recipe)
}

// TestGRPC runs the gRPC suite against the Caddyfile's gRPC handle: a spent
// gRPC client gets RESOURCE_EXHAUSTED with grpc-retry-pushback-ms from the
// @floodgate_grpc_denied handler, not the UNAVAILABLE grpc-go reads into a
// relayed 429.
func TestGRPC(t *testing.T) {
	proxytest.RunGRPC(t, recipe)
}

// reply is a response read off a raw connection.
type reply struct {
	status int
	header http.Header
	body   string
}

// send writes one request to addr exactly as given (request line, then
// the header lines, "Connection: close" added) and reads the answer: the
// request targets and header bytes a Go client would refuse or rewrite.
func send(t *testing.T, addr, method, target string, header ...string) reply {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: shop.example\r\n", method, target)
	for _, h := range header {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %q: no response: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(body)}
}

// TestWhatCaddySends pins the authorization request the Caddyfile makes, as
// docs/http-authz.md describes it: a client's POST /api/orders?id=7 with a
// body, inside handle_path /api/*, becomes GET /_floodgate with the
// client's headers and Host, X-Forwarded-Uri the URI the client sent (not
// the stripped one), X-Forwarded-Method its method, X-Forwarded-Host its
// host, X-Forwarded-For with Caddy's peer appended (the peer is trusted),
// no body; the client's own copies of those headers, its X-Original-* and
// its failure marker replaced or removed. The application gets the
// stripped path, the method and the body.
func TestWhatCaddySends(t *testing.T) {
	sent := proxytest.SendThrough(t, "Caddy", start, map[string]string{
		"X-Api-Key":          "key-1",
		"X-Forwarded-For":    "198.51.100.1",
		"X-Forwarded-Uri":    "/spoofed",
		"X-Forwarded-Method": "GET",
		"X-Forwarded-Host":   "spoofed.example",
		"X-Original-URI":     "/spoofed",
		"X-Original-Method":  "GET",
		failureHeader:        "true",
	})
	proxytest.WantAuthorization(t, sent.Door, map[string]string{
		"X-Forwarded-Uri":    "/api/orders?id=7",
		"X-Forwarded-Method": "POST",
		"X-Forwarded-Host":   "shop.example",
		"X-Forwarded-For":    "198.51.100.1, 127.0.0.1",
		"X-Api-Key":          "key-1",
		"Host":               "shop.example",
		"X-Original-Uri":     "",
		"X-Original-Method":  "",
		failureHeader:        "",
	})
	apps := sent.App
	if len(apps) != 1 {
		t.Fatalf("the upstream saw %d requests, want 1", len(apps))
	}
	if a := apps[0]; a.Method != http.MethodPost || a.URI != "/orders?id=7" || string(a.Body) != "a body" || a.Header.Get(failureHeader) != "" {
		t.Errorf("the upstream saw %s %s body %q %s %q; want POST /orders?id=7 (handle_path stripped /api), the body, no marker",
			a.Method, a.URI, a.Body, failureHeader, a.Header.Get(failureHeader))
	}
}

// spentEnv is a Caddy in front of the real door with key-1's one token of
// the /api/ policy already spent through it.
type spentEnv struct {
	addr string
	up   *proxytest.Upstream
}

// apiOnce is a policy of one token per key under /api/.
var apiOnce = proxytest.Policy{Name: "api", PathPrefix: "/api/", Key: []string{"header:x-api-key"}, Capacity: 1}

func spend(t *testing.T, d proxytest.Door, extra ...string) spentEnv {
	t.Helper()
	up := proxytest.StartUpstream(t)
	e := spentEnv{addr: startWith(t, d.Addr(), up.Addr, extra...), up: up}
	if r := send(t, e.addr, "GET", "/api/items", "X-Api-Key: key-1"); r.status != http.StatusOK || r.header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("key-1's one request: %d %v, want 200 with RateLimit-Remaining 0", r.status, r.header)
	}
	return e
}

// TestASpentClientStaysDenied: once key-1 has spent its token under /api/,
// no spelling of an /api/ request that Caddy serves through handle_path,
// and no header the client writes, gets it to the application again.
func TestASpentClientStaysDenied(t *testing.T) {
	d := proxytest.StartDoor(t, proxytest.DoorConfig{OriginalURIHeader: door.OriginalURIHeader, OriginalMethodHeader: door.OriginalMethodHeader,
		Policies: []proxytest.Policy{apiOnce}})
	e := spend(t, d)
	for _, c := range []struct {
		target string
		header []string
	}{
		{"/api/items", []string{"X-Forwarded-Uri: /public/page", "X-Forwarded-Method: OPTIONS", "X-Forwarded-Host: other.example",
			"X-Original-URI: /public/page", "X-Original-Method: OPTIONS", "X-Forwarded-For: 203.0.113.9"}},
		{"/api/items?page=2", nil},
		{"//api/items", nil},
		{"/api/./items", nil},
		{"/public/../api/items", nil},
		{"/api%2Fitems", nil},
		{"/%61pi/items", nil},
		{"/api/items%0a", nil},
		{"/api/items%3F", nil},
	} {
		r := send(t, e.addr, "GET", c.target, append([]string{"X-Api-Key: key-1"}, c.header...)...)
		if r.status != http.StatusTooManyRequests {
			t.Errorf("GET %s %q after key-1 spent its token: %d %q, want Floodgate's 429", c.target, c.header, r.status, r.body)
		}
	}
	// Absolute form puts a scheme and host in front of the path of
	// {http.request.orig_uri}, which no policy path would match: the
	// recipe refuses it before asking.
	if r := send(t, e.addr, "GET", "http://shop.example/api/items", "X-Api-Key: key-1"); r.status != http.StatusBadRequest {
		t.Errorf("an absolute-form target: %d %q, want the recipe's 400", r.status, r.body)
	}
	if n := len(e.up.Requests()); n != 1 {
		t.Errorf("the upstream saw %d requests, want key-1's one", n)
	}
}

// TestCaddysPathMatchersIgnoreCase: handle_path /api/* serves /API/items as
// /items (Caddy's path matcher and prefix strip fold case), which a
// case-sensitive policy does not limit; the recipe's policies under a
// Caddy path matcher set match.case_sensitive: false, and then it is.
func TestCaddysPathMatchersIgnoreCase(t *testing.T) {
	t.Run("case_sensitive policy: /API/ is not limited (why the recipe says to set it false)", func(t *testing.T) {
		d := proxytest.StartDoor(t, proxytest.DoorConfig{OriginalURIHeader: door.OriginalURIHeader, OriginalMethodHeader: door.OriginalMethodHeader,
			Policies: []proxytest.Policy{apiOnce}})
		e := spend(t, d)
		if r := send(t, e.addr, "GET", "/API/items", "X-Api-Key: key-1"); r.status != http.StatusOK {
			t.Fatalf("GET /API/items: %d, want the upstream's 200: Caddy or the door changed, update the recipe's comment and docs/http-authz.md", r.status)
		}
		if a := e.up.Requests(); a[len(a)-1].URI != "/items" {
			t.Errorf("the upstream saw %s, want /items: handle_path did not strip /API", a[len(a)-1].URI)
		}
	})
	t.Run("case_sensitive: false: /API/ is denied", func(t *testing.T) {
		cfg := proxytest.DoorConfig{OriginalURIHeader: door.OriginalURIHeader, OriginalMethodHeader: door.OriginalMethodHeader,
			Policies: []proxytest.Policy{apiOnce}}
		e := spend(t, startDoorYAML(t, func(redis string) string {
			return proxytest.Render(t, cfg.YAML(redis), `path_prefix: "/api/"`, `path_prefix: "/api/", case_sensitive: false`)
		}))
		for _, target := range []string{"/API/items", "/Api/items", "/aPi/items"} {
			if r := send(t, e.addr, "GET", target, "X-Api-Key: key-1"); r.status != http.StatusTooManyRequests {
				t.Errorf("GET %s after key-1 spent its token: %d, want 429", target, r.status)
			}
		}
		if n := len(e.up.Requests()); n != 1 {
			t.Errorf("the upstream saw %d requests, want key-1's one", n)
		}
	})
}

// yamlDoor is the floodgate binary serving listen.http from a configuration
// of the test's own, on a redis-server of its own.
type yamlDoor struct{ p *floodgatetest.Process }

func (d yamlDoor) Addr() string { return d.p.HTTP }
func (yamlDoor) Pause()         {}
func (yamlDoor) Resume()        {}
func (yamlDoor) Stop()          {}
func (yamlDoor) StoreDown()     {}

// startDoorYAML starts floodgate with the configuration yaml returns for
// its Redis address.
func startDoorYAML(t *testing.T, yaml func(redis string) string) proxytest.Door {
	t.Helper()
	redis := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(yaml(redis.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := floodgatetest.Start(t, floodgatetest.Floodgate(t, floodgatetest.Build{}), "serve", "--config", path)
	if p.HTTP == "" {
		t.Fatalf("floodgate serves no listen.http:\n%s", p.Output())
	}
	return yamlDoor{p}
}

// TestControlBytesNeverReachAnyone: a header value with a control byte
// (Caddy is Go's net/http, which refuses it) gets a 400 from Caddy itself:
// neither the door nor the application sees the request.
func TestControlBytesNeverReachAnyone(t *testing.T) {
	standIn := proxytest.StartStandIn(t)
	up := proxytest.StartUpstream(t)
	addr := start(t, standIn.Addr(), up.Addr)
	for _, v := range []string{"a\x00b", "a\x01b", "a\x1bb", "a\x7fb", "a\rb"} {
		for _, name := range []string{"X-Api-Key", "X-Forwarded-Uri", "X-Forwarded-For"} {
			if r := send(t, addr, "GET", "/api/items", name+": "+v); r.status != http.StatusBadRequest {
				t.Errorf("%s %q: %d, want 400", name, v, r.status)
			}
		}
	}
	if n, m := len(standIn.Requests()), len(up.Requests()); n != 0 || m != 0 {
		t.Errorf("the door saw %d requests and the upstream %d, want none", n, m)
	}
	// The same request with a clean value goes through: the 400s were the
	// bytes'.
	if r := send(t, addr, "GET", "/api/items", "X-Api-Key: a\tb"); r.status != http.StatusOK || len(up.Requests()) != 1 {
		t.Errorf("a tab in the value (allowed): %d, upstream saw %d, want 200 and 1", r.status, len(up.Requests()))
	}
}

// answering is an authorizer that answers every request with the status
// and body set last, and counts them.
type answering struct {
	addr   string
	status atomic.Int32
	asked  atomic.Int32
}

func startAnswering(t *testing.T) *answering {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &answering{addr: l.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.asked.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-From", "authorizer")
		w.WriteHeader(int(a.status.Load()))
		fmt.Fprintf(w, "authorizer said %d", a.status.Load())
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return a
}

// TestWhatTheDoorsStatusMeans: a 2xx lets the request through unmarked; a
// 4xx is a denial the client gets as it is (a 400 or 431 is never read as
// the door being down); a 5xx (http_authz.on_failure: error's 503) is no
// decision: the request goes through marked, as when the door is down.
func TestWhatTheDoorsStatusMeans(t *testing.T) {
	a := startAnswering(t)
	up := proxytest.StartUpstream(t)
	addr := start(t, a.addr, up.Addr)
	for _, status := range []int{200, 204, 400, 401, 403, 404, 429, 431, 500, 502, 503} {
		a.status.Store(int32(status))
		before := len(up.Requests())
		r := send(t, addr, "GET", "/api/items", "X-Api-Key: key-1", failureHeader+": forged")
		seen := up.Requests()[before:]
		switch {
		case status < 300:
			if r.status != http.StatusOK || len(seen) != 1 || seen[0].Header.Get(failureHeader) != "" {
				t.Errorf("authorizer %d: client %d, upstream %v; want the upstream's 200, unmarked", status, r.status, seen)
			}
		case status < 500:
			if r.status != status || r.body != fmt.Sprintf("authorizer said %d", status) || r.header.Get("X-From") != "authorizer" || len(seen) != 0 {
				t.Errorf("authorizer %d: client %d %q, upstream saw %d; want the authorizer's answer as it is, nothing upstream", status, r.status, r.body, len(seen))
			}
		default:
			if r.status != http.StatusOK || r.body != proxytest.UpstreamBody || len(seen) != 1 || seen[0].Header.Get(failureHeader) != "true" {
				t.Errorf("authorizer %d: client %d %q, upstream %v; want the upstream's 200, marked %s: true", status, r.status, r.body, seen, failureHeader)
			}
		}
	}
	if n := a.asked.Load(); n != 11 {
		t.Errorf("the authorizer was asked %d times for 11 requests, want once each", n)
	}
}

// TestTheRewrittenURIMissesThePolicy pins why the recipe sends
// {http.request.orig_uri}: forward_auth's own X-Forwarded-Uri,
// {http.request.uri}, is the URI after handle_path stripped /api, which
// the /api/ policy does not match, so a client is never limited there.
func TestTheRewrittenURIMissesThePolicy(t *testing.T) {
	d := proxytest.StartDoor(t, proxytest.DoorConfig{OriginalURIHeader: door.OriginalURIHeader, OriginalMethodHeader: door.OriginalMethodHeader,
		Policies: []proxytest.Policy{apiOnce}})
	up := proxytest.StartUpstream(t)
	addr := startWith(t, d.Addr(), up.Addr, "X-Forwarded-Uri {http.request.orig_uri}", "X-Forwarded-Uri {http.request.uri}")
	for i := 1; i <= 3; i++ {
		if r := send(t, addr, "GET", "/api/items", "X-Api-Key: key-1"); r.status != http.StatusOK || r.header.Get("RateLimit-Limit") != "" {
			t.Fatalf("request %d with {http.request.uri}: %d %v, want an unlimited 200 (the door saw /items): Caddy's placeholder changed, update the recipe's comment", i, r.status, r.header)
		}
	}
}

// TestTheDoorsTimeoutsLeaveFloodgateTime holds the door's reverse_proxy
// timeouts above Floodgate's store timeout (so that store.on_failure, not
// Caddy, decides while Redis is slow) and at most a second (each is waited
// on every request while Floodgate hangs).
func TestTheDoorsTimeoutsLeaveFloodgateTime(t *testing.T) {
	src := proxytest.Read(t, "Caddyfile")
	_, snippet, _ := strings.Cut(src, "(floodgate) {")
	snippet, _, _ = strings.Cut(snippet, "\n}\n")
	found := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(dial_timeout|response_header_timeout)\s+(\S+)$`).FindAllStringSubmatch(snippet, -1) {
		d, err := time.ParseDuration(m[2])
		if err != nil {
			t.Fatalf("%s %s: %v", m[1], m[2], err)
		}
		if d <= config.DefaultRedisTimeout || d > time.Second {
			t.Errorf("%s %v: want above Floodgate's store timeout %v and at most 1s", m[1], d, config.DefaultRedisTimeout)
		}
		found[m[1]] = true
	}
	if len(found) != 2 {
		t.Errorf("found %v in the (floodgate) snippet, want dial_timeout and response_header_timeout", found)
	}
}

// TestAnApplicationErrorIsNotTheDoors: once the door allowed, an error on
// the way to the application (here the application drops the connection
// of its first request) is the client's 502, not the door's failure mode:
// the request is not sent again marked, which would make the application
// serve it twice.
func TestAnApplicationErrorIsNotTheDoors(t *testing.T) {
	standIn := proxytest.StartStandIn(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var asked, marked atomic.Int32
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		if r.Header.Get(failureHeader) != "" {
			marked.Add(1)
		}
		io.WriteString(w, proxytest.UpstreamBody)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	addr := start(t, standIn.Addr(), l.Addr().String())
	if r := send(t, addr, "GET", "/api/items", "X-Api-Key: key-1"); r.status != http.StatusBadGateway {
		t.Errorf("the application dropped the connection: %d %q, want 502", r.status, r.body)
	}
	if n, m := asked.Load(), marked.Load(); n != 1 || m != 0 {
		t.Errorf("the application was asked %d times (%d marked), want once, unmarked", n, m)
	}
	if n := len(standIn.Requests()); n != 1 {
		t.Errorf("the door was asked %d times, want once", n)
	}
}

// TestFailClosed: with `respond 503` in handle_errors' @floodgate_failed
// handle, as the Caddyfile's comment says, a door that does not answer
// gets the client a 503 and the upstream nothing.
func TestFailClosed(t *testing.T) {
	standIn := proxytest.StartStandIn(t)
	up := proxytest.StartUpstream(t)
	addr := startWith(t, standIn.Addr(), up.Addr, "\t\thandle @floodgate_failed {\n", "\t\thandle @floodgate_failed {\n\t\t\trespond 503\n")
	standIn.Stop()
	if r := send(t, addr, "GET", "/api/items"); r.status != http.StatusServiceUnavailable {
		t.Errorf("door down, failing closed: %d, want 503", r.status)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("the upstream saw %d requests, want none", n)
	}
}

// TestTheCaddyfileIsFormatted: the shipped file is as `caddy fmt` writes it
// (Caddy warns at every start otherwise).
func TestTheCaddyfileIsFormatted(t *testing.T) {
	out, err := exec.Command(proxytest.Binary(t, "caddy", "caddy"), "fmt", "Caddyfile").Output()
	if err != nil {
		t.Fatalf("caddy fmt: %v", err)
	}
	if string(out) != proxytest.Read(t, "Caddyfile") {
		t.Error("the Caddyfile is not as `caddy fmt` writes it: run `caddy fmt --overwrite e2e/caddy/Caddyfile`")
	}
}

// TestFailOpenKeepsTheBlocksURI: the request handle_errors lets through
// while the door is down is the one the block would have sent: inside
// handle_path the stripped URI (Caddy gives handle_errors the client's
// URI back; the snippet kept the block's), with the method and the body.
func TestFailOpenKeepsTheBlocksURI(t *testing.T) {
	standIn := proxytest.StartStandIn(t)
	up := proxytest.StartUpstream(t)
	addr := start(t, standIn.Addr(), up.Addr)
	standIn.Stop()
	for _, c := range []struct{ target, want string }{{"/api/orders?id=7", "/orders?id=7"}, {"/public/page?x=1", "/public/page?x=1"}} {
		before := len(up.Requests())
		resp, err := http.Post("http://"+addr+c.target, "text/plain", strings.NewReader("a body"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen := up.Requests()[before:]
		if resp.StatusCode != http.StatusOK || len(seen) != 1 {
			t.Fatalf("POST %s with the door down: %d, upstream saw %d, want 200 and 1", c.target, resp.StatusCode, len(seen))
		}
		if s := seen[0]; s.Method != http.MethodPost || s.URI != c.want || string(s.Body) != "a body" || s.Header.Get(failureHeader) != "true" {
			t.Errorf("POST %s with the door down: the upstream saw %s %s body %q marker %q, want POST %s, the body, marked",
				c.target, s.Method, s.URI, s.Body, s.Header.Get(failureHeader), c.want)
		}
	}
}
