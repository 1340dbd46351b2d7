package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/limited"
)

// docBlock returns the body of the fenced block marked <!-- NAME:start -->
// in docs/limited.md.
func docBlock(t *testing.T, name string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "limited.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(name) + ":start.*?```[a-z]*\n(.*?)```").FindSubmatch(doc)
	if block == nil {
		t.Fatalf("docs/limited.md has no %s block", name)
	}
	return string(block[1])
}

// TestTheREADMEShowsTheLimitedExampleAsTheDocsDo: the README's operations
// section carries docs/limited.md's `floodgate top` example (its
// limited-top block), the same block, which
// TestTheLimitedDocsWorkAsWritten runs.
func TestTheREADMEShowsTheLimitedExampleAsTheDocsDo(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "<!-- limited-top:start") {
		t.Fatal("the README's operations section has no limited-top block")
	}
	if got, want := strings.Join(readmeBlock(t, "limited-top"), "\n"), strings.TrimSpace(docBlock(t, "limited-top")); got != want {
		t.Errorf("the README's limited-top block\n%s\ndiffers from docs/limited.md's\n%s", got, want)
	}
}

// TestTheLimitedDocsWorkAsWritten runs docs/limited.md's example on the
// embedded default, as `make run` starts it but on free ports: the check
// command, then `floodgate top --once`, whose table must be the one shown
// (with the real admin address in place of 127.0.0.1:9192), and
// /debug/limited, whose JSON must be the one shown. It also holds the
// stated memory bound to limited.MemoryBytes.
func TestTheLimitedDocsWorkAsWritten(t *testing.T) {
	lines := strings.Split(strings.TrimSpace(docBlock(t, "limited-top")), "\n")
	checkLine, ok := strings.CutPrefix(lines[0], "$ go run ./cmd/floodgate ")
	checkLine, redirected := strings.CutSuffix(checkLine, " >/dev/null")
	if !ok || !redirected || !strings.HasPrefix(checkLine, "check ") || strings.Contains(checkLine, "--addr") {
		t.Fatalf("the docs' first line %q is not a floodgate check command without --addr, its output discarded", lines[0])
	}
	topLine, ok := strings.CutPrefix(lines[1], "$ go run ./cmd/floodgate ")
	if !ok || !strings.HasPrefix(topLine, "top ") || strings.Contains(topLine, "--admin") {
		t.Fatalf("the docs' second line %q is not a floodgate top command without --admin", lines[1])
	}
	if !strings.Contains(lines[2], config.DefaultAdmin) {
		t.Fatalf("the docs' table does not name the default admin address %s: %q", config.DefaultAdmin, lines[2])
	}

	def := string(config.DefaultYAML())
	cfg := strings.NewReplacer("grpc: "+config.DefaultGRPC, "grpc: 127.0.0.1:0", "admin: "+config.DefaultAdmin, "admin: 127.0.0.1:0").Replace(def)
	if strings.Count(cfg, "127.0.0.1:0") != 2 {
		t.Fatalf("the embedded default no longer lists listen.grpc %s and listen.admin %s:\n%s", config.DefaultGRPC, config.DefaultAdmin, def)
	}
	p := startFloodgate(t, cfg)
	if out, err := exec.Command(binary, append(strings.Fields(checkLine), "--addr", p.GRPC)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", checkLine, err, out)
	}
	out, err := exec.Command(binary, append(strings.Fields(topLine), "--admin", p.Admin)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", topLine, err, out)
	}
	got := strings.ReplaceAll(strings.TrimSpace(string(out)), p.Admin, config.DefaultAdmin)
	if want := strings.Join(lines[2:], "\n"); got != want {
		t.Errorf("%s printed\n%s\nthe docs show\n%s", topLine, got, want)
	}

	resp, err := http.Get("http://" + p.Admin + "/debug/limited")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var served, documented any
	if err := json.Unmarshal(body, &served); err != nil {
		t.Fatalf("/debug/limited: %v\n%s", err, body)
	}
	if err := json.Unmarshal([]byte(docBlock(t, "limited-json")), &documented); err != nil {
		t.Fatalf("the docs' JSON does not parse: %v", err)
	}
	if !reflect.DeepEqual(served, documented) {
		t.Errorf("/debug/limited served\n%s\nthe docs show\n%s", body, docBlock(t, "limited-json"))
	}

	doc, _ := os.ReadFile(filepath.Join("..", "..", "docs", "limited.md"))
	bound := limited.MemoryBytes(limited.DefaultOptions())
	if want := fmt.Sprintf("**%d KiB** (%d bytes", (bound+1023)>>10, bound); !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), want) {
		t.Errorf("docs/limited.md does not state the memory bound as %q", want)
	}
}
