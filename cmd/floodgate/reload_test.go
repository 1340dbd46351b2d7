package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
