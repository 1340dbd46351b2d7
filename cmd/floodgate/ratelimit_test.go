package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/peertest"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// rlClient connects to a rate limit service at addr with opts (plain by
// default).
func rlClient(t *testing.T, addr string, opts ...grpc.DialOption) rlsv3.RateLimitServiceClient {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// rlAsk sends one descriptor of key/value pairs (hits 0: Envoy's default)
// and returns the answer.
func rlAsk(c rlsv3.RateLimitServiceClient, domain string, hits uint32, pairs ...string) (*rlsv3.RateLimitResponse, error) {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(pairs); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
}

// rlAnswer is an answer as the differential tests compare it: the overall
// code, then each status's code, limit and what is left; or the error's
// presence.
func rlAnswer(r *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		return "error"
	}
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, s := range r.Statuses {
		fmt.Fprintf(&b, " [%s %d/%s left %d]", s.Code, s.GetCurrentLimit().GetRequestsPerUnit(), s.GetCurrentLimit().GetUnit(), s.LimitRemaining)
	}
	return b.String()
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRatelimitServesThePeersRequestsFromItsVariablesAlone runs the binary
// as ratelimit (argv[0], as the image's /bin/ratelimit) with
// envoyproxy/ratelimit's variables alone, the limits in a runtime
// directory reached through a RUNTIME_ROOT symlink (the peer's
// RUNTIME_WATCH_ROOT layout): the peer's requests are answered over gRPC
// from a real redis-server, /healthcheck answers OK as the peer's does,
// the metrics are on the HTTP port, the statsd the peer would send by
// default is said not to be, and swapping the symlink to new limits
// applies them without a restart.
func TestRatelimitServesThePeersRequestsFromItsVariablesAlone(t *testing.T) {
	redis := redistest.Start(t)
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "v1", "ratelimit", "config", "edge.yaml"),
		"domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	current := filepath.Join(root, "current")
	if err := os.Symlink(filepath.Join(root, "v1"), current); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := peertest.FreeAddr(t), peertest.FreeAddr(t)
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr, "RUNTIME_ROOT=" + current, "RUNTIME_SUBDIRECTORY=ratelimit",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(grpcAddr), "HOST=127.0.0.1", "PORT=" + port(httpAddr)}
	p := peertest.Start(t, peertest.AsRatelimit(t, binary), env)
	p.WaitListening(t, grpcAddr, 15*time.Second)
	c := rlClient(t, grpcAddr)
	var got []string
	for range 4 {
		got = append(got, rlAnswer(rlAsk(c, "edge", 0, "api_key", "k1")))
	}
	if want := "OK [OK 3/HOUR left 2] | OK [OK 3/HOUR left 1] | OK [OK 3/HOUR left 0] | OVER_LIMIT [OVER_LIMIT 3/HOUR left 0]"; strings.Join(got, " | ") != want {
		t.Errorf("answers %s\nwant    %s", strings.Join(got, " | "), want)
	}
	if code, body := peertest.Healthcheck(httpAddr); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q, want 200 OK", code, body)
	}
	if _, body := httpGet(t, "http://"+httpAddr+"/metrics"); !strings.Contains(body, "floodgate_rls_") {
		t.Error("no rate limit service metrics at /metrics on HOST:PORT")
	}
	if out := p.Output(); !strings.Contains(out, "USE_STATSD: statsd is not implemented") {
		t.Errorf("the peer's default statsd is not said to be missing:\n%s", out)
	}

	writeFile(t, filepath.Join(root, "v2", "ratelimit", "config", "edge.yaml"),
		"domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 9}\n")
	next := filepath.Join(root, "next")
	if err := os.Symlink(filepath.Join(root, "v2"), next); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, current); err != nil { // the atomic swap a release does
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		a := rlAnswer(rlAsk(c, "edge", 0, "api_key", "k2"))
		if strings.Contains(a, "9/MINUTE") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the swapped limits were not applied within 15s: %s\n%s", a, p.Output())
		}
		time.Sleep(50 * time.Millisecond) // the reload polls the directory; polled from outside
	}
}

