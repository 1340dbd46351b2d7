package floodgatetest

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Process is a running floodgate.
type Process struct {
	Cmd *exec.Cmd
	// GRPC, HTTP and Admin are the addresses the "serving" line named
	// (Start); HTTP is "" without listen.http.
	GRPC, HTTP, Admin string
	// Conn is a connection to GRPC, for any service floodgate serves, and
	// Client the ext_authz client on it (Start).
	Conn   *grpc.ClientConn
	Client authv3.AuthorizationClient

	mu      sync.Mutex
	logs    []string
	done    chan struct{} // closed when the process has exited
	exitErr error         // the exit status, once done is closed
	waited  bool          // the test saw the exit (Wait or Stop)
}

// Start runs the floodgate binary bin with args (a serve), waits up to 15s
// for its "serving" log line, connects a client to the gRPC address it names
// and stops the process when the test ends (Stop).
func Start(t *testing.T, bin string, args ...string) *Process {
	t.Helper()
	p, serving := launch(t, bin, args...)
	t.Cleanup(func() { p.Stop(t) })
	select {
	case m := <-serving:
		p.GRPC, _ = m["grpc"].(string)
		p.HTTP, _ = m["http"].(string)
		p.Admin, _ = m["admin"].(string)
	case <-p.done:
		p.waited = true
		t.Fatalf("floodgate exited before serving: %v\n%s", p.exitErr, p.Output())
	case <-time.After(15 * time.Second):
		t.Fatalf("floodgate did not report serving within 15s\n%s", p.Output())
	}
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.Conn, p.Client = conn, authv3.NewAuthorizationClient(conn)
	return p
}

// launch starts bin with args, collecting its output (stdout and stderr);
// serving receives its "serving" log line. The caller stops it.
func launch(t testing.TB, bin string, args ...string) (*Process, <-chan map[string]any) {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), done: make(chan struct{})}
	stdout, _ := p.Cmd.StdoutPipe()
	p.Cmd.Stderr = p.Cmd.Stdout
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs = append(p.logs, line)
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "serving" {
				serving <- m
			}
		}
		p.exitErr = p.Cmd.Wait()
		close(p.done)
	}()
	return p, serving
}

// Output is everything the process has written so far, a line each.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

// LogLine returns the first JSON log line whose msg is msg, decoded.
func (p *Process) LogLine(msg string) (map[string]any, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.logs {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			return m, true
		}
	}
	return nil, false
}

// Wait waits up to d for the process to exit and returns its exit status;
// exited is false when it is still running.
func (p *Process) Wait(d time.Duration) (err error, exited bool) {
	select {
	case <-p.done:
	case <-time.After(d):
		select { // both may be ready when d is short: the exit wins
		case <-p.done:
		default:
			return nil, false
		}
	}
	p.waited = true
	return p.exitErr, true
}

// Stop sends SIGTERM and requires a clean exit (status 0) within 15s. A
// process that has already exited is not signalled: if no test saw that
// exit, a failed one is reported as what it was.
func (p *Process) Stop(t testing.TB) {
	select {
	case <-p.done:
		if !p.waited && p.exitErr != nil {
			t.Errorf("floodgate exited on its own with %v\n%s", p.exitErr, p.Output())
		}
		p.waited = true
		return
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	err, ok := p.Wait(15 * time.Second)
	switch {
	case !ok:
		p.Cmd.Process.Kill()
		t.Errorf("floodgate did not exit within 15s of SIGTERM\n%s", p.Output())
	case err != nil:
		t.Errorf("floodgate exited with %v after SIGTERM\n%s", err, p.Output())
	}
}

// Check sends req and requires an answer that validates: a decision is
// never an RPC error.
func (p *Process) Check(t *testing.T, req *authv3.CheckRequest) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := p.Client.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check: RPC error %v (a decision must never be an RPC error)\n%s", err, p.Output())
	}
	if err := resp.ValidateAll(); err != nil {
		t.Fatalf("response fails validation: %v", err)
	}
	return resp
}
