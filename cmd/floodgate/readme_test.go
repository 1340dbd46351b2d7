package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/config"
)

// TestTheREADMEDemoWorksAsWritten runs the README's demo block: `make run`
// (which must be `floodgate serve` on the embedded default) and the check
// command, comparing the output line by line with what the README shows.
func TestTheREADMEDemoWorksAsWritten(t *testing.T) {
	lines := readmeBlock(t, "demo")
	if lines[0] != "$ make run" {
		t.Fatalf("the demo starts with %q, want $ make run", lines[0])
	}
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^run:\n\t\$\(GO\) run -ldflags "\$\(LDFLAGS\)" \./cmd/floodgate serve$`).Match(makefile) {
		t.Fatal("make run is no longer `go run ./cmd/floodgate serve` (stamped as make build stamps): update this test and the README together")
	}
	if help, _ := exec.Command(binary, "check", "-h").CombinedOutput(); !strings.Contains(string(help), fmt.Sprintf("(default %q)", config.DefaultGRPC)) {
		t.Fatalf("check's --addr no longer defaults to the default listen address %s:\n%s", config.DefaultGRPC, help)
	}
	runCheckExample(t, lines[1], lines[2:])
}

// readmeBlock returns the lines of the README's console block marked
// <!-- NAME:start -->.
func readmeBlock(t *testing.T, name string) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(name) + ":start.*?```console\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatalf("README has no %s block", name)
	}
	return strings.Split(strings.TrimSpace(string(block[1])), "\n")
}

// runCheckExample runs a README line `$ go run ./cmd/floodgate check ...`
// against the embedded default, as make run starts it but listening on
// free ports (a `make run` left running, or anything else on 9191/9192,
// must not fail the test), and compares what it prints with want, line by
// line. The command is pointed at the server with --addr, so the README's
// line must not name one.
func runCheckExample(t *testing.T, line string, want []string) {
	t.Helper()
	cmdLine, ok := strings.CutPrefix(line, "$ go run ./cmd/floodgate ")
	if !ok || !strings.HasPrefix(cmdLine, "check ") {
		t.Fatalf("README line %q is not a floodgate check command", line)
	}
	if strings.Contains(cmdLine, "--addr") {
		t.Fatalf("the README's check command names --addr: %s", cmdLine)
	}
	def := string(config.DefaultYAML())
	cfg := strings.NewReplacer("grpc: "+config.DefaultGRPC, "grpc: 127.0.0.1:0", "admin: "+config.DefaultAdmin, "admin: 127.0.0.1:0").Replace(def)
	if strings.Count(cfg, "127.0.0.1:0") != 2 {
		t.Fatalf("the embedded default no longer lists listen.grpc %s and listen.admin %s:\n%s", config.DefaultGRPC, config.DefaultAdmin, def)
	}
	p := startFloodgate(t, cfg)
	out, err := exec.Command(binary, append(strings.Fields(cmdLine), "--addr", p.GRPC)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdLine, err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(want) {
		t.Fatalf("%s printed %d lines, README shows %d:\n%s", cmdLine, len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got: %s\nwant: %s", i+1, got[i], want[i])
		}
	}
}
