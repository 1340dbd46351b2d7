// Package proxytest puts real proxies in front of an HTTP authorizer in tests:
// nginx and HAProxy from their Debian packages, each started by the test as a
// process of its own in a temporary directory, on a free 127.0.0.1 port, from
// the configuration the repository ships (e2e/nginx, e2e/haproxy) with its
// addresses replaced; Floodgate's HTTP door, the floodgate binary on a
// redis-server of its own (StartDoor); an upstream that records every
// request it sees; a stand-in authorizer that records what a proxy asks;
// and the checks every recipe must pass, seen from the proxy's client.
//
// A missing proxy binary fails the test under CI (the CI variable set) and
// skips it elsewhere, either way with the Debian package that provides it.
// Every wait is a bounded poll.
package proxytest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary returns the path of the proxy binary name, which Debian's package
// pkg installs. When it is missing the test ends: it fails under CI and is
// skipped elsewhere, with the command that installs it.
func Binary(t testing.TB, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	// Debian installs both in /usr/sbin, which a non-root PATH may lack.
	if p := filepath.Join("/usr/sbin", name); isExecutable(p) {
		return p
	}
	missing(t, fmt.Sprintf("%s not found (PATH or /usr/sbin): these tests run the real proxy; install it with `apt-get install %s` (`make test` does this when run as root on Debian/Ubuntu)", name, pkg))
	return ""
}

// missing ends the test for a missing prerequisite: a failure under CI,
// where nothing may be skipped, a skip elsewhere.
func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// FreeAddr returns a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("no free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreeAddrs returns n distinct free loopback addresses, each held until
// all are chosen: FreeAddr called n times may hand the same port back
// twice, and a process given both fails to bind the second.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	out := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("no free loopback port: %v", err)
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out
}

// Read returns the file a recipe's test runs (its shipped configuration),
// ending the test when it cannot be read.
func Read(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Render returns src with each old string of pairs (old, new, old, new, ...)
// replaced by its new one. Every old must occur in src: a shipped file that
// no longer holds an address the test replaces fails here, not later as a
// proxy talking to the wrong port.
func Render(t testing.TB, src string, pairs ...string) string {
	t.Helper()
	if len(pairs)%2 != 0 {
		t.Fatal("proxytest.Render: pairs must come as old, new")
	}
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(src, pairs[i]) {
			t.Fatalf("proxytest.Render: the configuration no longer contains %q: update the test", pairs[i])
		}
		src = strings.ReplaceAll(src, pairs[i], pairs[i+1])
	}
	return src
}

// Proc is one proxy process owned by a test.
type Proc struct {
	// Name is the binary's name, for messages.
	Name string
	// Addr is the 127.0.0.1 address it listens on.
	Addr string
	// Dir is its private directory: configuration, pid file, logs.
	Dir string
	// logs are files in Dir the proxy writes, read by Log.
	logs []string

	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // the exit status, once done is closed
}

// launch describes one start of a proxy: the files to write into its
// directory and its command line, for a listen address.
type launch struct {
	name, bin string
	// setup writes the configuration for listen into dir and returns the
	// arguments to run the binary with (its working directory is dir) and
	// the log files it will write there.
	setup func(dir, listen string) (args, logs []string, err error)
}

// errExited marks a proxy that exited before it listened (its port taken,
// or a bad configuration: the log says which).
var errExited = errors.New("exited before listening")

// start runs l on a free port, retrying on another port when the process
// exits at once (the port was taken in the meantime), and waits until it
// accepts connections. The process is stopped when the test ends.
func start(t testing.TB, l launch) *Proc {
	t.Helper()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		p := &Proc{Name: l.name, Addr: FreeAddr(t), Dir: t.TempDir()}
		var args []string
		if args, p.logs, err = l.setup(p.Dir, p.Addr); err != nil {
			t.Fatalf("%s: %v", l.name, err)
		}
		if err = p.run(l.bin, args); err == nil {
			t.Cleanup(p.Stop)
			return p
		}
		if !errors.Is(err, errExited) {
			break
		}
	}
	t.Fatalf("%s would not start: %v", l.name, err)
	return nil
}

func (p *Proc) run(bin string, args []string) error {
	p.out = &syncBuffer{}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = p.Dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Its own process group: a worker left behind by a killed master is
	// still ours to end (Stop signals the group).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s on %s %w (%v)\n%s", p.Name, p.Addr, errExited, p.err, p.Log())
		default:
		}
		c, err := net.DialTimeout("tcp", p.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return fmt.Errorf("%s not listening on %s after 10s: %v\n%s", p.Name, p.Addr, err, p.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Log returns what the proxy has printed and written to its log files so far.
func (p *Proc) Log() string {
	var b strings.Builder
	b.WriteString(p.out.String())
	for _, f := range p.logs {
		if data, err := os.ReadFile(filepath.Join(p.Dir, f)); err == nil && len(data) > 0 {
			fmt.Fprintf(&b, "--- %s\n%s", f, data)
		}
	}
	return b.String()
}

// Stop ends the proxy and every process it started (SIGTERM to its process
// group, SIGKILL after 5s) and waits for it. Stopping twice is harmless.
func (p *Proc) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	pgid := -p.cmd.Process.Pid
	syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	// Workers exit with their master; this only reaches one that did not.
	syscall.Kill(pgid, syscall.SIGKILL)
	p.cmd = nil
}

// syncBuffer collects a process's output from the goroutines os/exec runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
