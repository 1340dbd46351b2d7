package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTheREADMEGRPCExampleWorksAsWritten runs the README's gRPC example
// (`floodgate check --grpc`) against the embedded default, served on free
// ports, and compares the output line by line. What it prints is what
// Envoy makes of the denial for a gRPC caller (Utility::prepareLocalReply,
// source/common/http/utility.cc): grpc-status 8 as the denied headers give
// it, not the UNAVAILABLE Envoy would map 429 to.
func TestTheREADMEGRPCExampleWorksAsWritten(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- grpc-demo:start.*?```console\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README has no grpc-demo block")
	}
	lines := strings.Split(strings.TrimSpace(string(block[1])), "\n")
	cmdLine, ok := strings.CutPrefix(lines[0], "$ go run ./cmd/floodgate ")
	if !ok || !strings.Contains(cmdLine, "--grpc") {
		t.Fatalf("first line %q is not a floodgate check --grpc command", lines[0])
	}
	want := lines[1:]

	def, err := os.ReadFile(filepath.Join("config", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer("127.0.0.1:9191", "127.0.0.1:0", "127.0.0.1:9192", `""`).Replace(string(def))
	if cfg == string(def) {
		t.Fatal("the embedded default no longer listens on 127.0.0.1:9191 and :9192: update this test")
	}
	p := startFloodgate(t, cfg)
	out, err := exec.Command(binary, append(strings.Fields(cmdLine), "--addr", p.grpc)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdLine, err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(want) {
		t.Fatalf("example printed %d lines, README shows %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got: %s\nwant: %s", i+1, got[i], want[i])
		}
	}
}
