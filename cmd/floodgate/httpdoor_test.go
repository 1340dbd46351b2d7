package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/door/httpauthz"
)

const httpDoorConfig = `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: "127.0.0.1:0", drain_delay: 2s}
http_authz:
  path_prefix: /authz
policies:
  - name: api
    match: {path_prefix: /api/}
    key: [header:x-api-key, client_ip]
    capacity: 3
    refill_per_second: 1/3600
`

// checkHTTPCmd runs floodgate check --http against p with args.
func checkHTTPCmd(t *testing.T, p *proc, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"check", "--http", "--addr", p.HTTP}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("floodgate check --http %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// metric reads one sample of the admin port's /metrics ("" when absent).
func metric(t *testing.T, p *proc, sample string) string {
	t.Helper()
	resp, err := http.Get("http://" + p.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// TestServeRunsTheHTTPDoorBesideCheck runs floodgate serve with listen.http:
// `floodgate check --http` plays Envoy's http_service against it and prints
// the burst and its 429 as check prints Checks; a Check of the same caller
// draws from the same bucket; the metrics, /debug/limited and floodgate top
// know the door's decisions; gRPC health reports the door; a reload
// reaches it; SIGTERM keeps it answering through drain_delay, then closes
// it.
func TestServeRunsTheHTTPDoorBesideCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(path, []byte(httpDoorConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startCommand(t, "serve", "--config", path)
	if p.HTTP == "" {
		t.Fatalf("the serving line names no http address:\n%s", p.Output())
	}
	if m, _ := p.LogLine("serving"); !strings.Contains(fmt.Sprint(m["doors"]), "HTTP authorization on 127.0.0.1:0") {
		t.Errorf("the serving line's doors: %v", m["doors"])
	}

	out := checkHTTPCmd(t, p, "--path-prefix", "/authz", "--path", "/api/items?page=1", "-H", "x-api-key: k1", "--count", "4")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^#1 allowed  ratelimit-limit: 3  ratelimit-remaining: 2  ratelimit-reset: \d+  ratelimit-policy: "api";q=3;w=10800  ratelimit: "api";r=2;t=\d+$`),
		regexp.MustCompile(`^#2 allowed  ratelimit-limit: 3  ratelimit-remaining: 1  `),
		regexp.MustCompile(`^#3 allowed  ratelimit-limit: 3  ratelimit-remaining: 0  `),
		regexp.MustCompile(`^#4 denied 429  ratelimit-limit: 3  ratelimit-remaining: 0  ratelimit-reset: \d+  ratelimit-policy: "api";q=3;w=10800  ratelimit: "api";r=0;t=\d+  retry-after: 3\d{3}  content-type: application/json  body: \{"error":"rate_limited","policy":"api","retry_after":3\d{3}\}$`),
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("check --http printed:\n%s", out)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d: %s\nwant %s", i+1, lines[i], re)
		}
	}
	if resp := p.Check(t, request(t, "/api/items", "127.0.0.1", "x-api-key: k1")); isAllowed(resp) {
		t.Error("a Check of the caller the door had limited was allowed: the doors do not share the bucket")
	}

	for sample, want := range map[string]string{
		`floodgate_http_authz_requests_total{outcome="allowed"}`:  "3",
		`floodgate_http_authz_requests_total{outcome="denied"}`:   "1",
		`floodgate_decisions_total{policy="api",result="denied"}`: "2",
		`floodgate_checks_total{outcome="denied"}`:                "1",
	} {
		if got := metric(t, p, sample); got != want {
			t.Errorf("%s = %q, want %s", sample, got, want)
		}
	}
	rep := getLimited(t, p)
	if len(rep.Policies) != 1 || rep.Policies[0].Name != "api" || rep.Policies[0].Denied != 2 || len(rep.Policies[0].Top) != 1 ||
		rep.Policies[0].Top[0].Key != "header:x-api-key" || rep.Policies[0].Top[0].Denied != 2 || rep.Policies[0].Top[0].Allowed != 3 {
		t.Errorf("/debug/limited: %+v, want api's one caller denied twice (once by each door) after 3 allowed", rep)
	}
	if top := topText(t, "--admin", p.Admin, "--once"); !strings.Contains(top, "api") || strings.Contains(top, "k1") {
		t.Errorf("floodgate top --once:\n%s", top)
	}

	health := healthpb.NewHealthClient(p.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if h, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: httpauthz.HealthService}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of %s: %v %v", httpauthz.HealthService, h, err)
	}

	// A reload moves the prefix.
	if err := os.WriteFile(path, []byte(strings.Replace(httpDoorConfig, "path_prefix: /authz", "path_prefix: /check", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the reload", func() bool { return strings.Contains(p.Output(), `"msg":"reloaded"`) })
	if out := checkHTTPCmd(t, p, "--path-prefix", "/check", "--path", "/api/items", "-H", "x-api-key: k2"); !strings.HasPrefix(out, "#1 allowed  ratelimit-limit: 3") {
		t.Errorf("after the reload, /check/api/items: %s", out)
	}

	// SIGTERM: answered through the drain delay while /readyz says 503,
	// then the door's port is closed.
	p.Cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 1900*time.Millisecond, "/readyz to report 503", func() bool {
		resp, err := http.Get("http://" + p.Admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	if out := checkHTTPCmd(t, p, "--path-prefix", "/check", "--path", "/api/items", "-H", "x-api-key: k3"); !strings.HasPrefix(out, "#1 allowed  ratelimit-limit: 3") {
		t.Errorf("during the drain delay: %s", out)
	}
	if err, ok := p.Wait(15 * time.Second); !ok || err != nil {
		t.Fatalf("exit after SIGTERM: %v (exited %v)", err, ok)
	}
	if c, err := net.DialTimeout("tcp", p.HTTP, time.Second); err == nil {
		c.Close()
		t.Error("the door's port still accepts connections after the process exited")
	}
}

// TestCheckHTTPPlaysNginx: --uri-header and --method-header ask one fixed
// URI with the original in headers, which the door reads when configured.
func TestCheckHTTPPlaysNginx(t *testing.T) {
	p := startFloodgate(t, `
listen: {grpc: "127.0.0.1:0", http: "127.0.0.1:0", admin: ""}
store: {on_failure: allow}
http_authz: {original_uri_header: X-Original-URI, original_method_header: X-Original-Method}
policies:
  - {name: login, match: {path: /login, methods: [POST]}, key: [client_ip], capacity: 1, refill_per_second: 1/60}
`)
	out := checkHTTPCmd(t, p, "--uri-header", "X-Original-URI", "--method-header", "X-Original-Method", "--method", "POST", "--path", "/login", "--source", "198.51.100.9", "--count", "2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "#1 allowed  ratelimit-limit: 1") || !strings.HasPrefix(lines[1], "#2 denied 429") {
		t.Errorf("check --http as nginx:\n%s", out)
	}
	if out := checkHTTPCmd(t, p, "--method", "POST", "--path", "/login", "--source", "198.51.100.9"); !strings.HasPrefix(out, "#1 denied 429") {
		t.Errorf("POST /login asked directly, same client: %s", out)
	}
	cmd := exec.Command(binary, "check", "--http", "--addr", p.HTTP, "--uri-header", "X-Original-URI")
	if out, err := cmd.CombinedOutput(); exitCode(err) != 2 || !strings.Contains(string(out), "together") {
		t.Errorf("--uri-header alone: %v %s", err, out)
	}
}
