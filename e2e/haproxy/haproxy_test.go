// Package haproxy holds the HAProxy recipe (haproxy.cfg and floodgate.lua, an http-request
// action that asks Floodgate's HTTP door). Its tests run those files in a real HAProxy (Debian's
// package) on loopback, in front of the door and an upstream that records what reaches it
// (internal/proxytest).
package haproxy

import (
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/internal/proxytest"
)

// TestMain removes the floodgate binary the recipe's tests build (the door
// they run against).
func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// The addresses haproxy.cfg is written with, which the tests replace.
const (
	listenAddr   = "127.0.0.1:8080"
	doorAddr     = "127.0.0.1:9193"
	upstreamAddr = "127.0.0.1:8081"
)

// failureHeader is what floodgate.lua sets on a request it lets through
// without Floodgate's answer.
const failureHeader = "X-Floodgate-Failure-Mode-Allowed"

// door is the Floodgate configuration the recipe needs (haproxy.cfg's header
// comment).
var door = proxytest.DoorConfig{OriginalURIHeader: "X-Original-URI", OriginalMethodHeader: "X-Original-Method"}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startWith runs haproxy.cfg, with the extra replacements (old, new, ...)
// applied after the addresses, in front of the door at authz and the
// upstream.
func startWith(t *testing.T, authz, upstream string, extra ...string) string {
	t.Helper()
	cfg := read(t, "haproxy.cfg")
	lua := read(t, "floodgate.lua")
	return proxytest.StartHAProxy(t, func(listen string) string {
		pairs := append([]string{listenAddr, listen, doorAddr, authz, upstreamAddr, upstream}, extra...)
		return proxytest.Render(t, cfg, pairs...)
	}, map[string]string{"floodgate.lua": lua}).Addr
}

func start(t *testing.T, authz, upstream string) string { return startWith(t, authz, upstream) }

// TestRecipe runs the recipes' suite against haproxy.cfg and floodgate.lua:
// the burst and its 429 (Floodgate's own answer, passed as it is),
// identities, the original URI and method, the store and the door failing.
func TestRecipe(t *testing.T) {
	proxytest.RunRecipe(t, proxytest.Recipe{Door: door, Start: start, FailureHeader: failureHeader})
}

// TestWhatHAProxySends pins the authorization request floodgate.lua makes,
// as docs/http-authz.md describes it: GET /_floodgate with the client's
// headers, the original URI (path and query) and method in the headers the
// door reads, X-Forwarded-For with HAProxy's peer appended, no body; the
// client's own copies of those headers replaced.
func TestWhatHAProxySends(t *testing.T) {
	proxytest.CheckWhatItSends(t, "HAProxy", start)
}

// TestFailClosed: with the last argument deny, a door that does not answer
// gets the client a 503 and the upstream nothing.
func TestFailClosed(t *testing.T) {
	standIn := proxytest.StartStandIn(t)
	up := proxytest.StartUpstream(t)
	addr := startWith(t, standIn.Addr(), up.Addr, " 250 allow", " 250 deny")
	standIn.Stop()
	resp, err := http.Get("http://" + addr + "/api/items")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("door down, failing closed: %d, want 503", resp.StatusCode)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("the upstream saw %d requests, want none", n)
	}
}

// TestTheDoorsTimeoutLeavesFloodgateTime holds the action's timeout above
// Floodgate's store timeout (so that store.on_failure, not HAProxy, decides
// while Redis is slow) and at most a second (it is waited on every request
// while Floodgate hangs).
func TestTheDoorsTimeoutLeavesFloodgateTime(t *testing.T) {
	m := regexp.MustCompile(`(?m)^\s*http-request lua\.floodgate-authorize \S+ (\d+) (allow|deny)$`).FindStringSubmatch(read(t, "haproxy.cfg"))
	if m == nil {
		t.Fatal("haproxy.cfg has no `http-request lua.floodgate-authorize ADDRESS TIMEOUT_MS allow|deny`")
	}
	d, _ := time.ParseDuration(m[1] + "ms")
	if d <= config.DefaultRedisTimeout || d > time.Second {
		t.Errorf("timeout %v: want above Floodgate's store timeout %v and at most 1s", d, config.DefaultRedisTimeout)
	}
	if m[2] != "allow" {
		t.Errorf("on error %s: the shipped recipes fail open, as the Envoy configurations do", m[2])
	}
}

// TestOneAskPerRequestWhenHung: a hung door is asked once per client
// request, within the timeout, which is why floodgate.lua uses a socket and
// not HAProxy 2.6's core.httpclient (that client sent the same request four
// times, one per timed-out try, when tried here).
func TestOneAskPerRequestWhenHung(t *testing.T) {
	standIn := proxytest.StartStandIn(t)
	up := proxytest.StartUpstream(t)
	addr := start(t, standIn.Addr(), up.Addr)
	standIn.Pause()
	defer standIn.Resume()
	resp, err := http.Get("http://" + addr + "/api/items")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("door hung: %d, want the upstream's 200 (fail open)", resp.StatusCode)
	}
	if n := len(standIn.Requests()); n != 1 {
		t.Errorf("the door was asked %d times for one request, want once", n)
	}
}
