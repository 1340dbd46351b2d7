package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// replayArgs turns a documented command line into run's arguments, with the
// repository's paths made relative to this package.
func replayArgs(t *testing.T, line string) []string {
	t.Helper()
	cmd, ok := strings.CutPrefix(line, "$ go run ./cmd/floodgate ")
	if !ok {
		t.Fatalf("%q is not a floodgate command", line)
	}
	args := strings.Fields(cmd)
	for i, a := range args {
		if strings.HasPrefix(a, "cmd/") || strings.HasPrefix(a, "internal/") {
			args[i] = filepath.Join("..", "..", a)
		}
	}
	return args
}

// TestTheDocumentedReplayExampleWorksAsWritten runs every command of the
// worked example of floodgate replay in docs/replay.md and compares what it
// prints (standard error, then the table) with what the docs show.
func TestTheDocumentedReplayExampleWorksAsWritten(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "replay.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?s)<!-- replay:start.*?<!-- replay:end -->`).Find(readme)
	if section == nil {
		t.Fatal("docs/replay.md has no replay example")
	}
	blocks := regexp.MustCompile("(?s)```console\n(.*?)```").FindAllSubmatch(section, -1)
	if len(blocks) != 2 {
		t.Fatalf("the replay example has %d console blocks, want 2 (a replay and a comparison)", len(blocks))
	}
	for _, b := range blocks {
		lines := strings.Split(strings.TrimRight(string(b[1]), "\n"), "\n")
		var out bytes.Buffer
		if code := run(context.Background(), replayArgs(t, lines[0]), &out, &out); code != 0 {
			t.Fatalf("%s: exit %d\n%s", lines[0], code, out.String())
		}
		got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		want := lines[1:]
		if len(got) != len(want) {
			t.Errorf("%s printed %d lines, the docs show %d:\n%s", lines[0], len(got), len(want), out.String())
			continue
		}
		for i := range want {
			if strings.TrimRight(got[i], " ") != strings.TrimRight(want[i], " ") {
				t.Errorf("%s, line %d:\n got: %s\nwant: %s", lines[0], i+1, got[i], want[i])
			}
		}
	}
}

