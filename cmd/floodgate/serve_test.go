package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	checkdoor "github.com/floodgate/floodgate/internal/door/check"
	"github.com/floodgate/floodgate/limiter/redistest"
)

const e2eConfig = `
listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addresses: ["%s"]}
  over_limit_cache: {max_entries: 0} # the scenarios flush Redis in between
client_ip: {trusted_hops: 2}
policies:
  - name: keys
    match: {path_prefix: /v1/}
    key: [header:x-api-key, client_ip]
    capacity: 3
    refill_per_second: 1/60
  - name: ips
    match: {path_prefix: /ip/}
    key: [client_ip]
    capacity: 2
    refill_per_second: 1/60
  - name: trial
    match: {path_prefix: /shadow/}
    key: [client_ip]
    capacity: 1
    refill_per_second: 1/60
    mode: shadow
  - name: both-key
    match: {path_prefix: /both/}
    key: [header:x-api-key]
    capacity: 5
    refill_per_second: 1/60
  - name: both-ip
    match: {path_prefix: /both/}
    key: [client_ip]
    capacity: 2
    refill_per_second: 1/60
  - name: gold
    match: {path_prefix: /ctx/, context: {tier: gold}}
    key: [client_ip]
    capacity: 1
    refill_per_second: 1/60
`

