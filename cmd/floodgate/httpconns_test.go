package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/proxytest"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// raiseOpenFiles lifts this process's soft limit of open files to at least
// need (Go's runtime already raises it to the hard limit at start), or
// skips the test when the hard limit is below it.
func raiseOpenFiles(t *testing.T, need uint64) {
	t.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur >= need {
		return
	}
	if l.Max < need {
		t.Skipf("the open files limit is %d, the test needs %d (ulimit -n)", l.Max, need)
	}
	l.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
}

// idleConns holds connections to a door open, each having had one request
// answered (so it waits, idle, for its next) or, silent, none sent; it
// closes them all when the test ends.
type idleConns struct {
	mu    sync.Mutex
	conns []net.Conn
	// failed counts connections that were closed (evicted) or refused
	// before their request was answered.
	failed atomic.Int64
}

// open dials n connections to addr from workers goroutines within d, each
// sending a request for an unmatched path and reading its answer unless
// silent.
func (h *idleConns) open(t *testing.T, addr string, n, workers int, silent bool, d time.Duration) {
	t.Helper()
	t.Cleanup(h.closeAll)
	deadline := time.Now().Add(d)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && time.Now().Before(deadline) {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					h.failed.Add(1)
					continue
				}
				h.mu.Lock()
				h.conns = append(h.conns, c)
				h.mu.Unlock()
				if silent {
					continue
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.WriteString(c, "GET /idle HTTP/1.1\r\nHost: door\r\n\r\n"); err != nil {
					h.failed.Add(1)
					continue
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					h.failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				c.SetDeadline(time.Time{})
			}
		}()
	}
	wg.Wait()
}

// still counts the connections the door has not closed: a read that times
// out at once finds the connection open.
func (h *idleConns) still() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	var b [1]byte
	for _, c := range h.conns {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(b[:])
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			n++
		}
	}
	return n
}

func (h *idleConns) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

// waitMetric polls the door's metric sample until ok accepts its value, for
// at most 10 s.
func waitMetric(t *testing.T, p *proc, sample string, ok func(float64) bool) float64 {
	t.Helper()
	var v float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s := metric(t, p, sample)
		if _, err := fmt.Sscan(s, &v); err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %q after 10s", sample, s)
		}
	}
}

// TestAnIdleHTTPConnectionsMemory measures what an idle keep-alive
// connection to the door costs the floodgate process: its RSS with n of
// them open (each had one request answered) less its RSS before, over n.
// docs/http-authz.md ("Operating the door") quotes the figure, and
// httpConnBytes sizes the default listen.max_http_connections from it.
func TestAnIdleHTTPConnectionsMemory(t *testing.T) {
	const n = 3000
	raiseOpenFiles(t, n+1024)
	p := startFloodgate(t, `listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0", max_http_connections: 100000}
store: {backend: memory}
policies:
  - {name: api, match: {path_prefix: /api/}, key: [client_ip], capacity: 5, refill_per_second: 1}
`)
	var warm idleConns
	warm.open(t, p.HTTP, 50, 4, false, 10*time.Second)
	warm.closeAll()
	waitMetric(t, p, "floodgate_http_authz_connections", func(v float64) bool { return v == 0 })
	pid := p.Cmd.Process.Pid
	before := procStatus(t, pid, "VmRSS")

	var h idleConns
	h.open(t, p.HTTP, n, 8, false, 60*time.Second)
	if f := h.failed.Load(); f != 0 {
		t.Fatalf("%d of %d connections failed", f, n)
	}
	waitMetric(t, p, "floodgate_http_authz_connections", func(v float64) bool { return v == n })
	after := procStatus(t, pid, "VmRSS")
	per := (after - before) / n
	t.Logf("RSS %.1f MiB before, %.1f MiB with %d idle connections: %.1f KiB a connection (httpConnBytes: %d KiB)",
		float64(before)/(1<<20), float64(after)/(1<<20), n, float64(per)/1024, httpConnBytes>>10)
	if per > httpConnBytes {
		t.Errorf("an idle connection costs %d bytes, above httpConnBytes (%d): the default bound no longer holds the memory it was sized for", per, httpConnBytes)
	}
}

