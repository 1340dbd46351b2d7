// Package haproxy holds the HAProxy recipe (haproxy.cfg and floodgate.lua, an http-request
// action that asks Floodgate's HTTP door). Its tests run those files in a real HAProxy (Debian's
// package) on loopback, in front of the door and an upstream that records what reaches it
// (internal/proxytest).
package haproxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
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

// The addresses haproxy.cfg is written with, which the tests replace.
const (
	listenAddr   = "127.0.0.1:8080"
	doorAddr     = "127.0.0.1:9193"
	upstreamAddr = "127.0.0.1:8081"
	// grpcUpstreamAddr is the application's gRPC service.
	grpcUpstreamAddr = "127.0.0.1:8082"
	// authzAddr is where floodgate.lua reaches the floodgate-authz section:
	// each HAProxy a test starts gets a name of its own, so that two running
	// at once (another package's tests, another checkout's) never share it.
	authzAddr = "abns@floodgate-authz"
)

// failureHeader is what floodgate.lua sets on a request it lets through
// without Floodgate's answer.
const failureHeader = "X-Floodgate-Failure-Mode-Allowed"

// door is the Floodgate configuration the recipe needs (haproxy.cfg's header
// comment).
var door = proxytest.DoorConfig{OriginalURIHeader: "X-Original-URI", OriginalMethodHeader: "X-Original-Method"}

// startWith runs haproxy.cfg, with the extra replacements (old, new, ...)
// applied after the addresses, in front of the door at authz and the
// upstream.
func startWith(t *testing.T, authz, upstream string, extra ...string) *proxytest.Proc {
	t.Helper()
	return startBoth(t, authz, upstream, proxytest.FreeAddr(t), extra...)
}

// startGRPC runs haproxy.cfg in front of the door at authz and the gRPC
// application at upstream; gRPC clients dial the frontend's address (h2c).
func startGRPC(t *testing.T, authz, upstream string) string {
	t.Helper()
	return startBoth(t, authz, proxytest.FreeAddr(t), upstream).Addr
}

// startBoth is startWith with the gRPC application's address too.
func startBoth(t *testing.T, authz, upstream, grpcUpstream string, extra ...string) *proxytest.Proc {
	t.Helper()
	cfg := proxytest.Read(t, "haproxy.cfg")
	lua := proxytest.Read(t, "floodgate.lua")
	return proxytest.StartHAProxy(t, func(listen string) string {
		pairs := append([]string{listenAddr, listen, doorAddr, authz, upstreamAddr, upstream, grpcUpstreamAddr, grpcUpstream}, extra...)
		pairs = append(pairs, authzAddr, fmt.Sprintf("%s-%d-%s", authzAddr, os.Getpid(), listen))
		return proxytest.Render(t, cfg, pairs...)
	}, map[string]string{"floodgate.lua": lua})
}

func start(t *testing.T, authz, upstream string) string { return startWith(t, authz, upstream).Addr }

// recipe is the shipped files as the shared suites run them: a denied gRPC
// call answered in gRPC by the recipe itself.
var recipe = proxytest.Recipe{Door: door, Start: start, GRPCStart: startGRPC, FailureHeader: failureHeader, GRPCDenied: codes.ResourceExhausted}

// TestRecipe runs the recipes' suite against haproxy.cfg and floodgate.lua:
// the burst and its 429 (Floodgate's own answer, passed as it is),
// identities, the original URI and method, the store and the door failing.
func TestRecipe(t *testing.T) {
	proxytest.RunRecipe(t, recipe)
}

