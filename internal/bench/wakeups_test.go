package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime/trace"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
)

// TestCountWakeupsCountsTheCalls: a trace of this process while it makes
// n calls to an in-process no-op server over a real gRPC connection holds
// exactly n calls, whether gRPC starts a goroutine per call or hands calls
// to its stream workers, and each call wakes at least its caller (waiting
// for the answer) and goes through system calls.
func TestCountWakeupsCountsTheCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []grpc.ServerOption
	}{{"goroutine per call", nil}, {"stream workers", serverOptions()}} {
		t.Run(tc.name, func(t *testing.T) { countCalls(t, tc.opts) })
	}
}

func countCalls(t *testing.T, opts []grpc.ServerOption) {
	addr := extauthztest.Serve(t, noopServer{}, opts...).Target()
	c, err := dial(addr, 1, ClientLean)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	const n = 50
	w := distinct("/b/", 100)
	c.drive(context.Background(), w, cell{conc: 1, window: time.Second, maxCount: 5, rpcTimeout: 5 * time.Second}) // connect first
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	r := c.drive(context.Background(), w, cell{conc: 1, window: 30 * time.Second, maxCount: n, rpcTimeout: 5 * time.Second})
	trace.Stop()
	if r.decisions != n {
		t.Fatalf("%d calls answered, want %d (first error: %v)", r.decisions, n, r.firstErr)
	}
	got, err := countWakeups(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.decisions != n {
		t.Errorf("%d gRPC calls in the trace, want %d", got.decisions, n)
	}
	if got.goWakes < n || got.syscalls < n || got.netParks < 1 {
		t.Errorf("%d goroutine wake-ups, %d syscalls, %d network waits over %d calls; want at least one wake-up and one syscall per call and some network waits", got.goWakes, got.syscalls, got.netParks, n)
	}
	// The last call's goroutine may end after the trace stops.
	if len(got.lifetimes) < n-1 || len(got.netWaits) != len(got.lifetimes) || percentile(got.lifetimes, 50) <= 0 {
		t.Errorf("%d call goroutines followed to their end (p50 %v), %d network waits; want at least %d", len(got.lifetimes), percentile(got.lifetimes, 50), len(got.netWaits), n-1)
	}
	if top := got.topWakers(3); strings.Count(top, ";") != 2 {
		t.Errorf("top wakers %q: want three sites", top)
	}
	if _, err := countWakeups(strings.NewReader("not a trace")); err == nil {
		t.Error("a file that is not a trace was read without an error")
	}
}

// TestWakeupsReadsTraceFiles: floodbench wakeups prints a row per
// file, its concurrency read from run --trace's file name, and refuses a
// file that is not a trace.
func TestWakeupsReadsTraceFiles(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	addr := extauthztest.Serve(t, noopServer{}).Target()
	c, err := dial(addr, 1, ClientLean)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.drive(context.Background(), distinct("/b/", 10), cell{conc: 1, window: 30 * time.Second, maxCount: 5, rpcTimeout: 5 * time.Second})
	trace.Stop()
	dir := t.TempDir()
	file := filepath.Join(dir, "floodgate-b-c16.trace")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Wakeups([]string{file}, &out); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`\n\| floodgate-b-c16\.trace +\| +16 \| +5 \|`).MatchString(out.String()) {
		t.Errorf("no row for the file with concurrency 16 and 5 calls:\n%s", out.String())
	}
	bad := filepath.Join(dir, "bad.trace")
	if err := os.WriteFile(bad, []byte("not a trace"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Wakeups([]string{bad}, &out); err == nil || !strings.Contains(err.Error(), "bad.trace") {
		t.Errorf("a file that is not a trace: %v; want an error naming the file", err)
	}
}
