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

// TestTheREADMEDemoWorksAsWritten runs the README's demo blocks as a user
// would, one after the other against one server: `make run` (which must be
// `floodgate serve` on the embedded default), the check command, then the
// gRPC example (`floodgate check --grpc`), comparing each output line by
// line with what the README shows. The gRPC example must therefore be
// another caller than the first demo, whose burst is spent. What it prints
// is what Envoy makes of the denial for a gRPC caller
// (Utility::prepareLocalReply, source/common/http/utility.cc): grpc-status
// 8 as the denied headers give it, not the UNAVAILABLE Envoy would map 429
// to.
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
	grpcLines := readmeBlock(t, "grpc-demo")
	if !strings.Contains(grpcLines[0], "--grpc") {
		t.Fatalf("the gRPC example's first line %q is not a floodgate check --grpc command", grpcLines[0])
	}
	p := startDefault(t)
	runCheckExample(t, p, lines[1], lines[2:])
	runCheckExample(t, p, grpcLines[0], grpcLines[1:])
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

// startDefault serves the embedded default, as make run starts it but
// listening on free ports (a `make run` left running, or anything else on
// 9191/9192, must not fail the test).
func startDefault(t *testing.T) *proc {
	t.Helper()
	def := string(config.DefaultYAML())
	cfg := strings.NewReplacer("grpc: "+config.DefaultGRPC, "grpc: 127.0.0.1:0", "admin: "+config.DefaultAdmin, "admin: 127.0.0.1:0").Replace(def)
	if strings.Count(cfg, "127.0.0.1:0") != 2 {
		t.Fatalf("the embedded default no longer lists listen.grpc %s and listen.admin %s:\n%s", config.DefaultGRPC, config.DefaultAdmin, def)
	}
	return startFloodgate(t, cfg)
}

// runCheckExample runs a README line `$ go run ./cmd/floodgate check ...`
// against p and compares what it prints with want, line by line. The
// command is pointed at p with --addr, so the README's line must not name
// one.
func runCheckExample(t *testing.T, p *proc, line string, want []string) {
	t.Helper()
	cmdLine, ok := strings.CutPrefix(line, "$ go run ./cmd/floodgate ")
	if !ok || !strings.HasPrefix(cmdLine, "check ") {
		t.Fatalf("README line %q is not a floodgate check command", line)
	}
	if strings.Contains(cmdLine, "--addr") {
		t.Fatalf("the README's check command names --addr: %s", cmdLine)
	}
	args, err := shellWords(cmdLine)
	if err != nil {
		t.Fatalf("README line %q: %v", line, err)
	}
	out, err := exec.Command(binary, append(args, "--addr", p.GRPC)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdLine, err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(want) {
		t.Fatalf("%s printed %d lines, README shows %d:\n%s", cmdLine, len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s, line %d:\n got: %s\nwant: %s", cmdLine, i+1, got[i], want[i])
		}
	}
}

// TestTheDocumentedConfigurationsValidate runs `floodgate validate` on the
// README's minimal configuration and on the reference in
// docs/configuration.md, so neither ever shows a file the binary refuses.
func TestTheDocumentedConfigurationsValidate(t *testing.T) {
	for _, doc := range []struct{ file, heading string }{
		{"README.md", "## A minimal configuration\n\n"},
		{filepath.Join("docs", "configuration.md"), ""},
	} {
		text, err := os.ReadFile(filepath.Join("..", "..", doc.file))
		if err != nil {
			t.Fatal(err)
		}
		block := regexp.MustCompile("(?s)" + doc.heading + "```yaml\n(.*?)```").FindSubmatch(text)
		if block == nil {
			t.Fatalf("%s has no configuration block", doc.file)
		}
		file := filepath.Join(t.TempDir(), "floodgate.yaml")
		if err := os.WriteFile(file, block[1], 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binary, "validate", "--config", file)
		cmd.Env = append(os.Environ(), "FLOODGATE_HASH_SECRET=docs-test-secret")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), ": ok (") {
			t.Errorf("validate on the configuration in %s: %v\n%s", doc.file, err, out)
		}
	}
}

// shellWords splits a command line as a shell would, for the quoting a
// README command uses: words separated by spaces, single-quoted parts
// taken as they are.
func shellWords(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			word.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case r == '"' || r == '\\' || r == '$' || r == '`':
			return nil, fmt.Errorf("%q needs more of a shell than this test has", r)
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}
