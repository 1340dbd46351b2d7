package proxytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StartCaddy runs caddy in the foreground with the Caddyfile conf returns
// for its listen address (host:port), in a directory of its own that is its
// working directory and its HOME, XDG_CONFIG_HOME and XDG_DATA_HOME, so
// that whatever Caddy stores (autosave.json, certificates, locks) lands
// there. It waits until Caddy accepts connections and stops it when the
// test ends. The build must have reverse_proxy's handle_response handlers
// copy_response_headers (Caddy >= 2.5; Debian's 2.6.2 has them).
func StartCaddy(t testing.TB, conf func(listen string) string) *Proc {
	t.Helper()
	bin := Binary(t, "caddy", "caddy")
	if out, err := exec.Command(bin, "list-modules").CombinedOutput(); err != nil || !strings.Contains(string(out), "http.handlers.copy_response_headers") {
		missing(t, bin+" has no http.handlers.copy_response_headers (`caddy list-modules`): install Debian's caddy package (2.6.2) or Caddy >= 2.5")
	}
	// Caddy reads where to store from the environment alone: run it
	// through env(1), which sets those variables and then execs it.
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Fatalf("env(1), which StartCaddy runs caddy through, not found: %v", err)
	}
	return start(t, launch{name: "caddy", bin: envBin, setup: func(dir, listen string) ([]string, []string, error) {
		path := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(path, []byte(conf(listen)), 0o600); err != nil {
			return nil, nil, err
		}
		return []string{"-i", "PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "data"),
			bin, "run", "--config", path, "--adapter", "caddyfile"}, nil, nil
	}})
}
