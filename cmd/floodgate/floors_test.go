package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFloorsRunOneWay holds the layout docs/contributing.md's table "The
// floors" draws, read from the table itself so that the two cannot drift:
// every package of the module is listed in exactly one floor, every package
// the table lists exists, and every package (its tests included) imports
// only packages of its own floor or below. Beside the floors: limiter/ (the
// bucket, its stores and the decide step) and extauthz/ are importable from
// outside the module, so neither they nor their tests import anything under
// internal/; no library imports a command; the rate limit service and
// Envoy's ext_authz API know nothing of each other.
func TestFloorsRunOneWay(t *testing.T) {
	root := filepath.Join("..", "..")
	entries := readFloors(t, filepath.Join(root, "docs", "contributing.md"))
	pkgs := listPackages(t, root)
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}

	floorOf := map[string]floor{}
	used := map[int]bool{} // entries (by index) that name a package
	for _, p := range pkgs {
		var in []int
		for i, e := range entries {
			if e.matches(p.path) {
				in = append(in, i)
			}
		}
		switch len(in) {
		case 0:
			t.Errorf("%s is in no floor of docs/contributing.md's table (## The floors): add it at the floor its imports show", p.path)
		case 1:
			floorOf[p.path] = entries[in[0]].floor
		default:
			var where []string
			for _, i := range in {
				where = append(where, fmt.Sprintf("`%s` (floor %s)", entries[i].pattern, entries[i].floor))
			}
			t.Errorf("%s is listed more than once in docs/contributing.md's floors: %s", p.path, strings.Join(where, ", "))
		}
		for _, i := range in {
			used[i] = true
		}
	}
	for i, e := range entries {
		if !used[i] {
			t.Errorf("docs/contributing.md lists `%s` at floor %s, but go list finds no such package", e.pattern, e.floor)
		}
	}

	for _, p := range pkgs {
		own, ok := floorOf[p.path]
		if !ok {
			continue // reported above
		}
		check := func(imports []string, what string) {
			for _, imp := range imports {
				to, ok := floorOf[imp]
				if ok && to.n > own.n {
					t.Errorf("%s (floor %s) %s %s (floor %s): a package imports only its own floor and those below", p.path, own, what, imp, to)
				}
			}
		}
		check(p.imports, "imports")
		check(p.testImports, "tests import")
	}

	rules := []struct {
		from, to string
		tests    bool // the package's tests are held to it too
	}{
		{"limiter", "internal/", true},
		{"limiter", "extauthz", true},
		{"limiter", "cmd/", true},
		{"extauthz", "internal/", true}, // the rate limit door's rls among them
		{"extauthz", "cmd/", true},
		{"internal/", "cmd/", true},
		{"internal/door/ratelimit/rls", "extauthz", false},
		// A door knows no other door: each is its own folder, and only the
		// list of doors (internal/doors) names them all.
		{"internal/door/check", "internal/door/", false},
		{"internal/door/httpauthz", "internal/door/", false},
		{"internal/door/ratelimit", "internal/door/", false},
		{"internal/door/rlqs", "internal/door/", false},
	}
	for _, r := range rules {
		if !slices.ContainsFunc(pkgs, func(p listedPackage) bool { return under(p.path, r.from) }) {
			t.Errorf("the rule %s must not import %s names no package: a package moved, move the rule with it", r.from, r.to)
		}
	}
	for _, p := range pkgs {
		for _, r := range rules {
			if !under(p.path, r.from) {
				continue
			}
			check := func(imports []string, what string) {
				for _, imp := range imports {
					if under(imp, r.to) && !under(imp, p.path) && !under(imp, r.from) {
						t.Errorf("%s %s %s: %s must not import %s", p.path, what, imp, r.from, r.to)
					}
				}
			}
			check(p.imports, "imports")
			if r.tests {
				check(p.testImports, "tests import")
			}
		}
	}
}

// floor is a row group of the table: "2: the process".
type floor struct {
	n    int
	name string
}

func (f floor) String() string { return fmt.Sprintf("%d: %s", f.n, f.name) }

// floorEntry is one backquoted path of the table's packages column: a
// package, or with a trailing /... a package and every one under it.
type floorEntry struct {
	pattern string
	floor   floor
}

func (e floorEntry) matches(pkg string) bool {
	if base, ok := strings.CutSuffix(e.pattern, "/..."); ok {
		return under(pkg, base)
	}
	return pkg == e.pattern
}

// under reports whether pkg is prefix or below it; a prefix ending in a
// slash is everything below it alone.
func under(pkg, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(pkg, prefix)
	}
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

var (
	floorCell   = regexp.MustCompile(`^(\d+): (.+)$`)
	backquoted  = regexp.MustCompile("`([^`]+)`")
	tableBorder = regexp.MustCompile(`^\|[\s|:-]+\|$`)
)

// readFloors reads the table under "## The floors": a floor cell "N: name"
// begins a floor, an empty one continues the previous; the packages cell
// lists backquoted paths.
func readFloors(t *testing.T, file string) []floorEntry {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## The floors\n")
	if !ok {
		t.Fatalf("%s has no section ## The floors", file)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var (
		entries []floorEntry
		cur     *floor
		header  = true
	)
	for i, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		if header { // the column names
			header = false
			continue
		}
		if tableBorder.MatchString(line) {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("%s, the floors' line %d: %d cells, want floor | packages | job: %s", file, i+1, len(cells), line)
		}
		if f := strings.TrimSpace(cells[0]); f != "" {
			m := floorCell.FindStringSubmatch(f)
			if m == nil {
				t.Fatalf("%s, the floors' line %d: floor %q, want \"N: name\"", file, i+1, f)
			}
			n, _ := strconv.Atoi(m[1])
			cur = &floor{n: n, name: m[2]}
		}
		if cur == nil {
			t.Fatalf("%s, the floors' line %d: a row before any floor: %s", file, i+1, line)
		}
		ms := backquoted.FindAllStringSubmatch(cells[1], -1)
		if len(ms) == 0 {
			t.Fatalf("%s, the floors' line %d: no backquoted package: %s", file, i+1, line)
		}
		for _, m := range ms {
			entries = append(entries, floorEntry{pattern: m[1], floor: *cur})
		}
	}
	if len(entries) == 0 {
		t.Fatalf("%s: no table under ## The floors", file)
	}
	return entries
}

// listedPackage is a package go list reports, paths relative to the module.
type listedPackage struct {
	path                 string
	imports, testImports []string // the module's packages alone
}

// listPackages runs go list on the module, with the build tags make lint
// vets (chaos: e2e's long network-fault cases).
func listPackages(t *testing.T, root string) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-tags", "chaos", "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, "./...")
	cmd.Dir = root
	cmd.Stderr = new(strings.Builder)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, cmd.Stderr)
	}
	const mod = "github.com/floodgate/floodgate"
	ours := func(imports string) []string {
		var ps []string
		for _, imp := range strings.Fields(imports) {
			if p, ok := strings.CutPrefix(imp, mod+"/"); ok {
				ps = append(ps, p)
			}
		}
		return ps
	}
	var pkgs []listedPackage
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("go list: %q", line)
		}
		pkgs = append(pkgs, listedPackage{path: strings.TrimPrefix(parts[0], mod+"/"), imports: ours(parts[1]), testImports: ours(parts[2])})
	}
	return pkgs
}
