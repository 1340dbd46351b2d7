package peertest

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RatelimitBinary builds envoyproxy/ratelimit's server (service_cmd) at
// the Ratelimit version with go install through the Go module proxy, into
// the directory internal/door/ratelimit/rls's differential test uses, so that one build
// serves both (FLOODGATE_RATELIMIT_BIN names a binary instead).
func RatelimitBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("FLOODGATE_RATELIMIT_BIN"); bin != "" {
		return bin
	}
	_, version, _ := strings.Cut(Ratelimit, "@")
	dir := filepath.Join(os.TempDir(), "floodgate-ratelimit-"+version)
	bin := filepath.Join(dir, "service_cmd")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("go", "install", "github.com/envoyproxy/ratelimit/src/service_cmd@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building envoyproxy/ratelimit (go install, needs the Go module proxy once): %v\n%s", err, out)
	}
	return bin
}

// AsRatelimit returns a link named ratelimit to bin, in a directory of
// the test's: run through it, the binary's argv[0] is .../ratelimit, as
// the image's /bin/ratelimit is.
func AsRatelimit(t testing.TB, bin string) string {
	t.Helper()
	link := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// Process is a server started by a test with an environment of its own.
type Process struct {
	Cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

type lockedWriter struct{ p *Process }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// Start runs bin with exactly env as its environment (nothing of the
// test's), collects its output, and stops it (SIGTERM, then a kill) when
// the test ends.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.Cmd.Env = env
	p.Cmd.Stdout, p.Cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.Cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Output is what the process has written so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Wait waits up to d for the process to end.
func (p *Process) Wait(d time.Duration) (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(d):
		return false, nil
	}
}

// Listening reports whether addr accepts a TCP connection now.
func Listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// WaitListening waits up to within for p to accept connections on addr,
// failing the test (with p's output) if it exits or does not.
func (p *Process) WaitListening(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !Listening(addr) {
		if exited, err := p.Exited(); exited {
			t.Fatalf("exited (%v) before listening on %s:\n%s", err, addr, p.Output())
		}
		if time.Now().After(deadline) {
			t.Fatalf("not listening on %s within %v:\n%s", addr, within, p.Output())
		}
		time.Sleep(20 * time.Millisecond) // a process we only see from outside: polled
	}
}

// Healthcheck is one GET of http://addr/healthcheck: its status and body,
// or status 0 when nothing answers.
func Healthcheck(addr string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthcheck")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// WaitHealthy polls addr's /healthcheck until it answers 200 or within
// passes, and returns the last answer: a server that has just bound its
// ports may answer 500 for the moment before it reports itself serving
// (as a readiness probe, which retries, would see).
func WaitHealthy(addr string, within time.Duration) (int, string) {
	deadline := time.Now().Add(within)
	for {
		code, body := Healthcheck(addr)
		if code == http.StatusOK || time.Now().After(deadline) {
			return code, body
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreeAddr is a 127.0.0.1 address with a port no one listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
