package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheConfigurationDocsShowWhatTheCommandsPrint runs every
// `$ floodgate ...` line in the code blocks of docs/configuration.md from
// the repository's root, without FLOODGATE_HASH_SECRET (as in CI), and
// requires the output the page shows under it.
func TestTheConfigurationDocsShowWhatTheCommandsPrint(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOODGATE_HASH_SECRET=") {
			env = append(env, kv)
		}
	}
	type example struct{ args, want []string }
	var examples []*example
	var cur *example // the example whose output the lines are; nil outside one
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "```"):
			cur = nil
		case strings.HasPrefix(line, "$ floodgate "):
			cur = &example{args: strings.Fields(strings.TrimPrefix(line, "$ floodgate "))}
			examples = append(examples, cur)
		case cur != nil:
			cur.want = append(cur.want, line)
		}
	}
	ran := 0
	for _, e := range examples {
		cmd := exec.Command(binary, e.args...)
		cmd.Dir, cmd.Env = root, env
		out, _ := cmd.CombinedOutput()
		if got, want := strings.TrimRight(string(out), "\n"), strings.Join(e.want, "\n"); got != want {
			t.Errorf("floodgate %s prints\n%s\nthe page shows\n%s", strings.Join(e.args, " "), got, want)
		}
		ran++
	}
	if ran < 2 {
		t.Errorf("found %d examples in docs/configuration.md, want the two validate ones", ran)
	}
}
