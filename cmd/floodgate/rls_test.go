package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/internal/door/ratelimit"
)

func rlsLimits(perMinute string) string {
	return "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: " + perMinute + "}\n"
}

// rlsFloodgate writes a Floodgate configuration serving the rate limit
// service from a directory of envoyproxy/ratelimit YAML, with extra
// appended to its rls section.
func rlsFloodgate(t *testing.T, limits, extra string) (cfgPath, rlsDir string) {
	t.Helper()
	dir := t.TempDir()
	rlsDir = filepath.Join(dir, "ratelimit")
	os.Mkdir(rlsDir, 0o755)
	if err := os.WriteFile(filepath.Join(rlsDir, "edge.yaml"), []byte(limits), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath = filepath.Join(dir, "floodgate.yaml")
	cfg := "listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nreload: {interval: 100ms}\n" +
		"rls:\n  config: " + rlsDir + "\n" + extra +
		"policies:\n  - name: a\n    key: [client_ip]\n    capacity: 3\n    refill_per_second: 1\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, rlsDir
}

func shouldRateLimit(t *testing.T, p *proc, key string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(p.Conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "api_key", Value: key}}}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// clearKey is a descriptor value that must never reach a log: one no
// log line can hold by chance (a temporary directory named after a test
// called ...Check1... holds "k1").
const clearKey = "api-key-in-the-clear"

// TestServeAnswersTheRateLimitServiceBesideCheck runs floodgate with
// rls.config and a burst: the rate limit service answers on the same port
// as Check, with the burst as capacity and the configured rate; the health
// service and reflection name both services; the metrics count it.
func TestServeAnswersTheRateLimitServiceBesideCheck(t *testing.T) {
	cfg, _ := rlsFloodgate(t, rlsLimits("60"), "  burst: {edge.api_key: 2}\n")
	p := startCommand(t, "serve", "--config", cfg)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		r := shouldRateLimit(t, p, clearKey)
		if r.OverallCode != want {
			t.Fatalf("request %d: %v, want %v (a burst of 2)", i+1, r, want)
		}
		if lim := r.Statuses[0].CurrentLimit; lim.GetRequestsPerUnit() != 60 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("request %d: current_limit %v, want the configured 60/minute", i+1, lim)
		}
	}
	if hdr(p.Check(t, request(t, "/x", "203.0.113.1")), "ratelimit-limit") != "3" {
		t.Error("Check does not answer beside the rate limit service")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(p.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of %s: %v %v", rlsv3.RateLimitService_ServiceDesc.ServiceName, h, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(p.Conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	ref, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range ref.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if all := strings.Join(names, " "); !strings.Contains(all, "envoy.service.auth.v3.Authorization") || !strings.Contains(all, "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection lists %v, want both services", names)
	}
	m := metrics(t, p)
	if !strings.Contains(m, `floodgate_rls_requests_total{outcome="denied"} 1`) || !strings.Contains(m, `floodgate_rls_decisions_total{domain="edge",limit="edge.api_key",result="allowed"} 2`) {
		t.Errorf("rate limit metrics:\n%s", grep(m, "floodgate_rls"))
	}
	if strings.Contains(p.Output(), clearKey) {
		t.Errorf("a descriptor value reached the log in the clear:\n%s", p.Output())
	}
}

// TestTheRateLimitConfigurationIsReloaded: a changed file in rls.config's
// directory is served without a signal; a broken one is rejected with its
// FILE:LINE and the old limits keep serving.
func TestTheRateLimitConfigurationIsReloaded(t *testing.T) {
	cfg, dir := rlsFloodgate(t, rlsLimits("5"), "")
	p := startCommand(t, "serve", "--config", cfg)
	limit := func() uint32 { return shouldRateLimit(t, p, "k").Statuses[0].CurrentLimit.GetRequestsPerUnit() }
	if limit() != 5 {
		t.Fatal("initial limit")
	}
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsLimits("7")), 0o644)
	waitFor(t, 5*time.Second, "the new limits to be served", func() bool { return limit() == 7 })
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsLimits("7")+"    quota_mode: true\n"), 0o644)
	waitFor(t, 5*time.Second, "the broken limits to be rejected", func() bool {
		return strings.Contains(p.Output(), "edge.yaml:5") && strings.Contains(p.Output(), "quota_mode")
	})
	if limit() != 7 {
		t.Error("broken limits replaced the running ones")
	}
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsLimits("9")), 0o644)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "SIGHUP to reload the limits", func() bool { return limit() == 9 })
}

