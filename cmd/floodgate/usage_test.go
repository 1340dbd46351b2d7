package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestUsageShowsOnlyRequiredFlagsOutsideBrackets: in the usage text, a flag
// outside [...] reads as required; one that has a default (check's --addr
// and --path) must be shown in brackets.
func TestUsageShowsOnlyRequiredFlagsOutsideBrackets(t *testing.T) {
	hasDefault := regexp.MustCompile(`(?m)^  -(\S+).*\n\s+.*\(default [^:]`)
	checked := 0
	for _, line := range strings.Split(usage, "\n") {
		cmd, ok := strings.CutPrefix(line, "  floodgate ")
		if !ok {
			continue
		}
		name := strings.Fields(cmd)[0]
		help, _ := exec.Command(binary, name, "-h").CombinedOutput()
		defaults := map[string]bool{}
		for _, m := range hasDefault.FindAllStringSubmatch(string(help), -1) {
			defaults[m[1]] = true
		}
		for _, flag := range requiredFlags(cmd) {
			checked++
			if defaults[flag] {
				t.Errorf("usage line %q shows --%s as required, but it defaults:\n%s", strings.TrimSpace(line), flag, help)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no required flag in the usage text: the test reads nothing")
	}
}

// requiredFlags lists the --flags of a usage line outside any [...].
func requiredFlags(line string) []string {
	var flags []string
	depth := 0
	for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '|' }) {
		if depth == 0 && strings.HasPrefix(f, "--") {
			flags = append(flags, strings.TrimLeft(f, "-"))
		}
		depth += strings.Count(f, "[") - strings.Count(f, "]")
	}
	return flags
}

// TestMakeRunStampsTheVersionMakeBuildStamps: `make run` logs the version
// `floodgate version` of a make build prints, not "dev".
func TestMakeRunStampsTheVersionMakeBuildStamps(t *testing.T) {
	ldflags := regexp.MustCompile(`-ldflags "([^"]*)"`)
	stamp := func(target string) string {
		out, err := exec.Command("make", "-s", "-n", "-C", "../..", target).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		m := ldflags.FindSubmatch(out)
		if m == nil || !strings.Contains(string(m[1]), "-X main.version=") {
			t.Fatalf("make %s does not stamp the version:\n%s", target, out)
		}
		return string(m[1])
	}
	if build, run := stamp("build"), stamp("run"); run != build {
		t.Errorf("make run stamps %q, make build %q", run, build)
	}
}
