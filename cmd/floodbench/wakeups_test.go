package main

import (
	"bytes"
	"context"
	"runtime/trace"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
)

// TestCountWakeupsCountsTheCalls: a trace of this process while it makes
// n calls to an in-process no-op server over a real gRPC connection holds
// exactly n stream goroutines, and each call wakes at least its caller
// (waiting for the answer) and goes through system calls.
func TestCountWakeupsCountsTheCalls(t *testing.T) {
	addr := extauthztest.Serve(t, noopServer{}).Target()
	c, err := dial(addr, 1, clientLean)
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
	if top := got.topWakers(3); strings.Count(top, ";") != 2 {
		t.Errorf("top wakers %q: want three sites", top)
	}
	if _, err := countWakeups(strings.NewReader("not a trace")); err == nil {
		t.Error("a file that is not a trace was read without an error")
	}
}
