// Package nginx holds the nginx recipe (nginx.conf: auth_request to Floodgate's HTTP door). Its
// tests run that file in a real nginx (Debian's package) on loopback, in front of the door and an
// upstream that records what reaches it (internal/proxytest).
package nginx

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/internal/proxytest"
)

// TestMain removes the floodgate binary the recipe's tests build (the door
// they run against).
func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// The addresses nginx.conf is written with, which the tests replace.
const (
	listenAddr   = "127.0.0.1:8080"
	doorAddr     = "127.0.0.1:9193"
	upstreamAddr = "127.0.0.1:8081"
)

// failureHeader is what nginx.conf sets on a request it lets through without
// Floodgate's answer.
const failureHeader = "X-Floodgate-Failure-Mode-Allowed"

// door is the Floodgate configuration nginx.conf needs (its header comment).
var door = proxytest.DoorConfig{OriginalURIHeader: "X-Original-URI", OriginalMethodHeader: "X-Original-Method"}

// start runs nginx.conf in front of the door at authz and the upstream.
func start(t *testing.T, authz, upstream string) string {
	t.Helper()
	src, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	return proxytest.StartNginx(t, func(listen string) string {
		return proxytest.Render(t, string(src), listenAddr, listen, doorAddr, authz, upstreamAddr, upstream)
	}).Addr
}

// TestRecipe runs the recipes' suite against nginx.conf: the burst and its
// 429 (turned back from nginx's 500 by error_page), identities, the original
// URI and method, the store and the door failing.
func TestRecipe(t *testing.T) {
	proxytest.RunRecipe(t, proxytest.Recipe{Door: door, Start: start, FailureHeader: failureHeader})
}

// TestWhatNginxSends pins the authorization request nginx.conf makes, as
// docs/http-authz.md describes it (ngx_http_auth_request_module: a
// subrequest, which is a GET to the auth_request URI carrying the client's
// headers; the proxy module's proxy_set_header replaces a client header of
// the same name, and an empty value drops it).
func TestWhatNginxSends(t *testing.T) {
	standIn := proxytest.StartStandIn(t)
	up := proxytest.StartUpstream(t)
	addr := start(t, standIn.Addr(), up.Addr)

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/orders?id=7", strings.NewReader("a body"))
	req.Host = "shop.example"
	req.Header.Set("X-Api-Key", "key-1")
	req.Header.Set("X-Forwarded-For", "198.51.100.1")
	req.Header.Set("X-Original-URI", "/spoofed")
	req.Header.Set("X-Original-Method", "GET")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST through nginx: %d", resp.StatusCode)
	}
	seen := standIn.Requests()
	if len(seen) != 1 {
		t.Fatalf("the door saw %d authorization requests, want 1", len(seen))
	}
	got := seen[0]
	want := map[string]string{
		"X-Original-URI":    "/api/orders?id=7",
		"X-Original-Method": "POST",
		"X-Forwarded-For":   "198.51.100.1, 127.0.0.1",
		"X-Api-Key":         "key-1",
		"Host":              "shop.example",
	}
	if got.Method != http.MethodGet || got.URI != "/_floodgate" {
		t.Errorf("authorization request %s %s, want GET /_floodgate", got.Method, got.URI)
	}
	for k, v := range want {
		if g := strings.Join(got.Header.Values(k), " | "); g != v {
			t.Errorf("%s: %q, want %q", k, g, v)
		}
	}
	if len(got.Body) != 0 || got.Header.Get("Content-Length") != "" {
		t.Errorf("the authorization request carried a body (%q) or a Content-Length (%q)", got.Body, got.Header.Get("Content-Length"))
	}
}

// TestTheDoorsTimeoutsLeaveFloodgateTime holds the authorization location's
// timeouts above Floodgate's store timeout (so that store.on_failure, not
// nginx, decides while Redis is slow) and at most a second (each waits on
// every request while Floodgate hangs).
func TestTheDoorsTimeoutsLeaveFloodgateTime(t *testing.T) {
	src, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	_, loc, _ := strings.Cut(string(src), "location = /_floodgate {")
	loc, _, _ = strings.Cut(loc, "}")
	found := 0
	for _, m := range regexp.MustCompile(`(?m)^\s*(proxy_\w*timeout)\s+(\S+);`).FindAllStringSubmatch(loc, -1) {
		d, err := time.ParseDuration(m[2])
		if err != nil {
			t.Fatalf("%s %s: %v", m[1], m[2], err)
		}
		if d <= config.DefaultRedisTimeout || d > time.Second {
			t.Errorf("%s %v: want above Floodgate's store timeout %v and at most 1s", m[1], d, config.DefaultRedisTimeout)
		}
		found++
	}
	if found != 4 {
		t.Errorf("found %d timeouts in location = /_floodgate, want connect, send, read and next_upstream's", found)
	}
}
