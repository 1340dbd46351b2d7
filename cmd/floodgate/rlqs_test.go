package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/door/rlqs"
)

// TestCheckRLQSPlaysOneEnvoy: beside the rate limit service, serve answers
// Envoy's rate limit quota service from the same limits; check --rlqs
// plays one Envoy and prints its assignments, report after report; the
// service is SERVING in grpc.health.v1 and its metrics are exposed.
func TestCheckRLQSPlaysOneEnvoy(t *testing.T) {
	cfg, _ := rlsFloodgate(t, rlsLimits("120"), "")
	p := startCommand(t, "serve", "--config", cfg)
	out, err := exec.Command(binary, "check", "--addr", p.GRPC, "--rlqs", "--domain", "edge", "--bucket", "api_key=k", "--bucket", "other=x",
		"--count", "3", "--reports", "2", "--interval", "100ms").CombinedOutput()
	want := "#1 api_key=k: token_bucket max 1, 2 per 1s (2/s), ttl 15s; allowed 3 of 3\n" +
		"#1 other=x: allow_all, ttl 15s; allowed 3 of 3\n" +
		"#2 api_key=k: token_bucket max 1, 2 per 1s (2/s), ttl 15s; allowed 1 of 3\n" +
		"#2 other=x: allow_all, ttl 15s; allowed 3 of 3\n"
	if err != nil || string(out) != want {
		t.Errorf("check --rlqs: %v\n%s\nwant\n%s", err, out, want)
	}
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of the quota service: %v %v", h, err)
	}
	m := metrics(t, p)
	for _, s := range []string{`floodgate_rlqs_reports_total 3`, `floodgate_rlqs_allow_all_total{reason="no_limit"} 2`,
		`floodgate_rlqs_requests_total{domain="edge",limit="edge.api_key",outcome="allowed"} 4`} {
		if !strings.Contains(m, s) {
			t.Errorf("metrics lack %s:\n%s", s, grep(m, "floodgate_rlqs"))
		}
	}
}

// TestAQuotaStreamDoesNotHoldTheDrain: serve stops promptly with an Envoy's
// stream open (the door ends it once the drain delay is over), and the
// Envoy sees UNAVAILABLE.
func TestAQuotaStreamDoesNotHoldTheDrain(t *testing.T) {
	cfg, _ := rlsFloodgate(t, rlsLimits("120"), "")
	p := startCommand(t, "serve", "--config", cfg)
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e := rlqs.NewEnvoy(conn, rlqs.EnvoyOptions{Domain: "edge"})
	defer e.Close()
	e.Request(map[string]string{"api_key": "k"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !e.WaitAnswers(ctx, 1) {
		t.Fatal("no answer")
	}
	start := time.Now()
	p.Stop(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("serve took %v to stop with a quota stream open", d)
	}
	if strings.Contains(p.Output(), "drain timed out") {
		t.Errorf("the drain timed out:\n%s", p.Output())
	}
}

// TestTopShowsTheQuotaBuckets: floodgate top lists the quota buckets that
// Envoys reported denying, under rlqs:DOMAIN/LIMIT, each a bucket via its
// Envoy, as /debug/limited does.
func TestTopShowsTheQuotaBuckets(t *testing.T) {
	cfg, _ := rlsFloodgate(t, rlsLimits("120"), "")
	p := startCommand(t, "serve", "--config", cfg)
	out, err := exec.Command(binary, "check", "--addr", p.GRPC, "--rlqs", "--domain", "edge", "--bucket", "api_key=k",
		"--count", "20", "--reports", "2", "--interval", "100ms").CombinedOutput()
	if err != nil {
		t.Fatalf("check --rlqs: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "top", "--once", "--admin", p.Admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rlqs:edge/edge.api_key") || !strings.Contains(string(out), " via 127.0.0.1:") {
		t.Errorf("floodgate top: %v\n%s", err, out)
	}
}
