// Package redistest starts real redis-server processes for tests: on a free
// loopback port, owned by the test, so the test can also pause, kill and
// restart them. It never fakes Redis. A missing redis-server is a test
// failure with the command to fix it, never a silent skip.
//
// Start runs a plain server; StartWith adds a password, ACL users or TLS;
// StartCluster builds a Redis Cluster of several masters; StartSentinel
// watches a master. Every wait is a bounded poll.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
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

// Config describes a server for StartWith. The zero Config is what Start
// runs: no password, plain TCP.
type Config struct {
	// Args are appended to redis-server's arguments.
	Args []string
	// PortArgs, when set, returns more arguments for the port the server is
	// about to use (a cluster node's config file and bus port). It is called
	// again if the port turns out to be taken.
	PortArgs func(port int) []string
	// Password is the default user's password (requirepass).
	Password string
	// ACL lines are written to an ACL file the server loads (--aclfile),
	// e.g. "user app on >secret ~fg:* +@all". Redis ignores requirepass once
	// it loads an ACL file, so with Password the default user's line is
	// written too.
	ACL []string
	// TLS, when set, makes the server speak TLS only (--port 0 --tls-port).
	TLS *TLS
	// ConfFile lines, when set, are written to a config file given as the
	// first argument (Sentinel must have a writable one).
	ConfFile []string
	// FakeClock, when set, runs the server under libfaketime, its clock
	// (TIME, expiry) the one the test sets (NewFakeClock).
	FakeClock *FakeClock
}

// TLS configures a TLS-only server.
type TLS struct {
	CA *CA
	// AuthClients is Redis' tls-auth-clients: "yes" (a client certificate
	// signed by the CA is required), "optional" or "no". Empty means "yes",
	// Redis' own default.
	AuthClients string
}

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	cfg  Config
	Port int
	Addr string // 127.0.0.1:Port
	// Password is the default user's password (empty when none); Client uses it.
	Password string
	// TLSConfig is what a client needs to reach a TLS server (the test CA,
	// and the client certificate when the server asks for one); nil for
	// plain TCP. Client uses it.
	TLSConfig *tls.Config
	cmd       *exec.Cmd
	done      chan struct{}
}

// Start runs redis-server on a free loopback port with persistence off and
// extra appended to its arguments (e.g. "--maxmemory", "10mb"). The process
// is killed when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartWith(t, Config{Args: extra})
}

// StartWith runs redis-server as cfg describes, on a free loopback port,
// and waits until it answers. The process is killed when the test ends.
func StartWith(t testing.TB, cfg Config) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), dir: t.TempDir(), cfg: cfg, Password: cfg.Password}
	if cfg.TLS != nil {
		if cfg.TLS.CA == nil {
			t.Fatal("redistest: Config.TLS needs a CA (NewCA)")
		}
		s.TLSConfig = cfg.TLS.CA.ClientConfig(cfg.TLS.AuthClients != "no" && cfg.TLS.AuthClients != "optional")
	}
	if len(cfg.ACL) > 0 {
		lines := cfg.ACL
		if cfg.Password != "" {
			lines = append([]string{"user default on >" + cfg.Password + " ~* &* +@all"}, lines...)
		}
		writeFile(t, filepath.Join(s.dir, "users.acl"), lines)
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.Port = FreePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.start(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
		if !errors.Is(err, errExited) {
			break // running but not answering: another port will not help
		}
	}
	if cfg.TLS != nil {
		t.Fatalf("redis-server would not serve TLS: %v\n(%s must be built with TLS support: Debian's redis-server package is; a source build needs `make BUILD_TLS=yes`)", err, s.bin)
	}
	t.Fatalf("redis-server would not start: %v", err)
	return nil
}

// errExited marks a server that exited at start (its port taken, say).
var errExited = errors.New("exited at start")

