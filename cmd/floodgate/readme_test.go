package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/cmd/floodgate/config"
)

// TestTheREADMEDemoWorksAsWritten runs the README's demo block: `make run`
// (which must be `floodgate serve` on the embedded default) and the check
// command, comparing the output line by line with what the README shows.
func TestTheREADMEDemoWorksAsWritten(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- demo:start.*?```console\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README has no demo block")
	}
	lines := strings.Split(strings.TrimSpace(string(block[1])), "\n")
	if lines[0] != "$ make run" {
		t.Fatalf("the demo starts with %q, want $ make run", lines[0])
	}
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^run:\n\t\$\(GO\) run \./cmd/floodgate serve$`).Match(makefile) {
		t.Fatal("make run is no longer `go run ./cmd/floodgate serve`: update this test and the README together")
	}
	cmdLine, ok := strings.CutPrefix(lines[1], "$ go run ./cmd/floodgate ")
	if !ok {
		t.Fatalf("second demo line %q is not a floodgate command", lines[1])
	}
	want := lines[2:]

	// The embedded default, as make run starts it, but listening on free
	// ports: a `make run` left running (or anything else on 9191/9192)
	// must not fail the test. The check command is pointed at it with
	// --addr, its default being the default listen address.
	def := string(config.DefaultYAML())
	cfg := strings.NewReplacer("grpc: "+config.DefaultGRPC, "grpc: 127.0.0.1:0", "admin: "+config.DefaultAdmin, "admin: 127.0.0.1:0").Replace(def)
	if strings.Count(cfg, "127.0.0.1:0") != 2 {
		t.Fatalf("the embedded default no longer lists listen.grpc %s and listen.admin %s:\n%s", config.DefaultGRPC, config.DefaultAdmin, def)
	}
	if help, _ := exec.Command(binary, "check", "-h").CombinedOutput(); !strings.Contains(string(help), fmt.Sprintf("(default %q)", config.DefaultGRPC)) {
		t.Fatalf("check's --addr no longer defaults to the default listen address %s:\n%s", config.DefaultGRPC, help)
	}
	if strings.Contains(cmdLine, "--addr") {
		t.Fatalf("the demo's check command names --addr: %s", cmdLine)
	}
	p := startFloodgate(t, cfg)
	out, err := exec.Command(binary, append(strings.Fields(cmdLine), "--addr", p.grpc)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdLine, err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(want) {
		t.Fatalf("demo printed %d lines, README shows %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got: %s\nwant: %s", i+1, got[i], want[i])
		}
	}
}