// recipesInFront are the shipped recipes TestIdleConnectionsToTheDoorLockNoProxyOut
// puts in front of the door, each started from its file with only its
// addresses replaced (the gRPC ones onto free ports).
var recipesInFront = []struct {
	name string
	// uri and method are the headers the recipe puts the original URI and
	// method in (http_authz.original_uri_header, original_method_header).
	uri, method string
	start       func(t *testing.T, authz, upstream string) *proxytest.Proc
}{
	{"nginx", "X-Original-URI", "X-Original-Method", func(t *testing.T, authz, upstream string) *proxytest.Proc {
		src := proxytest.Read(t, "../../e2e/nginx/nginx.conf")
		return proxytest.StartNginx(t, func(listen string) string {
			return proxytest.Render(t, src, "127.0.0.1:8080", listen, "127.0.0.1:9193", authz, "127.0.0.1:8081", upstream,
				"127.0.0.1:8443", proxytest.FreeAddr(t), "127.0.0.1:8082", proxytest.FreeAddr(t))
		})
	}},
	{"haproxy", "X-Original-URI", "X-Original-Method", func(t *testing.T, authz, upstream string) *proxytest.Proc {
		src, lua := proxytest.Read(t, "../../e2e/haproxy/haproxy.cfg"), proxytest.Read(t, "../../e2e/haproxy/floodgate.lua")
		return proxytest.StartHAProxy(t, func(listen string) string {
			return proxytest.Render(t, src, "127.0.0.1:8080", listen, "127.0.0.1:9193", authz, "127.0.0.1:8081", upstream,
				"127.0.0.1:8082", proxytest.FreeAddr(t), "abns@floodgate-authz", fmt.Sprintf("abns@floodgate-authz-%d-%s", os.Getpid(), listen))
		}, map[string]string{"floodgate.lua": lua})
	}},
	{"caddy", "X-Forwarded-Uri", "X-Forwarded-Method", func(t *testing.T, authz, upstream string) *proxytest.Proc {
		src := proxytest.Read(t, "../../e2e/caddy/Caddyfile")
		return proxytest.StartCaddy(t, func(listen string) string {
			_, port, _ := net.SplitHostPort(listen)
			return proxytest.Render(t, src, "http://:8080", "http://:"+port, "127.0.0.1:9193", authz, "127.0.0.1:8081", upstream,
				"127.0.0.1:8082", proxytest.FreeAddr(t))
		})
	}},
}

// TestIdleConnectionsToTheDoorLockNoProxyOut: an attacker holds thousands
// of connections to the door (idle after a request, or silent since their
// accept) while clients go through a shipped recipe (nginx's, HAProxy's,
// Caddy's) to the same door, bounded at max_http_connections. The door keeps
// at most that many open, closing the longest idle for each new one, the
// proxy's own idle ones among them (which nginx and Caddy's transport then
// find closed and dial again); the proxy's requests are served, so its
// decisions stay exact (a key's burst passes, then 429, and the upstream
// sees no request the proxy let through without the door's answer);
// nothing is refused; RSS stays bounded.
func TestIdleConnectionsToTheDoorLockNoProxyOut(t *testing.T) {
	for _, rc := range recipesInFront {
		t.Run(rc.name, func(t *testing.T) { idleConnectionsLockNoProxyOut(t, rc.uri, rc.method, rc.start) })
	}
}

