package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestReadinessReportsDegradedWhileRedisIsDown kills Redis under the built
// binary (on_failure: local): Checks keep answering, marked degraded and
// limited per replica; /readyz and the floodgate.exact health service say
// degraded while the default health service stays SERVING; when Redis
// returns, decisions are exact again.
func TestReadinessReportsDegradedWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	p := startFloodgate(t, fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addresses: ["%s"], timeout: 50ms}
  on_failure: local
  local_share: 0.5
  breaker: {failures: 2, open_for: 200ms}
policies:
  - name: api
    key: [client_ip]
    capacity: 10
    refill_per_second: 1/60
`, srv.Addr))
	health := healthpb.NewHealthClient(p.Conn)
	status := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		return r.GetStatus()
	}
	readyz := func(query string) (int, string) {
		resp, err := http.Get("http://" + p.Admin + "/readyz" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := readyz("?exact=1"); code != 200 || !strings.Contains(body, "exact") || status("floodgate.exact") != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("healthy: /readyz %d %q", code, body)
	}

	srv.Kill()
	req := request(t, "/x", "203.0.113.5")
	allowed := 0
	for i := 0; i < 12; i++ {
		resp := p.Check(t, req)
		if isAllowed(resp) {
			allowed++
		}
		if i >= 2 && hdr(resp, "x-ratelimit-degraded") != "true" {
			t.Errorf("Check %d while Redis is down is not marked degraded", i)
		}
	}
	if allowed != 5 { // the local bucket holds half the capacity
		t.Errorf("%d of 12 allowed by the local fallback, want 5 (local_share 0.5 of 10)", allowed)
	}
	if code, body := readyz(""); code != 200 || !strings.Contains(body, "degraded") {
		t.Errorf("/readyz while degraded: %d %q", code, body)
	}
	if code, _ := readyz("?exact=1"); code != 503 {
		t.Errorf("/readyz?exact=1 while degraded: %d, want 503", code)
	}
	if status("") != healthpb.HealthCheckResponse_SERVING || status("floodgate.exact") != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while degraded: default %v, floodgate.exact %v", status(""), status("floodgate.exact"))
	}

	srv.Restart()
	waitFor(t, 3*time.Second, "exact decisions after Redis returned", func() bool {
		return hdr(p.Check(t, req), "x-ratelimit-degraded") == "" && status("floodgate.exact") == healthpb.HealthCheckResponse_SERVING
	})
	if m := metrics(t, p); !strings.Contains(m, "floodgate_breaker_transitions_total") || !strings.Contains(m, "floodgate_fallback_decisions_total") {
		t.Errorf("breaker and fallback metrics missing:\n%s", grep(m, "floodgate_"))
	}
}