// TestGRPC runs the gRPC suite against haproxy.cfg and floodgate.lua: a
// spent gRPC client gets RESOURCE_EXHAUSTED with grpc-retry-pushback-ms from
// floodgate.lua's own answer, not the UNAVAILABLE grpc-go reads into a
// relayed 429.
func TestGRPC(t *testing.T) {
	proxytest.RunGRPC(t, recipe)
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
	addr := startWith(t, standIn.Addr(), up.Addr, " 250 allow", " 250 deny").Addr
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
	m := regexp.MustCompile(`(?m)^\s*http-request lua\.floodgate-authorize \S+ (\d+) (allow|deny)$`).FindStringSubmatch(proxytest.Read(t, "haproxy.cfg"))
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

// TestFloodgateByName: Floodgate's address written as a name (how a
// Kubernetes Service is written; localhost resolves through /etc/hosts,
// with no DNS) still decides: the burst passes, the request after it gets
// Floodgate's 429. Written into floodgate.lua's own socket, a name was a Lua
// error, and HAProxy let every request through unlimited.
func TestFloodgateByName(t *testing.T) {
	cfg := door
	cfg.Policies = []proxytest.Policy{{Name: "api", PathPrefix: "/api/", Key: []string{"header:x-api-key"}, Capacity: 2}}
	d := proxytest.StartDoor(t, cfg)
	_, port, err := net.SplitHostPort(d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	up := proxytest.StartUpstream(t)
	addr := start(t, "localhost:"+port, up.Addr)
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i := 1; i <= 3; i++ {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/items", nil)
		req.Header.Set("X-Api-Key", "key-1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want, remaining := http.StatusOK, fmt.Sprint(2-i)
		if i == 3 {
			want, remaining = http.StatusTooManyRequests, "0"
		}
		if resp.StatusCode != want || resp.Header.Get("RateLimit-Remaining") != remaining {
			t.Errorf("request %d: %d with RateLimit-Remaining %q, want %d with %q", i, resp.StatusCode, resp.Header.Get("RateLimit-Remaining"), want, remaining)
		}
	}
	if n := len(up.Requests()); n != 2 {
		t.Errorf("the upstream saw %d requests, want the 2 of the burst", n)
	}
	if n := up.Count(func(s proxytest.Seen) bool { return s.Header.Get(failureHeader) != "" }); n != 0 {
		t.Errorf("%d requests reached the upstream in the failure mode", n)
	}
}

// TestAnErrorInTheActionMeetsTheFailureMode: a Lua error in the action (here
// the one a name in floodgate.lua's own socket raises: "cannot parse
// destination address") is the failure mode, logged, and not HAProxy's
// default for a failed action, which lets the request through unmarked:
// `deny` answers 503 and the upstream sees nothing, `allow` passes the
// request marked.
func TestAnErrorInTheActionMeetsTheFailureMode(t *testing.T) {
	for _, mode := range []string{"deny", "allow"} {
		t.Run(mode, func(t *testing.T) {
			standIn := proxytest.StartStandIn(t)
			up := proxytest.StartUpstream(t)
			p := startWith(t, standIn.Addr(), up.Addr, authzAddr+" 250 allow", "floodgate.invalid:9193 250 "+mode)
			req, _ := http.NewRequest(http.MethodGet, "http://"+p.Addr+"/api/items", nil)
			req.Header.Set(failureHeader, "forged-by-the-client")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			seen := up.Requests()
			if mode == "deny" {
				if resp.StatusCode != http.StatusServiceUnavailable || len(seen) != 0 {
					t.Errorf("deny: %d and the upstream saw %d requests, want 503 and none", resp.StatusCode, len(seen))
				}
			} else if resp.StatusCode != http.StatusOK || len(seen) != 1 || strings.Join(seen[0].Header.Values(failureHeader), ",") != "true" {
				t.Errorf("allow: %d, the upstream saw %v; want 200 and the one request, with %s: true alone", resp.StatusCode, seen, failureHeader)
			}
			if n := len(standIn.Requests()); n != 0 {
				t.Errorf("the door was asked %d times through an address it cannot be reached at", n)
			}
			if !waitForLog(p, "cannot parse destination address") {
				t.Errorf("HAProxy logged no warning naming the error:\n%s", p.Log())
			}
		})
	}
}

// waitForLog polls p's log, for at most 2s, until it holds s.
func waitForLog(p *proxytest.Proc, s string) bool {
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(p.Log(), s) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// rawDoor stands in for the door at the byte level: it keeps what each
// connection sent, up to the end of the request's head (and whatever came
// with it), and answers every one with the same bytes.
type rawDoor struct {
	addr   string
	answer string

	mu   sync.Mutex
	seen []string
}

func startRawDoor(t *testing.T, answer string) *rawDoor {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &rawDoor{addr: l.Addr().String(), answer: answer}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go d.serve(c)
		}
	}()
	t.Cleanup(func() { l.Close() })
	return d
}

func (d *rawDoor) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte("\r\n\r\n")) && len(got) < 1<<20 {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	d.mu.Lock()
	d.seen = append(d.seen, string(got))
	d.mu.Unlock()
	io.WriteString(c, d.answer)
}

func (d *rawDoor) requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.seen...)
}

// rawStatus sends head to addr as it is, reads the answers until HAProxy
// closes the connection (every head ends with Connection: close) and
// returns the first one's status line.
func rawStatus(t *testing.T, addr, head string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("answer to %q: %v", head, err)
	}
	line, _, _ := strings.Cut(string(all), "\r\n")
	return line
}

const doorAllows = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

