package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate/floodgate/cmd/floodgate/buildtest"
)

// binary is the floodgate command built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	var err error
	if binary, err = (buildtest.Build{}).Path(); err != nil {
		fmt.Fprintln(os.Stderr, "building floodgate:", err)
		os.Exit(1)
	}
	os.Exit(buildtest.Main(m))
}

// proc is a running floodgate process.
type proc struct {
	cmd     *exec.Cmd
	grpc    string
	admin   string
	client  authv3.AuthorizationClient
	mu      sync.Mutex
	logs    []string
	done    chan struct{} // closed when the process has exited
	exitErr error         // the exit status, once done is closed
	waited  bool          // the test saw the exit (through wait)
}

// startFloodgate runs `floodgate serve --config` on cfg (YAML) and waits for
// its "serving" log line, which names the addresses it bound.
func startFloodgate(t *testing.T, cfg string, extra ...string) *proc {
	t.Helper()
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return startCommand(t, append([]string{"serve", "--config", path}, extra...)...)
}

// startCommand runs floodgate with args, waits for its "serving" line and
// stops it when the test ends.
func startCommand(t *testing.T, args ...string) *proc {
	t.Helper()
	p, serving := launch(t, args...)
	t.Cleanup(func() { p.stop(t) })
	select {
	case m := <-serving:
		p.grpc, _ = m["grpc"].(string)
		p.admin, _ = m["admin"].(string)
	case <-p.done:
		p.waited = true
		t.Fatalf("floodgate exited before serving: %v\n%s", p.exitErr, p.output())
	case <-time.After(15 * time.Second):
		t.Fatalf("floodgate did not report serving within 15s\n%s", p.output())
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.client = authv3.NewAuthorizationClient(conn)
	return p
}

// launch starts floodgate with args, collecting its output; serving
// receives its "serving" log line.
func launch(t testing.TB, args ...string) (*proc, <-chan map[string]any) {
	p := &proc{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	stdout, _ := p.cmd.StdoutPipe()
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
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
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	return p, serving
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.logs, "\n")
}

// wait waits up to d for the process to exit and returns its exit status;
// exited is false when it is still running.
func (p *proc) wait(d time.Duration) (err error, exited bool) {
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

// stop sends SIGTERM and requires a clean exit (status 0) within 15s. A
// process that has already exited is not signalled: if no test saw that
// exit, a failed one is reported as what it was.
func (p *proc) stop(t testing.TB) {
	select {
	case <-p.done:
		if !p.waited && p.exitErr != nil {
			t.Errorf("floodgate exited on its own with %v\n%s", p.exitErr, p.output())
		}
		p.waited = true
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	err, ok := p.wait(15 * time.Second)
	switch {
	case !ok:
		p.cmd.Process.Kill()
		t.Errorf("floodgate did not exit within 15s of SIGTERM\n%s", p.output())
	case err != nil:
		t.Errorf("floodgate exited with %v after SIGTERM\n%s", err, p.output())
	}
}

func (p *proc) check(t *testing.T, req *authv3.CheckRequest) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := p.client.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check: RPC error %v (a decision must never be an RPC error)", err)
	}
	if err := resp.ValidateAll(); err != nil {
		t.Fatalf("response fails validation: %v", err)
	}
	return resp
}

func loadFixture(t *testing.T, name string) *authv3.CheckRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "extauthz", "testdata", "envoy", name))
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{}
	if err := protojson.Unmarshal(b, req); err != nil {
		t.Fatal(err)
	}
	return req
}

func hdr(resp *authv3.CheckResponse, name string) string {
	for _, h := range append(resp.GetOkResponse().GetResponseHeadersToAdd(), resp.GetDeniedResponse().GetHeaders()...) {
		if h.GetHeader().GetKey() == name {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

func isAllowed(resp *authv3.CheckResponse) bool { return resp.GetStatus().GetCode() == 0 }

// recordTB is a testing.TB that keeps its errors, so a test can check what
// a helper reports.
type recordTB struct {
	testing.TB
	errs []string
}

func (r *recordTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestTheProcessHelperReportsAnEarlyExitAsItWas: a floodgate that exited on
// its own (here: its config file is missing) is reported as exited with its
// status, at once, not as "did not exit within 15s of SIGTERM".
func TestTheProcessHelperReportsAnEarlyExitAsItWas(t *testing.T) {
	p, _ := launch(t, "serve", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	<-p.done // not through wait: as if no test had looked
	rec := &recordTB{TB: t}
	p.stop(rec)
	if len(rec.errs) != 1 || !strings.HasPrefix(rec.errs[0], "floodgate exited on its own with exit status 1") {
		t.Fatalf("stop reported %q, want one error saying it exited on its own with exit status 1", rec.errs)
	}
	p.stop(rec) // a second stop (the cleanup's, say) neither waits nor repeats the report
	if _, exited := p.wait(0); !exited || len(rec.errs) != 1 {
		t.Fatalf("after a second stop: %q", rec.errs)
	}
}