// TestValidateAndCheckSpeakTheRateLimitService: validate reads rls.config
// (and reports its problems at their own lines, also --offline), check
// --rls plays Envoy's rate limit filter.
func TestValidateAndCheckSpeakTheRateLimitService(t *testing.T) {
	cfg, dir := rlsFloodgate(t, rlsLimits("2"), "")
	out, err := exec.Command(binary, "validate", "--offline", "--config", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rate limit domain edge") {
		t.Errorf("validate --offline: %v\n%s", err, out)
	}
	p := startCommand(t, "serve", "--config", cfg)
	out, err = exec.Command(binary, "check", "--addr", p.GRPC, "--rls", "--domain", "edge", "--descriptor", "api_key=k", "--count", "3").CombinedOutput()
	want := "#1 ok  [0] ok 2/minute remaining 1 reset 30s\n#2 ok  [0] ok 2/minute remaining 0 reset 60s\n#3 over limit  [0] over_limit 2/minute remaining 0 reset 30s  body: {\"error\":\"rate_limited\",\"retry_after\":30}\n"
	if err != nil || string(out) != want {
		t.Errorf("check --rls: %v\n%s\nwant\n%s", err, out, want)
	}
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsLimits("2")+"    rate_limitt: {}\n"), 0o644)
	out, err = exec.Command(binary, "validate", "--offline", "--config", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), filepath.Join(dir, "edge.yaml")+":5: edge: descriptors[0]: rate_limitt: unknown key") {
		t.Errorf("validate on broken limits: %v\n%s", err, out)
	}
	cfg2, _ := rlsFloodgate(t, rlsLimits("2"), "  burst: {edge.nokey: 5}\n")
	out, err = exec.Command(binary, "validate", "--offline", "--config", cfg2).CombinedOutput()
	if err == nil || !strings.Contains(string(out), ":5: rls.burst.edge.nokey: names no limit") {
		t.Errorf("validate with a burst naming no limit: %v\n%s", err, out)
	}
}

// TestAnEmptyRateLimitDirectoryIsServedOnceFilled: rls.config naming an
// empty directory (the manifests mount an optional ConfigMap there, empty
// until it is created) starts with no domain, and the limits are served
// once a file appears, without a restart.
func TestAnEmptyRateLimitDirectoryIsServedOnceFilled(t *testing.T) {
	cfg, dir := rlsFloodgate(t, rlsLimits("4"), "")
	os.Remove(filepath.Join(dir, "edge.yaml"))
	p := startCommand(t, "serve", "--config", cfg)
	if r := shouldRateLimit(t, p, "k"); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("no domain yet: %v", r)
	}
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsLimits("4")), 0o644)
	waitFor(t, 5*time.Second, "the limits to be served once their file appears", func() bool {
		return shouldRateLimit(t, p, "k").Statuses[0].CurrentLimit.GetRequestsPerUnit() == 4
	})
}

