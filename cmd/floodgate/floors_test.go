package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFloorsRunOneWay holds the layout docs/contributing.md draws: every
// package imports only the floors below its own. limiter/ (the bucket, its
// stores and the decide step) and extauthz/ are importable from outside the
// module, so neither they nor their tests import anything under internal/;
// no library imports a command; the rate limit service and Envoy's
// ext_authz API know nothing of each other.
func TestFloorsRunOneWay(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/floodgate/floodgate/"
	rules := []struct {
		from, to string
		tests    bool // the package's tests are held to it too
	}{
		{"limiter", "internal/", true},
		{"limiter", "extauthz", true},
		{"limiter", "cmd/", true},
		{"extauthz", "internal/", true},
		{"extauthz", "cmd/", true},
		{"internal/", "cmd/", true},
		{"internal/rls", "extauthz", false},
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 20 {
		t.Fatalf("go list found %d packages:\n%s", len(lines), out)
	}
	for _, line := range lines {
		parts := strings.SplitN(line, "|", 3)
		pkg := strings.TrimPrefix(parts[0], mod)
		for _, r := range rules {
			if !strings.HasPrefix(pkg, r.from) {
				continue
			}
			check := func(imports, what string) {
				for _, imp := range strings.Fields(imports) {
					if strings.HasPrefix(imp, mod+r.to) && !strings.HasPrefix(strings.TrimPrefix(imp, mod), pkg) {
						t.Errorf("%s %s %s: %s must not import %s", pkg, what, imp, r.from, r.to)
					}
				}
			}
			check(parts[1], "imports")
			if r.tests {
				check(parts[2], "tests import")
			}
		}
	}
}