// request builds an Envoy-shaped request as the check command sends it.
func request(t *testing.T, path, source string, headers ...string) *authv3.CheckRequest {
	t.Helper()
	var ctxExt []string
	var hs []string
	for _, h := range headers {
		if kv, ok := strings.CutPrefix(h, "context:"); ok {
			ctxExt = append(ctxExt, kv)
		} else {
			hs = append(hs, h)
		}
	}
	req, err := checkdoor.Request("GET", "api.example.com", path, source, hs, ctxExt, false)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestServeDecidesOverGRPCWithRedis runs the built binary against a real
// redis-server and drives it over a TCP gRPC connection, scenario by
// scenario, with Redis flushed in between.
func TestServeDecidesOverGRPCWithRedis(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client()
	p := startFloodgate(t, fmt.Sprintf(e2eConfig, srv.Addr))

	run := func(name string, f func(t *testing.T)) {
		rc.FlushAll(context.Background())
		t.Run(name, f)
	}

	run("a burst of capacity passes with remaining counting down, then 429", func(t *testing.T) {
		req := loadFixture(t, "checkrequest-get-apikey.json")
		for want := 2; want >= 0; want-- {
			resp := p.Check(t, req)
			if !isAllowed(resp) || hdr(resp, "ratelimit-remaining") != fmt.Sprint(want) {
				t.Fatalf("want allowed with remaining %d, got %v", want, resp)
			}
		}
		resp := p.Check(t, req)
		if isAllowed(resp) || resp.GetDeniedResponse().GetStatus().GetCode() != 429 || hdr(resp, "retry-after") != "60" {
			t.Fatalf("4th: %v", resp)
		}
		var body map[string]any
		json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &body)
		if body["error"] != "rate_limited" || body["policy"] != "keys" || body["retry_after"] != 60.0 {
			t.Errorf("body %v", body)
		}
	})

	run("headers only in header_map (encode_raw_headers) limit the same way", func(t *testing.T) {
		req := loadFixture(t, "checkrequest-raw-header-map-h2-tls.json")
		for i := 0; i < 3; i++ {
			if !isAllowed(p.Check(t, req)) {
				t.Fatalf("raw request %d denied", i+1)
			}
		}
		if isAllowed(p.Check(t, req)) {
			t.Fatal("4th raw request allowed: the x-api-key in header_map was not the bucket")
		}
		// The same key through the headers map shares the bucket.
		if isAllowed(p.Check(t, loadFixture(t, "checkrequest-get-apikey.json"))) {
			t.Error("the same API key in the headers map has a separate bucket")
		}
	})

	run("two API keys have separate buckets", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			p.Check(t, request(t, "/v1/a", "203.0.113.9", "x-api-key: alpha"))
		}
		if isAllowed(p.Check(t, request(t, "/v1/a", "203.0.113.9", "x-api-key: alpha"))) {
			t.Fatal("alpha's 4th request allowed")
		}
		if resp := p.Check(t, request(t, "/v1/a", "203.0.113.9", "x-api-key: beta")); !isAllowed(resp) || hdr(resp, "ratelimit-remaining") != "2" {
			t.Errorf("beta shares alpha's bucket: %v", resp)
		}
	})

	run("unmatched paths pass untouched", func(t *testing.T) {
		for i := 0; i < 10; i++ {
			resp := p.Check(t, request(t, "/public/x", "203.0.113.9"))
			if !isAllowed(resp) || len(resp.GetOkResponse().GetResponseHeadersToAdd()) != 0 {
				t.Fatalf("unmatched: %v", resp)
			}
		}
	})

	run("the pipeline's depth is in the metrics", func(t *testing.T) {
		// One request at a time: each decision is a batch and a script
		// call of its own.
		before := metrics(t, p)
		for i := 0; i < 3; i++ {
			if !isAllowed(p.Check(t, request(t, "/v1/depth", "203.0.113.9", "x-api-key: depth"))) {
				t.Fatalf("request %d denied", i+1)
			}
		}
		after := metrics(t, p)
		for _, name := range []string{"floodgate_redis_batch_decisions_count", "floodgate_redis_batch_decisions_sum", "floodgate_redis_script_calls_total"} {
			if d := metricValue(t, after, name) - metricValue(t, before, name); d != 3 {
				t.Errorf("%s rose by %v over 3 sequential decisions, want 3", name, d)
			}
		}
	})

	run("shadow mode never denies", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			if !isAllowed(p.Check(t, request(t, "/shadow/x", "203.0.113.9"))) {
				t.Fatal("a shadow policy denied")
			}
		}
		if m := metrics(t, p); !strings.Contains(m, `floodgate_decisions_total{policy="trial",result="shadow_denied"} 4`) {
			t.Errorf("shadow denials not counted:\n%s", grep(m, "trial"))
		}
	})

	run("several policies decide all-or-nothing", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			if !isAllowed(p.Check(t, request(t, "/both/x", "203.0.113.9", "x-api-key: k1"))) {
				t.Fatal("denied inside both limits")
			}
		}
		resp := p.Check(t, request(t, "/both/x", "203.0.113.9", "x-api-key: k2"))
		if isAllowed(resp) || !strings.Contains(resp.GetDeniedResponse().GetBody(), `"policy":"both-ip"`) {
			t.Fatalf("the per-IP bucket is empty, want a denial naming both-ip: %v", resp)
		}
		// k2's key bucket paid nothing for the denied request: from another IP, k2 has all 5 left.
		resp = p.Check(t, request(t, "/both/x", "203.0.113.10", "x-api-key: k2"))
		if !strings.Contains(hdr(resp, "ratelimit"), `"both-key";r=4`) {
			t.Errorf("k2 was charged for a denied request: %s", hdr(resp, "ratelimit"))
		}
	})

	run("X-Forwarded-For: spoofed leftmost entries gain nothing", func(t *testing.T) {
		// trusted_hops 2: the client is the third entry from the right.
		for i := 0; i < 2; i++ {
			xff := fmt.Sprintf("x-forwarded-for: 6.6.6.%d, 198.51.100.23, 192.0.2.10,10.0.0.5", i)
			if !isAllowed(p.Check(t, request(t, "/ip/x", "10.0.0.5", xff))) {
				t.Fatal("denied inside the limit")
			}
		}
		for i := 2; i < 12; i++ {
			xff := fmt.Sprintf("x-forwarded-for: 6.6.6.%d, 198.51.100.23, 192.0.2.10,10.0.0.5", i)
			if isAllowed(p.Check(t, request(t, "/ip/x", "10.0.0.5", xff))) {
				t.Fatalf("rotating the spoofed entry (%s) bought a fresh bucket", xff)
			}
		}
		// The fixture's chain (CDN, then LB, then Envoy) names 198.51.100.23;
		// prepending forged entries to it changes nothing.
		fx := loadFixture(t, "checkrequest-xff-two-proxies.json")
		if resp := p.Check(t, fx); hdr(resp, "ratelimit-remaining") != "2" {
			t.Fatalf("fixture: %v", resp)
		}
		h := fx.GetAttributes().GetRequest().GetHttp().GetHeaders()
		h["x-forwarded-for"] = "9.9.9.9, 8.8.8.8, " + h["x-forwarded-for"]
		if resp := p.Check(t, fx); hdr(resp, "ratelimit-remaining") != "1" {
			t.Errorf("forged entries moved the fixture's client to another bucket: %v", resp)
		}
	})

	run("garbage X-Forwarded-For gets a decision, not an error", func(t *testing.T) {
		for _, xff := range []string{"not, an, ip", ",,,,", strings.Repeat("1.2.3.4,", 5000), "\x00!", "[::1", "1.2.3.4:99999"} {
			resp := p.Check(t, request(t, "/ip/x", "10.9.9.9", "x-forwarded-for: "+xff))
			if resp.GetStatus() == nil {
				t.Fatalf("xff %.20q: no status", xff)
			}
		}
	})

	run("IPv6 clients share a bucket per /64", func(t *testing.T) {
		p.Check(t, request(t, "/ip/x", "2001:db8:1:2::1"))
		p.Check(t, request(t, "/ip/x", "2001:db8:1:2:ffff::9"))
		if isAllowed(p.Check(t, request(t, "/ip/x", "2001:db8:1:2:abcd::77"))) {
			t.Fatal("a third address in the same /64 got a fresh bucket")
		}
		if !isAllowed(p.Check(t, request(t, "/ip/x", "2001:db8:1:3::1"))) {
			t.Fatal("a different /64 shares the bucket")
		}
	})

	run("context_extensions select a policy", func(t *testing.T) {
		if resp := p.Check(t, request(t, "/ctx/x", "203.0.113.9", "context:tier=gold")); hdr(resp, "ratelimit-limit") != "1" {
			t.Fatalf("the gold route did not select the gold policy: %v", resp)
		}
		if isAllowed(p.Check(t, request(t, "/ctx/x", "203.0.113.9", "context:tier=gold"))) {
			t.Fatal("the gold policy allowed a second request")
		}
		for _, ext := range []string{"context:tier=silver", "context:other=gold"} {
			if resp := p.Check(t, request(t, "/ctx/x", "203.0.113.9", ext)); !isAllowed(resp) || hdr(resp, "ratelimit-limit") != "" {
				t.Errorf("%s matched the gold policy: %v", ext, resp)
			}
		}
	})

	run("grpc health reports SERVING and reflection lists the services", func(t *testing.T) {
		conn := p.Conn
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, svc := range []string{"", "envoy.service.auth.v3.Authorization"} {
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health %q: %v %v", svc, resp, err)
			}
		}
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range r.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		if !strings.Contains(strings.Join(names, " "), "envoy.service.auth.v3.Authorization") {
			t.Errorf("reflection lists %v", names)
		}
	})

	run("the admin endpoints answer", func(t *testing.T) {
		for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200} {
			resp, err := http.Get("http://" + p.Admin + path)
			if err != nil || resp.StatusCode != want {
				t.Errorf("GET %s: %v %v", path, resp, err)
			}
			if resp != nil {
				resp.Body.Close()
			}
		}
	})

	run("identities never reach Redis keys, metrics or logs in the clear; every key expires", func(t *testing.T) {
		secrets := []string{"k_live_3f9a2c7d", "sk-very-secret-token", "203.0.113.77", "198.51.100.23"}
		p.Check(t, loadFixture(t, "checkrequest-get-apikey.json"))
		p.Check(t, loadFixture(t, "checkrequest-xff-two-proxies.json"))
		p.Check(t, request(t, "/v1/x", "203.0.113.77", "x-api-key: sk-very-secret-token"))
		p.Check(t, request(t, "/both/x", "203.0.113.77", "x-api-key: sk-very-secret-token"))
		keys, err := rc.Keys(context.Background(), "*").Result()
		if err != nil || len(keys) < 4 {
			t.Fatalf("keys %v %v", keys, err)
		}
		m := metrics(t, p)
		for _, k := range keys {
			if ttl, _ := rc.Do(context.Background(), "PTTL", k).Int(); ttl == -1 { // -1: no expiry
				t.Errorf("key %s has no expiry", k)
			}
			for _, sec := range secrets {
				if strings.Contains(k, sec) {
					t.Errorf("Redis key %q holds %q in the clear", k, sec)
				}
			}
		}
		for _, sec := range secrets {
			if strings.Contains(m, sec) {
				t.Errorf("metrics hold %q", sec)
			}
		}
	})

	// No log line carries an API key in the clear.
	if logs := p.Output(); strings.Contains(logs, "k_live_3f9a2c7d") || strings.Contains(logs, "alpha") {
		t.Errorf("a secret reached the log:\n%s", logs)
	}
}

func metrics(t *testing.T, p *proc) string {
	t.Helper()
	resp, err := http.Get("http://" + p.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricValue is the value of the unlabelled sample name in an exposition.
func metricValue(t *testing.T, exposition, name string) float64 {
	t.Helper()
	for _, l := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	t.Fatalf("no sample %s in the metrics", name)
	return 0
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