// TestReplayCommandLine covers the flags a user can get wrong, and the
// outputs the README does not show.
func TestReplayCommandLine(t *testing.T) {
	const cfg = "../../internal/replay/testdata/example.yaml"
	const log = "../../internal/replay/testdata/example.log"
	html := filepath.Join(t.TempDir(), "report.html")
	compared := filepath.Join(t.TempDir(), "compared.html")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in the output
	}{
		{"without --config it says what is needed", []string{"--log", log}, 2, "--config FILE is required"},
		{"without --log it says what is needed", []string{"--config", cfg}, 2, "--log FILE is required"},
		{"a missing log file is named", []string{"--config", cfg, "--log", "nope.log"}, 1, "nope.log"},
		{"--set names an unknown policy and the known ones", []string{"--config", cfg, "--log", log, "--set", "api.capacity=3"}, 2,
			`no policy named "api" (the configuration has api-per-key)`},
		{"--set refuses a field it cannot set", []string{"--config", cfg, "--log", log, "--set", "api-per-key.cost=3"}, 2, `"cost" cannot be set`},
		{"--set refuses a bad capacity", []string{"--config", cfg, "--log", log, "--set", "api-per-key.capacity=-1"}, 2, "want a whole number > 0"},
		{"--set refuses a bad rate with the configuration's message", []string{"--config", cfg, "--log", log, "--set", "api-per-key.refill_per_second=fast"}, 2,
			"--set api-per-key.refill_per_second=fast: api-per-key.refill_per_second: must be a number > 0"},
		{"--compare needs a file to read again", []string{"--config", cfg, "--log", "-", "--compare", "--set", "api-per-key.capacity=3"}, 2, "give --log a file"},
		{"--compare needs a --set", []string{"--config", cfg, "--log", log, "--compare"}, 2, "at least one --set"},
		{"--set changes the run", []string{"--config", cfg, "--log", log, "--json", "--set", "api-per-key.capacity=100"}, 0, `"capacity": 100`},
		{"--redact hides the callers' keys", []string{"--config", cfg, "--log", log, "--redact"}, 0, "header:x-api-key #"},
		{"--print-log-format prints the headers the policies read", []string{"--config", cfg, "--print-log-format"}, 0, `x-api-key: "%REQ(X-API-KEY)%"`},
		{"--print-log-to - prints Envoy's stdout logger", []string{"--config", cfg, "--print-log-format", "--print-log-to", "-"}, 0, "StdoutAccessLog"},
		{"--print-log-to names the file", []string{"--config", cfg, "--print-log-format", "--print-log-to", "/srv/envoy/replay.log"}, 0, "path: /srv/envoy/replay.log"},
		{"--print-log-to alone says what it goes with", []string{"--config", cfg, "--log", log, "--print-log-to", "-"}, 2, "give both"},
		{"--html writes a report", []string{"--config", cfg, "--log", log, "--html", html}, 0, "api-per-key"},
		{"--compare prints a row per policy and run", []string{"--config", cfg, "--log", log, "--compare", "--set", "api-per-key.capacity=30",
			"--set", "api-per-key.mode=shadow", "--html", compared}, 0, "api-per-key  api-per-key.mode=shadow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(context.Background(), append([]string{"replay"}, tc.args...), &out, &out)
			if code != tc.code || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, want %d; output should contain %q:\n%s", code, tc.code, tc.want, out.String())
			}
			if strings.Contains(tc.name, "redact") && strings.Contains(out.String(), "key-export") {
				t.Errorf("--redact printed an API key:\n%s", out.String())
			}
		})
	}
	// A rotated, compressed log reads as the plain one.
	plain, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	gz := filepath.Join(t.TempDir(), "access.log.gz")
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(plain)
	zw.Close()
	if err := os.WriteFile(gz, zb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if run(context.Background(), []string{"replay", "--config", cfg, "--log", log, "--json"}, &a, io.Discard) != 0 ||
		run(context.Background(), []string{"replay", "--config", cfg, "--log", gz, "--json"}, &b, io.Discard) != 0 || a.String() != b.String() {
		t.Errorf("the .gz log replays differently:\n%s\n%s", a.String(), b.String())
	}

	if b, err := os.ReadFile(html); err != nil || bytes.Count(b, []byte("<svg")) != 1 {
		t.Errorf("--html should write one chart for the one policy (%v)", err)
	}
	if b, err := os.ReadFile(compared); err != nil || bytes.Count(b, []byte("<svg")) != 3 {
		t.Errorf("--compare --html should write a chart per policy and run: 3 (%v)", err)
	}

	// Standard input, --top and --json together.
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stdin := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = stdin }()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--config", cfg, "--log", "-", "--json", "--top", "1"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var res struct {
		Lines    int `json:"lines"`
		Policies []struct {
			TopDenied []struct {
				Caller string `json:"caller"`
			} `json:"top_denied"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.Lines == 0 || len(res.Policies) != 1 || len(res.Policies[0].TopDenied) != 1 {
		t.Errorf("--log - --top 1: %+v", res)
	}
}

// TestReplayNeedsNoProductionHashSecret: a production configuration whose
// identity hash secret is on the servers only (a file or an environment
// variable this machine lacks) replays, with one note on standard error and
// the decisions it would make with a secret, while validate still refuses it.
func TestReplayNeedsNoProductionHashSecret(t *testing.T) {
	const example = "../../internal/replay/testdata/example.yaml"
	const log = "../../internal/replay/testdata/example.log"
	src, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "production.yaml")
	missing := filepath.Join(t.TempDir(), "hash-secret")
	if err := os.WriteFile(cfg, append(src, []byte("identity: {hash_secret_file: "+missing+"}\n")...), 0o600); err != nil {
		t.Fatal(err)
	}

	var vout bytes.Buffer
	if code := run(context.Background(), []string{"validate", "--config", cfg}, &vout, &vout); code == 0 || !strings.Contains(vout.String(), "identity.hash_secret_file") {
		t.Errorf("validate must stay strict: exit %d\n%s", code, vout.String())
	}

	var want, got, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--config", example, "--log", log, "--json"}, &want, io.Discard); code != 0 {
		t.Fatalf("replay of the example: exit %d", code)
	}
	if code := run(context.Background(), []string{"replay", "--config", cfg, "--log", log, "--json", "--compare", "--set", "api-per-key.capacity=30"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("replay with the secret missing: exit %d\n%s", code, stderr.String())
	}
	if n := strings.Count(stderr.String(), "random secret"); n != 1 || !strings.Contains(stderr.String(), "identity.hash_secret_file") || !strings.Contains(stderr.String(), missing) {
		t.Errorf("want the missing secret named once on standard error (%d times):\n%s", n, stderr.String())
	}
	if code := run(context.Background(), []string{"replay", "--config", cfg, "--log", log, "--json"}, &got, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got.String() != want.String() {
		t.Errorf("decisions differ without the secret:\n%s\nwant\n%s", got.String(), want.String())
	}
	var pout, perr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--config", cfg, "--print-log-format"}, &pout, &perr); code != 0 || !strings.Contains(pout.String(), "x-api-key") {
		t.Errorf("--print-log-format with the secret missing: exit %d\n%s%s", code, pout.String(), perr.String())
	}
}

// TestReplayReportsWhatItCouldNotDecide: a far-future line is set aside
// and named while the table stays the log's; a log mostly out of order is
// refused (exit 1, no table); --max-callers says what it left out.
func TestReplayReportsWhatItCouldNotDecide(t *testing.T) {
	const cfg = "../../internal/replay/testdata/example.yaml"
	plain, err := os.ReadFile("../../internal/replay/testdata/example.log")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(plain), "\n")
	write := func(name string, ls []string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(strings.Join(ls, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	replayOf := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"replay", "--config", cfg}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	future := strings.Replace(lines[0], `"start_time":"2026-`, `"start_time":"9999-`, 1)
	code, out, errOut := replayOf("--log", write("future.log", append([]string{future}, lines...)))
	if code != 0 || !strings.Contains(out, "0 late, 1 ahead (set aside)") || !strings.Contains(out, "160 (11.4%)") ||
		!strings.Contains(errOut, "line 1: start_time 9999-") {
		t.Errorf("a year-9999 line on top: exit %d, want the table with 160 denials and the line set aside:\n%s%s", code, errOut, out)
	}

	half := len(lines) / 2
	swapped := append(append([]string{}, lines[half:]...), lines[:half]...)
	code, out, errOut = replayOf("--log", write("swapped.log", swapped), "--reorder-window", "1s")
	if code != 1 || out != "" || !strings.Contains(errOut, "could not be decided in start_time order") || !strings.Contains(errOut, "--reorder-window 1s") {
		t.Errorf("a log mostly out of order: exit %d, want 1, no table and the reason:\n%s%s", code, errOut, out)
	}

	code, out, _ = replayOf("--log", write("plain.log", lines), "--max-callers", "5")
	if code != 0 || !regexp.MustCompile(`, \d+ beyond --max-callers 5 \(not decided`).MatchString(out) {
		t.Errorf("--max-callers 5: exit %d, want the lines left out counted:\n%s", code, out)
	}
	if code, _, errOut = replayOf("--log", write("plain.log", lines), "--max-callers", "-1"); code != 2 || !strings.Contains(errOut, "--max-callers must be >= 0") {
		t.Errorf("--max-callers -1: exit %d\n%s", code, errOut)
	}
}
