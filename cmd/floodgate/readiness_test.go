package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// readiness reads what p says about exact decisions, both ways: /readyz?exact=1
// and the floodgate.exact gRPC health service.
type readiness struct {
	t      *testing.T
	p      *proc
	health healthpb.HealthClient
}

func newReadiness(t *testing.T, p *proc) *readiness {
	return &readiness{t: t, p: p, health: healthpb.NewHealthClient(p.Conn)}
}

// exact returns /readyz?exact=1's status and body, and whether the
// floodgate.exact health service is SERVING.
func (r *readiness) exact() (code int, body string, serving bool) {
	r.t.Helper()
	resp, err := http.Get("http://" + r.p.Admin + "/readyz?exact=1")
	if err != nil {
		r.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h, err := r.health.Check(ctx, &healthpb.HealthCheckRequest{Service: ExactService})
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.StatusCode, string(b), h.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// within polls (sending no Check) until both signals say exact (or both
// say degraded) and returns how long it took.
func (r *readiness) within(d time.Duration, exact bool) time.Duration {
	r.t.Helper()
	start := time.Now()
	for {
		code, body, serving := r.exact()
		if (code == http.StatusOK) == exact && serving == exact {
			return time.Since(start)
		}
		if time.Since(start) > d {
			r.t.Fatalf("after %v /readyz?exact=1 says %d %q and floodgate.exact serving=%v; want exact=%v", d, code, body, serving, exact)
		}
		time.Sleep(20 * time.Millisecond) // polling, not synchronisation
	}
}

// TestReadinessTellsTheTruthWithoutTraffic: Redis down when floodgate
// starts, then back, with no Check at all: /readyz?exact=1
// and floodgate.exact follow within two seconds, because the store is
// probed at start and in the background while degraded.
func TestReadinessTellsTheTruthWithoutTraffic(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	p := startFloodgate(t, fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addresses: ["%s"], timeout: 50ms}
  breaker: {failures: 5, open_for: 200ms}
policies:
  - name: api
    key: [client_ip]
    capacity: 10
    refill_per_second: 1
`, srv.Addr))
	r := newReadiness(t, p)
	t.Logf("degraded %v after serving, Redis down from start", r.within(2*time.Second, false))
	srv.Restart()
	t.Logf("exact %v after Redis returned", r.within(2*time.Second, true))
	if n := metricValue(t, metrics(t, p), "floodgate_checks_total{outcome=\"allowed\"}"); n != 0 {
		t.Errorf("%v Checks were made; the test sends none", n)
	}
}

// TestAStoreThatRefusesFloodgateFailsExactReadiness: a Redis that requires
// a password floodgate was not given is a misconfiguration, not an outage:
// the log says so at error level with the fix, the metric counts it, and
// exact readiness fails at once, saying why.
func TestAStoreThatRefusesFloodgateFailsExactReadiness(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Config{Password: "s3cret"})
	p := startFloodgate(t, fmt.Sprintf(`
listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addresses: ["%s"], timeout: 50ms}
policies:
  - name: api
    key: [client_ip]
    capacity: 10
    refill_per_second: 1
`, srv.Addr))
	r := newReadiness(t, p)
	r.within(2*time.Second, false)
	if _, body, _ := r.exact(); !strings.Contains(body, "password_file or password_env") {
		t.Errorf("/readyz?exact=1 says %q; want what to fix", body)
	}
	found := false
	for _, l := range strings.Split(p.Output(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["level"] == "error" && strings.Contains(fmt.Sprint(m["msg"]), "password_file or password_env") {
			found = true
		}
	}
	if !found {
		t.Errorf("no error-level log line saying what to fix:\n%s", p.Output())
	}
	if n := metricValue(t, metrics(t, p), `floodgate_store_misconfigured_total{kind="noauth"}`); n < 1 {
		t.Errorf("floodgate_store_misconfigured_total{kind=noauth} = %v", n)
	}
}