// TestARateLimitServiceAloneNeedsNoPolicy: a configuration with rls.config
// and no policies validates, saying which front end it turns on, and
// serves the rate limit service; Check's health is NOT_SERVING, since no
// policy would limit anything it is asked.
func TestARateLimitServiceAloneNeedsNoPolicy(t *testing.T) {
	cfg, _ := rlsFloodgate(t, rlsLimits("1"), "")
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	only, _, _ := strings.Cut(string(data), "policies:")
	if err := os.WriteFile(cfg, []byte(only), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "validate", "--config", cfg).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": ok (rate limit domain edge, rate limit quotas (RLQS), store memory)") {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	p := startCommand(t, "serve", "--config", cfg)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := shouldRateLimit(t, p, "k").OverallCode; got != want {
			t.Fatalf("request %d: %v, want %v", i+1, got, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		rlsv3.RateLimitService_ServiceDesc.ServiceName: healthpb.HealthCheckResponse_SERVING,
		"envoy.service.auth.v3.Authorization":          healthpb.HealthCheckResponse_NOT_SERVING,
		"":                                             healthpb.HealthCheckResponse_SERVING,
	} {
		h, err := healthpb.NewHealthClient(p.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.Status != want {
			t.Errorf("health of %q: %v %v, want %v", svc, h, err, want)
		}
	}
}

// rlsDigest is the rls_sha256 label of floodgate_config_info, once the
// reloader exports it (it starts as the server starts serving).
func rlsDigest(t *testing.T, p *proc) string {
	t.Helper()
	var line string
	waitFor(t, 5*time.Second, "floodgate_config_info", func() bool {
		line = grep(metrics(t, p), "floodgate_config_info{")
		return line != ""
	})
	_, rest, ok := strings.Cut(line, `rls_sha256="`)
	if !ok {
		t.Fatalf("floodgate_config_info has no rls_sha256: %q", line)
	}
	d, _, _ := strings.Cut(rest, `"`)
	return d
}

// TestARateLimitReloadIsVisible: floodgate_config_info's rls_sha256 changes
// with the rate limit files (the configuration file unchanged), the
// "reloaded" log names the domains served, and a domain a reload removes
// is logged and counted (its descriptors meet no limit from then on).
func TestARateLimitReloadIsVisible(t *testing.T) {
	cfg, dir := rlsFloodgate(t, rlsLimits("5"), "")
	if err := os.WriteFile(filepath.Join(dir, "partners.yaml"), []byte("domain: partners\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startCommand(t, "serve", "--config", cfg)
	first := rlsDigest(t, p)
	if len(first) != 64 {
		t.Fatalf("rls_sha256 %q, want a SHA-256", first)
	}
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsLimits("7")), 0o644)
	waitFor(t, 5*time.Second, "the new limits to be served", func() bool { return shouldRateLimit(t, p, "k").Statuses[0].CurrentLimit.GetRequestsPerUnit() == 7 })
	if second := rlsDigest(t, p); second == first || len(second) != 64 {
		t.Errorf("rls_sha256 %q after the rate limit files changed, was %q", second, first)
	}
	if !strings.Contains(p.Output(), `"rls_domains":["edge","partners"]`) {
		t.Errorf("the reload log does not name the domains:\n%s", grep(p.Output(), "reloaded"))
	}
	os.Remove(filepath.Join(dir, "partners.yaml"))
	waitFor(t, 5*time.Second, "the removed domain to be logged", func() bool {
		return strings.Contains(p.Output(), `"msg":"rate limit domains removed: their descriptors meet no limit now","removed":["partners"]`)
	})
	if got := metricValue(t, metrics(t, p), "floodgate_rls_domains_removed_total"); got != 1 {
		t.Errorf("floodgate_rls_domains_removed_total = %v, want 1", got)
	}
}

// TestDescribeRLSSaysWhenNothingResets: check --rls prints a status
// without duration_until_reset (a cost above the limit, which waiting
// never admits) as no reset, not as "reset 0s", which reads as "at once".
func TestDescribeRLSSaysWhenNothingResets(t *testing.T) {
	lim := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 2, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: lim},
		{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: lim, LimitRemaining: 1, DurationUntilReset: durationpb.New(1500 * time.Millisecond)},
	}}
	want := "over limit  [0] over_limit 2/minute remaining 0 no reset  [1] ok 2/minute remaining 1 reset 1.5s"
	if got := ratelimit.Describe(resp); got != want {
		t.Errorf("ratelimit.Describe = %q, want %q", got, want)
	}
}
