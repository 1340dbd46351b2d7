package proxytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StartNginx runs nginx with the configuration conf returns for its listen
// address (host:port), in a directory of its own that is nginx's prefix: the
// relative paths of the configuration (pid file, logs, temporary files) land
// there. It waits until nginx accepts connections and stops it when the test
// ends. The build must have ngx_http_auth_request_module (Debian's does).
func StartNginx(t testing.TB, conf func(listen string) string) *Proc {
	t.Helper()
	bin := Binary(t, "nginx", "nginx")
	if out, err := exec.Command(bin, "-V").CombinedOutput(); err != nil || !strings.Contains(string(out), "http_auth_request_module") {
		missing(t, bin+" has no ngx_http_auth_request_module (`nginx -V`): install Debian's nginx package, which is built with it")
	}
	global := "daemon off;"
	if os.Geteuid() == 0 {
		// As root the master switches its workers to nginx's default user
		// (nobody), whose group Debian does not have, and who could not
		// enter the test's directory (0700). The workers stay the test's.
		global += " user root;"
	}
	return start(t, launch{name: "nginx", bin: bin, setup: func(dir, listen string) ([]string, []string, error) {
		path := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(path, []byte(conf(listen)), 0o600); err != nil {
			return nil, nil, err
		}
		// -e: the error log before the configuration is read, which by
		// default is a path under /var/log that a non-root user cannot open.
		return []string{"-p", dir + "/", "-c", path, "-e", filepath.Join(dir, "startup-error.log"), "-g", global},
			[]string{"startup-error.log", "error.log"}, nil
	}})
}
