package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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

	startCommand(t, "serve") // the embedded default, exactly as make run starts it
	out, err := exec.Command(binary, strings.Fields(cmdLine)...).CombinedOutput()
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
