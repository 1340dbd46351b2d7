// Package redistest starts real redis-server processes for tests: on a free
// loopback port, owned by the test, so the test can also pause, kill and
// restart them. It never fakes Redis. A missing redis-server is a test
// failure with the command to fix it, never a silent skip.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary finds redis-server, or fails t with what to install.
func Binary(t testing.TB) string {
	t.Helper()
	return lookPath(t, "redis-server")
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH: these tests need a real Redis >= 7.0; install it with `apt-get install redis-server` (`make test` does this when run as root on Debian/Ubuntu)", name)
	}
	return p
}

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	args []string
	Port int
	Addr string // 127.0.0.1:Port
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs redis-server on a free loopback port with persistence off and
// extra appended to its arguments (e.g. "--cluster-enabled", "yes"). The
// process is killed when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), dir: t.TempDir(), args: extra}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.Port = FreePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.start(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redis-server would not start: %v", err)
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("no free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) start() error {
	args := append([]string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning",
		"--enable-debug-command", "local",
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	logf, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.Port)))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	if err := s.waitReady(done, 10*time.Second); err != nil {
		s.Kill()
		log, _ := os.ReadFile(logf.Name())
		return fmt.Errorf("%v; log: %s", err, strings.TrimSpace(string(log)))
	}
	return nil
}

// waitReady polls PING until the server answers, the process exits or the
// deadline passes.
func (s *Server) waitReady(done chan struct{}, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start", s.Port)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d not ready after %v: %v", s.Port, within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Client returns a client for the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Pause stops the process with SIGSTOP: connections stay open, nothing answers.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused process.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		if err := s.cmd.Process.Signal(sig); err != nil {
			s.t.Errorf("signal %v to redis-server: %v", sig, err)
		}
	}
}

// Kill ends the process at once (SIGKILL) and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server and starts an empty one on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("restart redis-server on port %d: %v", s.Port, err)
}

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}