func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// TestRatelimitBeforeAndAfterTheFirstPushAsThePeer runs envoyproxy/ratelimit
// (built from its module) and Floodgate as ratelimit side by side, with the
// same variables but their addresses, each fed by one go-control-plane xDS
// server, and requires the same /healthcheck (status and body) and the
// same kind of answer before the first push and after it: with
// FORCE_START_WITHOUT_INITIAL_CONFIG=true, healthy and answering with an
// RPC error before, then the limits; with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
// too, unhealthy (500) until the push; without FORCE_START, no port open
// until the push (envoyproxy/ratelimit's src/service/ratelimit.go,
// NewService, waits for it before the server starts; src/server/health.go
// answers /healthcheck).
func TestRatelimitBeforeAndAfterTheFirstPushAsThePeer(t *testing.T) {
	redis := redistest.Start(t)
	peerBin := peertest.RatelimitBinary(t)
	limits := &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "api_key", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 5}}}}
	for _, tc := range []struct {
		name         string
		env          []string
		openBefore   bool
		healthBefore string
	}{
		{"FORCE_START_WITHOUT_INITIAL_CONFIG", []string{"FORCE_START_WITHOUT_INITIAL_CONFIG=true"}, true, "200 OK"},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", []string{"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"}, true, "500 "},
		{"waiting for the first push", nil, false, "0 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xds := peertest.StartXDS(t, nil)
			type server struct {
				name, node, grpc, http string
				p                      *peertest.Process
			}
			var servers []*server
			for _, s := range []struct{ name, bin string }{{"envoyproxy/ratelimit", peerBin}, {"floodgate", peertest.AsRatelimit(t, binary)}} {
				sv := &server{name: s.name, node: "node-" + strings.ReplaceAll(s.name, "/", "-"), grpc: peertest.FreeAddr(t), http: peertest.FreeAddr(t)}
				env := append([]string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + xds.Addr, "CONFIG_GRPC_XDS_NODE_ID=" + sv.node,
					"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=200ms",
					"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr, "USE_STATSD=false", "BACKEND_TYPE=redis",
					"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(sv.grpc), "HOST=127.0.0.1", "PORT=" + port(sv.http),
					"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + port(peertest.FreeAddr(t))}, tc.env...)
				sv.p = peertest.Start(t, s.bin, env)
				servers = append(servers, sv)
			}
			for _, sv := range servers {
				if tc.openBefore {
					sv.p.WaitListening(t, sv.http, 30*time.Second)
					sv.p.WaitListening(t, sv.grpc, 30*time.Second)
				} else {
					// Opening nothing: wait until its xDS stream is open,
					// then check that neither port is.
					deadline := time.Now().Add(30 * time.Second)
					for !xds.Node(sv.node) {
						if time.Now().After(deadline) {
							t.Fatalf("%s opened no xDS stream within 30s:\n%s", sv.name, sv.p.Output())
						}
						time.Sleep(20 * time.Millisecond) // the stream opens on the server's side; polled
					}
				}
			}
			for _, sv := range servers {
				code, body := peertest.Healthcheck(sv.http)
				if got := fmt.Sprintf("%d %s", code, body); got != tc.healthBefore {
					t.Errorf("%s before the first push: /healthcheck %q, want %q", sv.name, got, tc.healthBefore)
				}
				if peertest.Listening(sv.grpc) != tc.openBefore {
					t.Errorf("%s before the first push: gRPC listening %v, want %v", sv.name, !tc.openBefore, tc.openBefore)
				}
				if tc.openBefore {
					if _, err := rlAsk(rlClient(t, sv.grpc), "edge", 0, "api_key", "k"); err == nil {
						t.Errorf("%s before the first push answered without an RPC error", sv.name)
					} else {
						t.Logf("%s before the first push: %v", sv.name, status.Convert(err))
					}
				}
			}
			for i, sv := range servers {
				xds.Push(sv.node, fmt.Sprintf("v%d", i), limits)
			}
			for i, sv := range servers {
				xds.WaitAcked(fmt.Sprintf("v%d", i))
				// envoyproxy/ratelimit opens its gRPC port from a goroutine
				// and its HTTP port after starting it (src/server/server_impl.go,
				// Start): one open says nothing of the other.
				sv.p.WaitListening(t, sv.grpc, 30*time.Second)
				sv.p.WaitListening(t, sv.http, 30*time.Second)
			}
			var answers []string
			for _, sv := range servers {
				code, body := peertest.Healthcheck(sv.http)
				answers = append(answers, fmt.Sprintf("%d %s | %s", code, body, rlAnswer(rlAsk(rlClient(t, sv.grpc), "edge", 0, "api_key", "after-"+tc.name+"-"+sv.node))))
			}
			want := "200 OK | OK [OK 5/HOUR left 4]"
			for i, sv := range servers {
				if answers[i] != want {
					t.Errorf("%s after the first push: %s, want %s\n%s", sv.name, answers[i], want, sv.p.Output())
				}
			}
		})
	}
}

// TestServeTakesItsLimitsFromRLSXDS: Floodgate's own configuration
// (rls.xds, not the peer's variables) takes the rate limit service's limits
// from an xDS server: the service is NOT_SERVING in grpc.health.v1 until
// the first push, then answers with it; /debug/xds shows it; validate
// names the feed; a reload that changes rls.xds says it waits for a
// restart.
func TestServeTakesItsLimitsFromRLSXDS(t *testing.T) {
	xds := peertest.StartXDS(t, nil)
	dir := t.TempDir()
	cfg := func(node string) string {
		return fmt.Sprintf("listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nreload: {interval: 100ms}\nrls:\n  xds: {server: %q, node_id: %s, retry: {initial: 10ms, max: 50ms}}\n", xds.Addr, node)
	}
	path := filepath.Join(dir, "floodgate.yaml")
	writeFile(t, path, cfg("edge-node"))
	out, err := exec.Command(binary, "validate", "--offline", "--config", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok (rate limit domains pushed by xds "+xds.Addr+" (node edge-node), rate limit quotas (RLQS), store memory") {
		t.Errorf("validate: %v %s", err, out)
	}
	p := startCommand(t, "serve", "--config", path)
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := healthpb.NewHealthClient(p.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return h.Status
	}
	if s := health(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("before the first push: %v, want NOT_SERVING", s)
	}
	xds.Push("edge-node", "1", &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "api_key", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 4}}}})
	xds.WaitAcked("1")
	if r := shouldRateLimit(t, p, "k"); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 4 {
		t.Errorf("after the push: %v", r)
	}
	waitFor(t, 5*time.Second, "the service's health to follow the push", func() bool { return health() == healthpb.HealthCheckResponse_SERVING })
	if _, page := httpGet(t, "http://"+p.Admin+"/debug/xds"); !strings.Contains(page, "edge.api_key: 4 per minute") {
		t.Errorf("/debug/xds:\n%s", page)
	}
	writeFile(t, path, cfg("other-node"))
	waitFor(t, 5*time.Second, "the reload to say rls.xds waits for a restart", func() bool {
		return strings.Contains(p.Output(), "changes to rls.xds take effect on restart only")
	})
	if r := shouldRateLimit(t, p, "k2"); r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 4 {
		t.Errorf("after a reload changing rls.xds: %v, want the pushed limits still", r)
	}
}