func idleConnectionsLockNoProxyOut(t *testing.T, uriHeader, methodHeader string, startProxy func(t *testing.T, authz, upstream string) *proxytest.Proc) {
	const (
		limit    = 1000
		attack   = 4000 // connections the attacker opens before the clients come
		during   = 2000 // and while they do
		capacity = 3
	)
	raiseOpenFiles(t, attack+during+1024)
	redis := redistest.Start(t)
	cfg := proxytest.DoorConfig{OriginalURIHeader: uriHeader, OriginalMethodHeader: methodHeader,
		Policies: []proxytest.Policy{{Name: "api", PathPrefix: "/api/", Key: []string{"header:x-api-key"}, Capacity: capacity}}}
	yaml := proxytest.Render(t, cfg.YAML(redis.Addr), `admin: ""}`, fmt.Sprintf(`admin: "127.0.0.1:0", max_http_connections: %d}`, limit))
	p := startFloodgate(t, yaml)
	pid := p.Cmd.Process.Pid

	up := proxytest.StartUpstream(t)
	proxy := startProxy(t, p.HTTP, up.Addr)
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	get := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+proxy.Addr+"/api/items", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("through %s: %v", proxy.Name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get("warm-up"); s != http.StatusOK {
		t.Fatalf("before the attack: %d", s)
	}
	before := procStatus(t, pid, "VmRSS")

	var idle, silent idleConns
	start := time.Now()
	idle.open(t, p.HTTP, attack/2, 8, false, 60*time.Second)
	silent.open(t, p.HTTP, attack/2, 8, true, 60*time.Second)
	took := time.Since(start)
	t.Logf("%d attacking connections opened in %v; %d failed", attack, took.Round(time.Millisecond), idle.failed.Load()+silent.failed.Load())
	if took < 4*time.Second { // else some silent ones may have met the header timeout (5 s) instead
		waitMetric(t, p, "floodgate_http_authz_connections_evicted_total", func(v float64) bool { return v >= attack-limit })
	}
	waitMetric(t, p, "floodgate_http_authz_connections", func(v float64) bool { return v <= limit })

	// The clients, while the attacker keeps opening idle connections.
	var more idleConns
	done := make(chan struct{})
	go func() {
		defer close(done)
		more.open(t, p.HTTP, during, 4, false, 60*time.Second)
	}()
	for round := range 3 {
		key := fmt.Sprintf("key-%d", round)
		for i := 1; i <= capacity; i++ {
			if s := get(key); s != http.StatusOK {
				t.Errorf("%s: request %d of the burst: %d, want 200", key, i, s)
			}
		}
		for i := range 3 {
			if s := get(key); s != http.StatusTooManyRequests {
				t.Errorf("%s: request %d past the burst: %d, want 429", key, i+1, s)
			}
		}
	}
	<-done

	if n := up.Count(func(s proxytest.Seen) bool { return s.Header.Get("X-Floodgate-Failure-Mode-Allowed") != "" }); n != 0 {
		t.Errorf("the upstream saw %d requests %s let through without the door's answer:\n%s", n, proxy.Name, proxy.Log())
	}
	if n, want := up.Count(func(s proxytest.Seen) bool { return strings.HasSuffix(s.URI, "/items") }), 1+3*capacity; n != want {
		t.Errorf("the upstream saw %d requests, want %d (the warm-up and each key's burst)", n, want)
	}
	// The door closes an evicted connection as it admits the one that
	// evicted it, but the close reaches the attacker a moment later: count
	// again, for up to 5 s, until the closes in flight have arrived.
	open := idle.still() + silent.still() + more.still()
	for deadline := time.Now().Add(5 * time.Second); open > limit && time.Now().Before(deadline); {
		open = idle.still() + silent.still() + more.still()
	}
	if open > limit {
		t.Errorf("the attacker still holds %d connections, above max_http_connections %d", open, limit)
	}
	if r := metric(t, p, "floodgate_http_authz_connections_refused_total"); r != "0" {
		t.Errorf("%s connections refused, want none: every one at the bound had an idle one to evict", r)
	}
	after, peak := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
	t.Logf("door RSS %.1f MiB before the attack, %.1f MiB after it (peak %.1f MiB); %s evicted",
		float64(before)/(1<<20), float64(after)/(1<<20), float64(peak)/(1<<20), metric(t, p, "floodgate_http_authz_connections_evicted_total"))
	if bound := before + limit*httpConnBytes + 16<<20; peak > bound {
		t.Errorf("the door's RSS peaked at %d bytes, above %d (before + max_http_connections × httpConnBytes + 16 MiB)", peak, bound)
	}
}

// TestTheDoorsConnectionBoundIsSizedFromMemoryAndFiles: the file's value
// wins; else the fewest of httpConnsDefault, a share of the memory limit
// and the open files left to the door.
func TestTheDoorsConnectionBoundIsSizedFromMemoryAndFiles(t *testing.T) {
	for _, tc := range []struct {
		set      int
		mem      int64
		files    uint64
		want     int
		fromPart string
	}{
		{500, 128 << 20, 1024, 500, "listen.max_http_connections"},
		{0, unlimited, 0, httpConnsDefault, "the most without"},
		{0, 128 << 20, 1 << 20, 128 << 20 / httpConnsShare / httpConnBytes, "memory limit"},
		{0, unlimited, 20000, httpConnsDefault, "the most without"},
		{0, unlimited, 4096, 4096 - httpConnsFiles, "open files"},
		{0, unlimited, 1024, 512, "open files"},
		{0, 1 << 20, 1 << 20, 16, "raised to the least"},
	} {
		got, from := httpConnections(tc.set, tc.mem, tc.files)
		if got != tc.want || !strings.Contains(from, tc.fromPart) {
			t.Errorf("httpConnections(%d, %d, %d) = %d (%s), want %d (%s)", tc.set, tc.mem, tc.files, got, from, tc.want, tc.fromPart)
		}
	}
}
