// Package nginx holds the nginx recipe (nginx.conf: auth_request to Floodgate's HTTP door). Its
// tests run that file in a real nginx (Debian's package) on loopback, in front of the door and an
// upstream that records what reaches it (internal/proxytest).
package nginx

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/internal/proxytest"
)

// TestMain removes the floodgate binary the recipe's tests build (the door
// they run against).
func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// The addresses nginx.conf is written with, which the tests replace.
const (
	listenAddr       = "127.0.0.1:8080"
	grpcListenAddr   = "127.0.0.1:8443"
	doorAddr         = "127.0.0.1:9193"
	upstreamAddr     = "127.0.0.1:8081"
	grpcUpstreamAddr = "127.0.0.1:8082"
)

// failureHeader is what nginx.conf sets on a request it lets through without
// Floodgate's answer.
const failureHeader = "X-Floodgate-Failure-Mode-Allowed"

// door is the Floodgate configuration nginx.conf needs (its header comment).
var door = proxytest.DoorConfig{OriginalURIHeader: "X-Original-URI", OriginalMethodHeader: "X-Original-Method"}

// start runs nginx.conf in front of the door at authz and the upstream.
func start(t *testing.T, authz, upstream string) string {
	t.Helper()
	src := proxytest.Read(t, "nginx.conf")
	return proxytest.StartNginx(t, func(listen string) string {
		return proxytest.Render(t, src, listenAddr, listen, grpcListenAddr, proxytest.FreeAddr(t),
			doorAddr, authz, upstreamAddr, upstream, grpcUpstreamAddr, proxytest.FreeAddr(t))
	}).Addr
}

// startGRPC runs nginx.conf in front of the door at authz and the gRPC
// application at upstream and returns its gRPC (HTTP/2) address.
func startGRPC(t *testing.T, authz, upstream string) string {
	t.Helper()
	src := proxytest.Read(t, "nginx.conf")
	return proxytest.StartNginx(t, func(listen string) string {
		return proxytest.Render(t, src, grpcListenAddr, listen, listenAddr, proxytest.FreeAddr(t),
			doorAddr, authz, upstreamAddr, proxytest.FreeAddr(t), grpcUpstreamAddr, upstream)
	}).Addr
}

// recipe is the shipped files as the shared suites run them: a denied gRPC
// call answered in gRPC by the recipe itself.
var recipe = proxytest.Recipe{Door: door, Start: start, GRPCStart: startGRPC, FailureHeader: failureHeader, GRPCDenied: codes.ResourceExhausted}

// TestRecipe runs the recipes' suite against nginx.conf: the burst and its
// 429 (turned back from nginx's 500 by error_page), identities, the original
// URI and method, the store and the door failing.
func TestRecipe(t *testing.T) {
	proxytest.RunRecipe(t, recipe)
}

// TestGRPC runs the gRPC suite against nginx.conf's gRPC location: a spent
// gRPC client gets RESOURCE_EXHAUSTED with grpc-retry-pushback-ms from
// @floodgate_grpc_denied, not the UNAVAILABLE grpc-go would read into a
// relayed 429.
func TestGRPC(t *testing.T) {
	proxytest.RunGRPC(t, recipe)
}

// TestWhatNginxSends pins the authorization request nginx.conf makes, as
// docs/http-authz.md describes it (ngx_http_auth_request_module: a
// subrequest, which is a GET to the auth_request URI carrying the client's
// headers; the proxy module's proxy_set_header replaces a client header of
// the same name, and an empty value drops it).
func TestWhatNginxSends(t *testing.T) {
	proxytest.CheckWhatItSends(t, "nginx", start)
}

// TestTheDoorsTimeoutsLeaveFloodgateTime holds the authorization location's
// timeouts above Floodgate's store timeout (so that store.on_failure, not
// nginx, decides while Redis is slow) and at most a second (each waits on
// every request while Floodgate hangs).
func TestTheDoorsTimeoutsLeaveFloodgateTime(t *testing.T) {
	src := proxytest.Read(t, "nginx.conf")
	_, loc, _ := strings.Cut(src, "location = /_floodgate {")
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
