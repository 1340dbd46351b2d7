// Package floodgatetest builds the floodgate command for tests that run it as
// a process (cmd/floodgate's own, the e2e replicas, the image's contents, the
// manifests' metrics, the bench), and runs it: each such package needs the
// binary built from this module, once, sometimes with the flags make build or
// make image pass, and a serve process whose addresses it learns from the
// "serving" log line. This is the one place that does both.
package floodgatetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Package is the floodgate command's import path.
const Package = "github.com/floodgate/floodgate/cmd/floodgate"

// Build is one way of building the command.
type Build struct {
	Args []string // go build arguments before -o, e.g. -trimpath, -ldflags
	Env  []string // added to the environment, e.g. CGO_ENABLED=0
}

var (
	mu    sync.Mutex
	dir   string                // holds every binary built by this test process
	built = map[string]string{} // a Build's key → its binary
)

// Floodgate returns the command built as b, building it the first time this
// test process asks for b; a failed build fails t.
func Floodgate(t testing.TB, b Build) string {
	t.Helper()
	path, err := b.Path()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Path is Floodgate for a TestMain, where no test is running yet.
func (b Build) Path() (string, error) {
	key := strings.Join(b.Args, "\x00") + "\x01" + strings.Join(b.Env, "\x00")
	mu.Lock()
	defer mu.Unlock()
	if path, ok := built[key]; ok {
		return path, nil
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "floodgate-test-bin")
		if err != nil {
			return "", err
		}
		dir = d
	}
	// Named floodgate, as users' binaries are: its messages start with it.
	sub := filepath.Join(dir, strconv.Itoa(len(built)))
	if err := os.Mkdir(sub, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(sub, "floodgate")
	args := append(append([]string{"build"}, b.Args...), "-o", path, Package)
	cmd := exec.Command(Go(), args...)
	cmd.Env = append(os.Environ(), b.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	built[key] = path
	return path, nil
}

// Go is the go command: the one on PATH, else the one in GOROOT (set by
// the go command for the tests it runs).
func Go() string {
	if g, err := exec.LookPath("go"); err == nil {
		return g
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

// Main runs the package's tests and then removes what they built: call it
// from TestMain, as os.Exit(floodgatetest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir, built = "", map[string]string{}
	}
	return code
}
