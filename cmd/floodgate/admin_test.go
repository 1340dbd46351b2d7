package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter/redistest"
)

const adminToken = "support-0123456789abcdef"

// adminConfig is a Redis-backed configuration with the admin API on, its
// token file in dir, and a rate limit domain beside the policies.
func adminConfig(t *testing.T, redisAddr string) (cfg, tokenFile string) {
	t.Helper()
	dir := t.TempDir()
	tokenFile = filepath.Join(dir, "admin-token")
	rlsDir := filepath.Join(dir, "ratelimit")
	os.Mkdir(rlsDir, 0o755)
	for name, content := range map[string]string{
		tokenFile:                          "alice:" + adminToken + "\n",
		filepath.Join(rlsDir, "edge.yaml"): rlsLimits("2"),
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store:
  backend: redis
  redis: {addresses: ["%s"]}
admin_api: {token_file: %s}
rls: {config: %s}
policies:
  - name: keys
    match: {path_prefix: /v1/}
    key: [header:x-api-key, client_ip]
    capacity: 3
    refill_per_second: 1/60
  - name: tenant
    match: {headers: [{name: x-tenant, prefix: t-}]}
    key: [header:x-tenant]
    capacity: 10
    refill_per_second: 1
`, redisAddr, tokenFile, rlsDir), tokenFile
}

// floodgateCmd runs the built binary with args and returns its output.
func floodgateCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	return string(out), err
}

// TestAnOperatorRaisesABalanceWithOneCommandAndExplainSaysWhy plays the
// support call end to end on the built binary and a real Redis: a caller
// is denied, `floodgate explain` names the denying policy, `floodgate
// bucket add` through the admin port raises its balance, and the next
// Check passes; the rate limit service's descriptors are explained too.
func TestAnOperatorRaisesABalanceWithOneCommandAndExplainSaysWhy(t *testing.T) {
	srv := redistest.Start(t)
	cfg, tokenFile := adminConfig(t, srv.Addr)
	p := startFloodgate(t, cfg)
	req := request(t, "/v1/items", "203.0.113.9", "x-api-key: k_live_7")
	for i := 0; i < 3; i++ {
		if !isAllowed(p.Check(t, req)) {
			t.Fatalf("request %d of 3 denied", i+1)
		}
	}
	if isAllowed(p.Check(t, req)) {
		t.Fatal("the 4th request passed")
	}

	out, err := floodgateCmd(t, "explain", "--addr", p.Admin, "--token-file", tokenFile,
		"--path", "/v1/items", "--source", "203.0.113.9", "-H", "x-api-key: k_live_7")
	if err != nil || !strings.HasPrefix(out, "deny (check): denied by keys\n") ||
		!strings.Contains(out, "keys (enforce): key header:x-api-key, identity ") ||
		!strings.Contains(out, "0 of 3 left, full in 180s: denies, retry after 60s") ||
		!strings.Contains(out, "tenant (enforce): does not match: match.headers[0]: the request does not send x-tenant") {
		t.Fatalf("explain: %v\n%s", err, out)
	}

	out, err = floodgateCmd(t, "explain", "--http", "--addr", p.Admin, "--token-file", tokenFile,
		"--path", "/v1/items", "--source", "203.0.113.9", "-H", "x-api-key: k_live_7")
	if err != nil || !strings.HasPrefix(out, "deny (http): denied by keys\n") {
		t.Fatalf("explain --http: %v\n%s", err, out)
	}

	out, err = floodgateCmd(t, "bucket", "get", "--addr", p.Admin, "--token-file", tokenFile, "--policy", "keys", "--key", "k_live_7")
	if err != nil || !strings.Contains(out, "(header:x-api-key): 0 of 3 left, full in 180s") {
		t.Fatalf("bucket get: %v\n%s", err, out)
	}
	out, err = floodgateCmd(t, "bucket", "add", "1", "--addr", p.Admin, "--token-file", tokenFile, "--policy", "keys", "--key", "k_live_7")
	if err != nil || !strings.HasPrefix(out, "add 1 by alice: keys ") || !strings.Contains(out, "1 of 3 left") {
		t.Fatalf("bucket add: %v\n%s", err, out)
	}
	if resp := p.Check(t, req); !isAllowed(resp) {
		t.Fatalf("the request after the add was denied: %v", resp)
	}
	if isAllowed(p.Check(t, req)) {
		t.Error("the one token added paid two requests")
	}
	out, err = floodgateCmd(t, "bucket", "reset", "--addr", p.Admin, "--token-file", tokenFile, "--policy", "keys", "--key", "k_live_7", "--json")
	if err != nil || !strings.Contains(out, `"remaining": 3`) || !strings.Contains(out, `"op": "reset"`) {
		t.Fatalf("bucket reset --json: %v\n%s", err, out)
	}

	// The rate limit service: two requests of two a minute, then explain.
	if out, err := floodgateCmd(t, "check", "--addr", p.GRPC, "--rls", "--domain", "edge", "--descriptor", "api_key=k", "--count", "2"); err != nil {
		t.Fatalf("check --rls: %v\n%s", err, out)
	}
	out, err = floodgateCmd(t, "explain", "--addr", p.Admin, "--token-file", tokenFile, "--rls", "--domain", "edge", "--descriptor", "api_key=k", "--descriptor", "other=x")
	if err != nil || !strings.HasPrefix(out, "deny (ratelimit): denied by edge.api_key\n") ||
		!strings.Contains(out, "api_key=k: limit edge.api_key (2 per minute), take 1, identity ") ||
		!strings.Contains(out, "0 of 2 left, full in 60s: denies, retry after 30s") ||
		!strings.Contains(out, "other=x: no limit") {
		t.Fatalf("explain --rls: %v\n%s", err, out)
	}

	// A wrong token changes nothing and says so; the log names who changed what.
	os.WriteFile(filepath.Join(filepath.Dir(tokenFile), "wrong"), []byte("alice:wrong-0123456789abcdef\n"), 0o600)
	out, err = floodgateCmd(t, "bucket", "set", "0", "--addr", p.Admin, "--token-file", filepath.Join(filepath.Dir(tokenFile), "wrong"), "--policy", "keys", "--key", "k_live_7")
	if err == nil || !strings.Contains(out, "401 Unauthorized: the token is not one of admin_api.token_file's") {
		t.Errorf("a wrong token: %v\n%s", err, out)
	}
	if line, ok := p.LogLine("admin API: bucket adjusted"); !ok || line["by"] != "alice" || line["op"] != "add" || line["policy"] != "keys" {
		t.Errorf("the adjustment's log line: %v", line)
	}
	m := metrics(t, p)
	for _, want := range []string{
		`floodgate_admin_adjustments_total{op="add",policy="keys"} 1`,
		`floodgate_admin_adjustments_total{op="reset",policy="keys"} 1`,
		`floodgate_admin_explains_total{door="check"} 1`,
		`floodgate_admin_explains_total{door="ratelimit"} 1`,
		`floodgate_admin_unauthorized_total{reason="wrong_token"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "floodgate_admin"))
		}
	}
	if strings.Contains(p.Output(), "k_live_7") || strings.Contains(p.Output(), adminToken) {
		t.Error("an API key or the admin token reached the log")
	}
}

// Without admin_api the admin port's /v1/ paths are 404, whatever token.
func TestTheAdminAPIIsOffByDefault(t *testing.T) {
	p := startFloodgate(t, "listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\n"+
		"policies:\n  - name: a\n    key: [client_ip]\n    capacity: 3\n    refill_per_second: 1\n")
	for _, path := range []string{"/v1/buckets/a?key=10.0.0.1", "/v1/explain"} {
		req, _ := http.NewRequest("GET", "http://"+p.Admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
}

// The API follows reloads: a policy a reload adds is there to read, and a
// reload that adds admin_api turns the API on.
func TestTheAdminAPIFollowsAReload(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600)
	cfgPath := filepath.Join(dir, "floodgate.yaml")
	base := "listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nreload: {watch: false}\n" +
		"policies:\n  - name: a\n    key: [client_ip]\n    capacity: 3\n    refill_per_second: 1\n"
	os.WriteFile(cfgPath, []byte(base), 0o600)
	p := startCommand(t, "serve", "--config", cfgPath)
	get := func(policy string) (string, error) {
		return floodgateCmd(t, "bucket", "get", "--addr", p.Admin, "--token-file", tokenFile, "--policy", policy, "--key", "10.0.0.1")
	}
	if out, err := get("a"); err == nil || !strings.Contains(out, "404 Not Found: the admin API is off") {
		t.Fatalf("before the reload: %v\n%s", err, out)
	}
	os.WriteFile(cfgPath, []byte(base+"  - name: b\n    key: [client_ip]\n    capacity: 7\n    refill_per_second: 1\n"+
		"admin_api: {token_file: "+tokenFile+"}\n"), 0o600)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the reload", func() bool { _, ok := p.LogLine("reloaded"); return ok })
	if out, err := get("b"); err != nil || !strings.Contains(out, "b ") || !strings.Contains(out, "(client_ip): 7 of 7 left, full") {
		t.Errorf("after the reload: %v\n%s", err, out)
	}
}

// TestAnOperatorGivesAQuotaCallerMoreThisMonthWithOneCommand: on the built
// binary and a real Redis, a caller denied by a monthly quota; `floodgate
// bucket get` prints the quota's window, `floodgate bucket add 500` gives
// 500 more requests this month (beyond the limit of 2), the next Check
// passes, and `floodgate explain` says the quota would pay.
func TestAnOperatorGivesAQuotaCallerMoreThisMonthWithOneCommand(t *testing.T) {
	srv := redistest.Start(t)
	cfg, tokenFile := adminConfig(t, srv.Addr)
	p := startFloodgate(t, cfg+`  - name: monthly
    match: {path_prefix: /v1/}
    key: [header:x-api-key]
    quota: {limit: 2, period: month, timezone: Europe/Berlin}
`)
	req := request(t, "/v1/items", "203.0.113.9", "x-api-key: k_live_q")
	for i := 0; i < 2; i++ {
		if !isAllowed(p.Check(t, req)) {
			t.Fatalf("request %d of 2 denied", i+1)
		}
	}
	if isAllowed(p.Check(t, req)) {
		t.Fatal("the 3rd request on a monthly quota of 2 passed")
	}
	admin := []string{"--addr", p.Admin, "--token-file", tokenFile, "--policy", "monthly", "--key", "k_live_q"}
	out, err := floodgateCmd(t, append([]string{"bucket", "get"}, admin...)...)
	if err != nil || !strings.Contains(out, "(header:x-api-key): quota: 0 of 2 left this month, window ") || !strings.Contains(out, "(Europe/Berlin), ends in ") {
		t.Fatalf("bucket get: %v\n%s", err, out)
	}
	out, err = floodgateCmd(t, append([]string{"bucket", "add", "500"}, admin...)...)
	if err != nil || !strings.HasPrefix(out, "add 500 by alice: monthly ") || !strings.Contains(out, "quota: 500 of 2 left this month") {
		t.Fatalf("bucket add: %v\n%s", err, out)
	}
	if resp := p.Check(t, req); !isAllowed(resp) {
		t.Fatalf("the request after the add was denied: %v", resp)
	}
	out, err = floodgateCmd(t, "explain", "--addr", p.Admin, "--token-file", tokenFile,
		"--path", "/v1/items", "--source", "203.0.113.9", "-H", "x-api-key: k_live_q")
	// keys has spent its 3 tokens: it denies, and the quota would pay.
	if err != nil || !strings.HasPrefix(out, "deny (check): denied by keys\n") || !strings.Contains(out, "monthly (enforce): key header:x-api-key, identity ") ||
		!strings.Contains(out, "quota: 499 of 2 left this month, window ") || !strings.Contains(out, "(Europe/Berlin), ends in ") || !strings.HasSuffix(out, "s: pays\n") {
		t.Fatalf("explain: %v\n%s", err, out)
	}
	out, err = floodgateCmd(t, append([]string{"bucket", "get", "--json"}, admin...)...)
	if err != nil || !strings.Contains(out, `"period": "month"`) || !strings.Contains(out, `"timezone": "Europe/Berlin"`) || !strings.Contains(out, `"window_end": "`) {
		t.Fatalf("bucket get --json: %v\n%s", err, out)
	}
}