func writeFile(t testing.TB, path string, lines []string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
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

func (s *Server) args() []string {
	var args []string
	if len(s.cfg.ConfFile) > 0 {
		conf := filepath.Join(s.dir, "redis.conf")
		// Written afresh on every start: Sentinel rewrites its file, and a
		// restarted server must not inherit what the last one learnt.
		writeFile(s.t, conf, s.cfg.ConfFile)
		args = append(args, conf)
	}
	port := strconv.Itoa(s.Port)
	if s.cfg.TLS != nil {
		ca := s.cfg.TLS.CA
		auth := s.cfg.TLS.AuthClients
		if auth == "" {
			auth = "yes"
		}
		args = append(args, "--port", "0", "--tls-port", port,
			"--tls-cert-file", ca.ServerCert, "--tls-key-file", ca.ServerKey,
			"--tls-ca-cert-file", ca.CAFile, "--tls-auth-clients", auth)
	} else {
		args = append(args, "--port", port)
	}
	args = append(args, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning",
		"--enable-debug-command", "local")
	if len(s.cfg.ACL) > 0 {
		args = append(args, "--aclfile", filepath.Join(s.dir, "users.acl"))
	} else if s.cfg.Password != "" {
		args = append(args, "--requirepass", s.cfg.Password)
	}
	if s.cfg.PortArgs != nil {
		args = append(args, s.cfg.PortArgs(s.Port)...)
	}
	return append(args, s.cfg.Args...)
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin, s.args()...)
	if s.cfg.FakeClock != nil {
		cmd.Env = append(os.Environ(), s.cfg.FakeClock.env()...)
	}
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
		return fmt.Errorf("%w; log: %s", err, strings.TrimSpace(string(log)))
	}
	return nil
}

// waitReady polls PING until the server answers, the process exits or the
// deadline passes. An error reply (NOAUTH from a server whose password the
// probe lacks) counts as an answer.
func (s *Server) waitReady(done chan struct{}, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, TLSConfig: s.TLSConfig,
		MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d %w", s.Port, errExited)
		default:
		}
		// Wait for the port to listen before go-redis dials it: go-redis
		// logs every refused dial.
		conn, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err = c.Ping(ctx).Err()
			cancel()
			var reply redis.Error
			if err == nil || errors.As(err, &reply) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d not ready after %v: %v", s.Port, within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Client returns a client for the server (with its password and TLS
// settings), closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, TLSConfig: s.TLSConfig})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Log returns what the server has logged so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.Port)))
	return string(b)
}

// Pause stops the process with SIGSTOP and waits until it has stopped
// (PauseProcess): connections stay open, nothing answers.
func (s *Server) Pause() {
	if s.cmd != nil && s.cmd.Process != nil {
		if err := PauseProcess(s.cmd.Process); err != nil {
			s.t.Errorf("pausing redis-server: %v", err)
		}
	}
}

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

// Eventually is how a test waits for a condition: it calls f every 20 ms
// until it returns nil, and fails t with what and f's last error when
// within has passed first. Every test that waits on something (a server
// coming up, a reload served, a failover done) polls through it.
func Eventually(t testing.TB, within time.Duration, what string, f func() error) {
	t.Helper()
	if err := poll(within, func(context.Context) error { return f() }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// poll calls f every few milliseconds until it returns nil or within has
// passed; then it returns f's last error.
func poll(within time.Duration, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := f(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still not so after %v: %w", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CommandStat is one command's counters in INFO commandstats: every call,
// and those that failed (a NOSCRIPT answer is a failed EVALSHA).
type CommandStat struct{ Calls, Failed int64 }

// CommandStats reads INFO commandstats from c, by command name in lower
// case (evalsha, eval, ...).
func CommandStats(t testing.TB, c *redis.Client) map[string]CommandStat {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var s CommandStat
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.Calls = n
			case "failed_calls":
				s.Failed = n
			}
		}
		stats[name] = s
	}
	return stats
}

// RefusedAddr returns a loopback address where nothing listens and
// nothing can start listening while the test runs: a socket bound to it
// and never put to listen, so a connection is refused at once. (A port
// freed by a killed server can be taken by another test's server running
// in parallel; this one cannot.)
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
