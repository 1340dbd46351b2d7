package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter/redistest"
)

func policyYAML(capacity string) string {
	return "listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nreload: {interval: 100ms}\npolicies:\n  - name: a\n    key: [client_ip]\n    capacity: " + capacity + "\n    refill_per_second: 1\n"
}

func TestAChangedFileIsReloadedWithoutASignal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	os.WriteFile(path, []byte(policyYAML("3")), 0o600)
	p := startCommand(t, "serve", "--config", path)
	limit := func() string { return hdr(p.Check(t, request(t, "/x", "203.0.113.1")), "ratelimit-limit") }
	if limit() != "3" {
		t.Fatal("initial limit")
	}
	os.WriteFile(path, []byte(policyYAML("7")), 0o600)
	waitFor(t, 5*time.Second, "the new file to be served", func() bool { return limit() == "7" })

	os.WriteFile(path, []byte(policyYAML("-1")), 0o600)
	waitFor(t, 5*time.Second, "the broken file to be rejected", func() bool {
		return strings.Contains(p.Output(), path+":6: policies[0].capacity")
	})
	if limit() != "7" {
		t.Error("a broken file replaced the running policies")
	}
	m := metrics(t, p)
	if !strings.Contains(m, "floodgate_config_reload_failures_total 1") || !strings.Contains(m, "floodgate_config_reloads_total 1") {
		t.Errorf("reload metrics:\n%s", grep(m, "floodgate_config"))
	}
	if strings.Count(p.Output(), "reload rejected") != 1 {
		t.Errorf("the same broken file was reported %d times", strings.Count(p.Output(), "reload rejected"))
	}
}

// TestAConfigMapSymlinkSwapIsReloaded lays the file out as kubelet does for
// a ConfigMap volume: floodgate.yaml → ..data/floodgate.yaml, ..data →
// ..<timestamp>/. An update writes a new timestamped directory and renames
// a new ..data symlink over the old: the path Floodgate was given never
// changes, which is what defeats watchers of the file alone.
func TestAConfigMapSymlinkSwapIsReloaded(t *testing.T) {
	dir := t.TempDir()
	version := func(name, capacity string) {
		os.Mkdir(filepath.Join(dir, name), 0o755)
		os.WriteFile(filepath.Join(dir, name, "floodgate.yaml"), []byte(policyYAML(capacity)), 0o644)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_11_29_10_00_00.1", "3")
	path := filepath.Join(dir, "floodgate.yaml")
	if err := os.Symlink(filepath.Join("..data", "floodgate.yaml"), path); err != nil {
		t.Fatal(err)
	}
	p := startCommand(t, "serve", "--config", path)
	limit := func() string { return hdr(p.Check(t, request(t, "/x", "203.0.113.1")), "ratelimit-limit") }
	if limit() != "3" {
		t.Fatal("initial limit")
	}
	version("..2026_11_29_10_05_00.2", "9")
	os.RemoveAll(filepath.Join(dir, "..2026_11_29_10_00_00.1"))
	waitFor(t, 5*time.Second, "the swapped ConfigMap to be served", func() bool { return limit() == "9" })
}

// TestARotatedHashSecretWaitsForARestart: rewriting the file behind
// identity.hash_secret_file and reloading once gave every caller a new
// bucket key, so a caller who had spent their bucket got a full one, with
// nothing logged or counted. The secret is read at start only: the spent
// bucket stays spent, and the reload names and counts identity.
func TestARotatedHashSecretWaitsForARestart(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "hash-secret")
	if err := os.WriteFile(secret, []byte("first-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "floodgate.yaml")
	cfg := "listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nreload: {watch: false}\nidentity: {hash_secret_file: " + secret + "}\n" +
		"policies:\n  - {name: a, key: [client_ip], capacity: 2, refill_per_second: 1/3600}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startCommand(t, "serve", "--config", path)
	caller := request(t, "/x", "203.0.113.7")
	for i := 0; i < 2; i++ {
		if !isAllowed(p.Check(t, caller)) {
			t.Fatalf("request %d of a capacity of 2 was denied", i+1)
		}
	}
	if isAllowed(p.Check(t, caller)) {
		t.Fatal("the third request of a capacity of 2 passed")
	}

	if err := os.WriteFile(secret, []byte("second-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the reload to be logged", func() bool { return strings.Contains(p.Output(), `"msg":"reloaded`) })
	if isAllowed(p.Check(t, caller)) {
		t.Error("after the secret was rotated and reloaded, a caller who had spent their bucket got a full one")
	}
	if !strings.Contains(p.Output(), `"msg":"reloaded the policies; changes to identity take effect on restart only"`) {
		t.Errorf("the reload does not say the secret waits for a restart:\n%s", p.Output())
	}
	if body := metrics(t, p); !strings.Contains(body, `floodgate_config_reload_ignored_total{section="identity"} 1`) {
		t.Errorf("/metrics does not count the ignored identity change:\n%s", grep(body, "floodgate_config"))
	}
}

// TestAReloadAppliesPoliciesWhenTheRedisPasswordFileIsGone: the Redis
// password is read at start only, so a reload does not read it again; a
// password file that has gone (a Secret unmounted, say) once made every
// reload fail, new policies and all.
func TestAReloadAppliesPoliciesWhenTheRedisPasswordFileIsGone(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Config{Password: "s3cret-pass"})
	dir := t.TempDir()
	pw := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(pw, []byte("s3cret-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "floodgate.yaml")
	write := func(capacity int) {
		cfg := fmt.Sprintf("listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nreload: {watch: false}\n"+
			"store: {backend: redis, redis: {addresses: [%q], password_file: %s}}\n"+
			"policies:\n  - {name: a, key: [client_ip], capacity: %d, refill_per_second: 1}\n", srv.Addr, pw, capacity)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(3)
	p := startCommand(t, "serve", "--config", path)
	limit := func() string { return hdr(p.Check(t, request(t, "/x", "203.0.113.9")), "ratelimit-limit") }
	if got := limit(); got != "3" {
		t.Fatalf("limit %q at start, want 3", got)
	}
	if err := os.Remove(pw); err != nil {
		t.Fatal(err)
	}
	write(5)
	p.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the reload to be logged", func() bool { return strings.Contains(p.Output(), "reload") })
	if got := limit(); got != "5" {
		t.Errorf("limit %q after the reload, want the new 5\n%s", got, p.Output())
	}
	if body := metrics(t, p); !strings.Contains(body, "floodgate_config_reload_failures_total 0") {
		t.Errorf("a reload failed:\n%s", grep(body, "floodgate_config"))
	}
}
