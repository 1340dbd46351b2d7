package proxytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StartHAProxy runs haproxy in the foreground with the configuration cfg
// returns for its listen address (host:port), written as haproxy.cfg into a
// directory of its own together with files (name → content, e.g. the Lua
// script the configuration loads by a relative path); that directory is its
// working directory. It waits until HAProxy accepts connections and stops it
// when the test ends. The build must have Lua (Debian's has).
func StartHAProxy(t testing.TB, cfg func(listen string) string, files map[string]string) *Proc {
	t.Helper()
	bin := Binary(t, "haproxy", "haproxy")
	if out, err := exec.Command(bin, "-vv").CombinedOutput(); err != nil || !strings.Contains(string(out), "Built with Lua") {
		missing(t, bin+" is built without Lua (`haproxy -vv`): install Debian's haproxy package, which has it")
	}
	return start(t, launch{name: "haproxy", bin: bin, setup: func(dir, listen string) ([]string, []string, error) {
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				return nil, nil, err
			}
		}
		path := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(path, []byte(cfg(listen)), 0o600); err != nil {
			return nil, nil, err
		}
		// -db: foreground, logs to stderr; -c first would only repeat the
		// parse the start itself does.
		return []string{"-db", "-f", path}, nil, nil
	}})
}
