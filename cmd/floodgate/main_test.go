package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStrayArgumentsAreRefusedInEveryCommand: `floodgate serve my.yaml`
// once served the embedded default, ignoring my.yaml. Every subcommand
// refuses positional arguments, with a hint where one can be guessed.
func TestStrayArgumentsAreRefusedInEveryCommand(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "floodgate-config")
	if err := os.WriteFile(plain, []byte("policies: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "my.yaml"}, `floodgate serve: unexpected argument "my.yaml": did you mean --config my.yaml?`},
		{[]string{"serve", "--log-format", "console", "conf/fg.yml"}, `floodgate serve: unexpected argument "conf/fg.yml": did you mean --config conf/fg.yml?`},
		{[]string{"validate", "my.yaml"}, `floodgate validate: unexpected argument "my.yaml": did you mean --config my.yaml?`},
		{[]string{"validate", "--config", plain, "extra"}, `floodgate validate: unexpected argument "extra"`},
		{[]string{"check", "/api/items"}, `floodgate check: unexpected argument "/api/items": did you mean --path /api/items?`},
		{[]string{"check", "--count", "2", "now", "--addr", "x:1"}, `floodgate check: unexpected arguments ["now" "--addr" "x:1"]: flags go before any other argument`},
		{[]string{"replay", "--log", "-", "my.yaml"}, `floodgate replay: unexpected argument "my.yaml": did you mean --config my.yaml?`},
		{[]string{"top", "127.0.0.1:9192"}, `floodgate top: unexpected argument "127.0.0.1:9192": did you mean --admin 127.0.0.1:9192?`},
		{[]string{"top", "--once", "--admin", "127.0.0.1:9192", "extra"}, `floodgate top: unexpected argument "extra"`},
		{[]string{"version", "extra"}, `floodgate version: unexpected argument "extra"`},
		{[]string{"help", "serve"}, `floodgate help: unexpected argument "serve"`},
	} {
		// Bounded, should a command start serving after all.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var stdout, stderr bytes.Buffer
		code := run(ctx, tc.args, &stdout, &stderr)
		cancel()
		if code != 2 || strings.TrimSpace(stderr.String()) != tc.want {
			t.Errorf("floodgate %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, stderr.String(), tc.want)
		}
	}
	// A name without a slash or .yaml is taken for --config when it is a
	// file on disk.
	t.Chdir(filepath.Dir(plain))
	var stderr bytes.Buffer
	run(context.Background(), []string{"serve", filepath.Base(plain)}, io.Discard, &stderr)
	if want := "did you mean --config floodgate-config?"; !strings.Contains(stderr.String(), want) {
		t.Errorf("serve with an existing file's name: %q, want %q", stderr.String(), want)
	}
}

// TestOnlyServeHandlesSignals: `check` (like validate) no longer installs a
// handler for SIGINT and SIGTERM, so they stop it as they stop any
// program, even while it waits on a server that never answers.
func TestOnlyServeHandlesSignals(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := lis.Accept(); err == nil {
			accepted <- c // holds the connection open, answering nothing
		}
	}()
	cmd := exec.Command(binary, "check", "--addr", lis.Addr().String(), "--timeout", "60s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("check never connected")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("check after SIGTERM: %v", err)
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Errorf("check after SIGTERM: %v; want it terminated by the signal, not handling it", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("check ignored SIGTERM for 10s")
	}
}

// TestValidateRefusesWhatServeRefuses: `validate` once said ok to Redis
// settings only the Redis client checked, and serve then exited 1.
func TestValidateRefusesWhatServeRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fg.yaml")
	cfg := "store:\n  backend: redis\n  redis:\n    addresses: [\"127.0.0.1:6379\"]\n    prefix: \"fg{x}:\"\npolicies:\n  - {name: a, key: [client_ip], capacity: 1, refill_per_second: 1}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"validate", "serve"} {
		out, err := exec.Command(binary, cmd, "--config", path).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), path+`:5: store.redis.prefix: key prefix "fg{x}:" contains a brace`) {
			t.Errorf("%s: %v\n%s", cmd, err, out)
		}
	}
}

// TestAReloadSaysWhatWaitsForARestart: a reload that changes a section read
// at start only applies the policies, and says (and counts) what it left.
func TestAReloadSaysWhatWaitsForARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	os.WriteFile(path, []byte(policyYAML("3")), 0o600)
	p := startCommand(t, "serve", "--config", path)
	limit := func() string { return hdr(p.Check(t, request(t, "/x", "203.0.113.1")), "ratelimit-limit") }
	if limit() != "3" {
		t.Fatal("initial limit")
	}
	os.WriteFile(path, []byte("runtime: {gogc: 150}\nlog: {level: warn}\n"+policyYAML("4")), 0o600)
	waitFor(t, 5*time.Second, "the new policies to be served", func() bool { return limit() == "4" })
	waitFor(t, 5*time.Second, "the restart-only changes to be logged", func() bool {
		return strings.Contains(p.Output(), `"msg":"reloaded the policies; changes to log, runtime take effect on restart only"`)
	})
	body := metrics(t, p)
	for _, want := range []string{`floodgate_config_reload_ignored_total{section="log"} 1`, `floodgate_config_reload_ignored_total{section="runtime"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