// TestClientHeadersCannotForgeTheDoorsRequest: floodgate.lua writes the
// client's header values into a raw HTTP/1.1 request; no value, whatever
// bytes the client put in it, may end a line there and so add an
// X-Original-URI of its own, or a second request. Each request below
// reaches the door (a stand-in that keeps the bytes) with its one
// X-Original-URI and X-Original-Method, no line break inside a line and
// nothing after the head, or is refused by HAProxy (400) and never asked
// about. The control bytes and obs-text reach the door as the client sent
// them (HAProxy 2.6 forwards them, its Lua header table holds them), or
// HAProxy refuses them: the log says which.
func TestClientHeadersCannotForgeTheDoorsRequest(t *testing.T) {
	d := startRawDoor(t, doorAllows)
	up := proxytest.StartUpstream(t)
	addr := start(t, d.addr, up.Addr)
	const uri = "/api/items?x=1"
	for _, c := range []struct {
		name, value string
		// refused: HAProxy answers 400 itself; kept: the door gets the
		// value as the client sent it (else only the line checks apply).
		refused, kept bool
	}{
		{name: "LF, then a header", value: "a\nX-Original-URI: /forged"},
		{name: "CRLF, then a header", value: "a\r\nX-Original-URI: /forged"},
		{name: "CR, then a header", value: "a\rX-Original-URI: /forged", refused: true},
		{name: "obs-fold, then a header", value: "a\r\n X-Original-URI: /forged"},
		{name: "CRLFCRLF, then a request", value: "a\r\n\r\nGET /forged HTTP/1.1\r\nHost: x"},
		{name: "NUL", value: "a\x00b"},
		{name: "SOH", value: "a\x01b", kept: true},
		{name: "VT", value: "a\x0bb", kept: true},
		{name: "ESC", value: "a\x1bb", kept: true},
		{name: "DEL", value: "a\x7fb", kept: true},
		{name: "obs-text", value: "a\x80\xffb", kept: true},
	} {
		before := len(d.requests())
		head := "GET " + uri + " HTTP/1.1\r\nHost: shop.example\r\nX-Probe: " + c.value + "\r\nConnection: close\r\n\r\n"
		status := rawStatus(t, addr, head)
		asked := d.requests()[before:]
		if c.refused {
			if !strings.HasPrefix(status, "HTTP/1.1 400") || len(asked) != 0 {
				t.Errorf("%s: %q and %d asks of the door, want HAProxy's 400 and none", c.name, status, len(asked))
			}
			continue
		}
		if len(asked) == 0 && strings.HasPrefix(status, "HTTP/1.1 400") {
			t.Logf("%s: HAProxy refuses it (400)", c.name)
			if c.kept {
				t.Errorf("%s: HAProxy refused it; HAProxy 2.6 forwards it", c.name)
			}
			continue
		}
		// "CRLFCRLF, then a request" is two requests to HAProxy: each is
		// asked about on its own, the second under its own URI.
		wantURIs := []string{uri}
		if strings.HasPrefix(c.name, "CRLFCRLF") {
			wantURIs = append(wantURIs, "/forged")
		}
		if len(asked) != len(wantURIs) {
			t.Errorf("%s: %q, the door was asked %d times, want %d", c.name, status, len(asked), len(wantURIs))
			continue
		}
		for i, req := range asked {
			headEnd := strings.Index(req, "\r\n\r\n")
			if headEnd < 0 || headEnd+4 != len(req) {
				t.Errorf("%s: the door got bytes after the head, or no end of it: %q", c.name, req)
				continue
			}
			var uris, methods, probes []string
			for _, line := range strings.Split(req[:headEnd], "\r\n") {
				if strings.ContainsAny(line, "\r\n") {
					t.Errorf("%s: a line break inside a line the door got: %q", c.name, line)
				}
				name, value, _ := strings.Cut(line, ": ")
				switch strings.ToLower(name) {
				case "x-original-uri":
					uris = append(uris, value)
				case "x-original-method":
					methods = append(methods, value)
				case "x-probe":
					probes = append(probes, value)
				}
			}
			if len(uris) != 1 || uris[0] != wantURIs[i] || len(methods) != 1 || methods[0] != http.MethodGet {
				t.Errorf("%s: the door got X-Original-URI %q and X-Original-Method %q, want %q and GET alone\n%q", c.name, uris, methods, wantURIs[i], req)
			}
			if i == 0 {
				t.Logf("%s: the door got X-Probe %q", c.name, probes)
				if c.kept && (len(probes) != 1 || probes[0] != c.value) {
					t.Errorf("%s: the door got X-Probe %q, want %q as the client sent it", c.name, probes, c.value)
				}
			}
		}
	}
}

// TestTheDoorsOwn4xxIsADenial: an answer of the door below 500 that is not
// a decision, the 400 or 431 Go's net/http writes for a request it cannot
// read (no Content-Length, the body ends with the connection), reaches the
// client as it is, and never lets the request through: only no answer or a
// 5xx is the failure mode.
func TestTheDoorsOwn4xxIsADenial(t *testing.T) {
	for _, c := range []struct {
		status int
		answer string
	}{
		{400, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: malformed MIME header line"},
		{431, "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			d := startRawDoor(t, c.answer)
			up := proxytest.StartUpstream(t)
			addr := start(t, d.addr, up.Addr)
			resp, err := http.Get("http://" + addr + "/api/items")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_, wantBody, _ := strings.Cut(c.answer, "\r\n\r\n")
			if resp.StatusCode != c.status || string(body) != wantBody {
				t.Errorf("%d %q, want the door's %d %q", resp.StatusCode, body, c.status, wantBody)
			}
			if n := len(up.Requests()); n != 0 {
				t.Errorf("the upstream saw %d requests, want none", n)
			}
			if n := len(d.requests()); n != 1 {
				t.Errorf("the door was asked %d times, want once", n)
			}
		})
	}
}
