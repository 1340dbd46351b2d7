package rls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAnEmptyDirectoryConfiguresNoDomain: the directory of an optional
// ConfigMap that does not exist yet is mounted empty; it loads as no
// domain (and a ConfigMap's dot entries are no file), while a path that
// does not exist stays an error.
func TestAnEmptyDirectoryConfiguresNoDomain(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "..data"), 0o755)
	os.WriteFile(filepath.Join(dir, "README"), []byte("not a limit"), 0o644)
	cfg, err := Load(dir)
	if err != nil || len(cfg.Domains()) != 0 || cfg.Select("edge", []Entry{{"k", "v"}}) != nil {
		t.Fatalf("Load(an empty directory): %v, %v", cfg, err)
	}
	if _, err := Load(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "absent")) || strings.Contains(err.Error(), "rls.config") {
		t.Fatalf("Load(an absent path): %v, want an error naming the path (and not the setting, which its caller names)", err)
	}
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644)
	if cfg, err := Load(dir); err != nil || strings.Join(cfg.Domains(), ",") != "edge" {
		t.Fatalf("Load once a file is there: %v, %v", cfg, err)
	}
}
