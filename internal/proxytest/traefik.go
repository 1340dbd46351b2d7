package proxytest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TraefikHarnessEnv names the environment variable that may point at the
// Traefik harness binary; unset, TraefikHarness looks in the repository's
// bin/ (where `make traefik-harness` builds it).
const TraefikHarnessEnv = "FLOODGATE_TRAEFIK_HARNESS"

// TraefikVersion is the Traefik release the harness is built from
// (e2e/traefik/harness/go.mod).
const TraefikVersion = "v3.6.12"

// TraefikHarness returns the path of the harness program that runs
// Traefik's own entry point, routers, middlewares and reverse proxy from a
// static and a dynamic configuration file (e2e/traefik/harness). The
// traefik binary is not packaged for the distribution the tests run on,
// and its full build needs modules the Go module proxy does not serve; its
// packages build, in a module of their own, which takes minutes cold and so
// is done by `make traefik-harness` (a prerequisite of `make test`) before
// the tests run. When the binary is missing the test ends: it fails under
// CI and is skipped elsewhere.
func TraefikHarness(t testing.TB) string {
	t.Helper()
	p := os.Getenv(TraefikHarnessEnv)
	if p == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			t.Fatal("proxytest: cannot locate the repository")
		}
		p = filepath.Join(filepath.Dir(file), "..", "..", "bin", "traefik-harness")
	}
	if !isExecutable(p) {
		missing(t, fmt.Sprintf("the Traefik harness %s is missing: build it with `make traefik-harness` (Traefik %s's packages, a few minutes the first time), or set %s to its path", p, TraefikVersion, TraefikHarnessEnv))
	}
	return p
}

// StartTraefik runs the Traefik harness with the static configuration
// static returns for its listen address (host:port) and the dynamic
// configuration dynamic, written as traefik.yaml and dynamic.yaml into a
// directory of its own, its working directory. It waits until the entry
// point accepts connections and stops it when the test ends. A
// configuration Traefik cannot build (an unknown middleware, a bad rule)
// fails the start, with what the harness printed.
func StartTraefik(t testing.TB, static func(listen string) string, dynamic string) *Proc {
	t.Helper()
	bin := TraefikHarness(t)
	return start(t, launch{name: "traefik", bin: bin, setup: func(dir, listen string) ([]string, []string, error) {
		sp, dp := filepath.Join(dir, "traefik.yaml"), filepath.Join(dir, "dynamic.yaml")
		if err := os.WriteFile(sp, []byte(static(listen)), 0o600); err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(dp, []byte(dynamic), 0o600); err != nil {
			return nil, nil, err
		}
		return []string{"-static", sp, "-dynamic", dp}, nil, nil
	}})
}
