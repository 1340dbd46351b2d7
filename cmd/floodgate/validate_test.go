package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter/redistest"
)

func TestValidateExitsNonZeroWithFileAndLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("store:\n  backend: etcd\npolicies:\n  - name: a\n    key: [client_ip]\n    capacity: 0\n    refill_per_second: 1\n"), 0o600)
	out, err := exec.Command(binary, "validate", "--config", bad).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("validate on a broken file: %v\n%s", err, out)
	}
	for _, want := range []string{bad + ":2: store.backend: must be redis or memory", bad + ":6: policies[0].capacity: must be a whole number > 0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("policies:\n  - name: a\n    key: [client_ip]\n    capacity: 1\n    refill_per_second: 1\n"), 0o600)
	if out, err := exec.Command(binary, "validate", "--config", good).CombinedOutput(); err != nil {
		t.Fatalf("validate on a good file: %v\n%s", err, out)
	}
	if out, err := exec.Command(binary, "validate").CombinedOutput(); err == nil {
		t.Fatalf("validate without --config succeeded:\n%s", out)
	}
}

func TestServeRefusesAnInvalidConfigAtStart(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("policies: []\n"), 0o600)
	out, err := exec.Command(binary, "serve", "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), bad+":1: policies: no front end is configured") {
		t.Fatalf("serve on an invalid config: %v\n%s", err, out)
	}
}

func TestSIGHUPReloadsPoliciesAndKeepsTheOldOnAnInvalidFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	write := func(capacity string) {
		cfg := "listen: {grpc: \"127.0.0.1:0\", admin: \"\"}\npolicies:\n  - name: a\n    key: [client_ip]\n    capacity: " + capacity + "\n    refill_per_second: 1\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("3")
	p := startCommand(t, "serve", "--config", path)
	limit := func() string { return hdr(p.Check(t, request(t, "/x", "203.0.113.1")), "ratelimit-limit") }
	if got := limit(); got != "3" {
		t.Fatalf("limit %s, want 3", got)
	}
	write("10")
	p.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the reload to take effect", func() bool { return limit() == "10" })

	write("zero") // invalid: the old policies keep serving
	p.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the rejection to be logged", func() bool {
		return strings.Contains(p.Output(), "reload rejected") && strings.Contains(p.Output(), path+":5: policies[0].capacity")
	})
	if got := limit(); got != "10" {
		t.Errorf("after an invalid reload the limit is %s, want the previous 10", got)
	}
}

// waitFor waits, as every test does (redistest.Eventually), until cond
// holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, within, what, func() error {
		if !cond() {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = errors.New("not yet")

// TestASIGHUPRightAfterServingReloads: the "serving" line is the signal
// that floodgate is up, so a SIGHUP sent the moment it appears is a reload,
// never the signal's default action (the process ending). Serve catches
// SIGHUP before it logs the line; before it did, this raced.
func TestASIGHUPRightAfterServingReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	cfg := "listen: {grpc: \"127.0.0.1:0\", admin: \"\"}\npolicies:\n  - {name: a, key: [client_ip], capacity: 3, refill_per_second: 1}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		p := startCommand(t, "serve", "--config", path)
		p.Cmd.Process.Signal(syscall.SIGHUP)
		waitFor(t, 5*time.Second, "the reload to be logged", func() bool { return strings.Contains(p.Output(), "reloaded") })
		if !isAllowed(p.Check(t, request(t, "/x", "203.0.113.1"))) {
			t.Fatalf("run %d: the first request after a SIGHUP was denied", i)
		}
		p.Stop(t)
	}
}

// TestValidateOfflineChecksTheFileWithoutItsSecrets: the shipped
// envoy/floodgate.yaml reads its identity hash secret from
// FLOODGATE_HASH_SECRET, which CI does not have. Plain validate refuses it
// there, naming the setting, as serve would; --offline checks the file
// alone and says what it did not read; a mistake in the file is still one.
func TestValidateOfflineChecksTheFileWithoutItsSecrets(t *testing.T) {
	shipped := filepath.Join("..", "..", "envoy", "floodgate.yaml")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOODGATE_HASH_SECRET=") {
			env = append(env, kv)
		}
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(binary, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := run("validate", "--config", shipped); code != 1 || !strings.Contains(out, "identity.hash_secret_env: environment variable FLOODGATE_HASH_SECRET is not set") {
		t.Errorf("validate without the secret: exit %d\n%s", code, out)
	}
	if out, code := run("validate", "--offline", "--config", shipped); code != 0 || !strings.Contains(out, shipped+": ok (") || !strings.Contains(out, "--offline: no secret or TLS file read") {
		t.Errorf("validate --offline: exit %d\n%s", code, out)
	}
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	os.WriteFile(broken, []byte("identity: {hash_secret_env: FLOODGATE_HASH_SECRET}\npolicies:\n  - {name: a, key: [client_ip], capacity: 0, refill_per_second: 1}\n"), 0o600)
	if out, code := run("validate", "--offline", "--config", broken); code != 1 || !strings.Contains(out, broken+":3: policies[0].capacity") || strings.Contains(out, "FLOODGATE_HASH_SECRET") {
		t.Errorf("validate --offline on a broken file: exit %d\n%s", code, out)
	}
	if out, code := run("validate", "--offline", "--connect", "--config", shipped); code != 2 {
		t.Errorf("validate --offline --connect: exit %d, want 2 (a usage error)\n%s", code, out)
	}
}
