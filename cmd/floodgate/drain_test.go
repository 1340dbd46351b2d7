package main

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDrainDelayKeepsAnsweringWhileReportingNotReady: after SIGTERM with a
// drain_delay, /readyz says 503 at once while Checks are still answered,
// and the process then exits cleanly.
func TestDrainDelayKeepsAnsweringWhileReportingNotReady(t *testing.T) {
	p := startFloodgate(t, `
listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0", drain_delay: 1s}
policies:
  - {name: a, key: [client_ip], capacity: 100, refill_per_second: 1}
`)
	p.Check(t, request(t, "/x", "203.0.113.1"))
	start := time.Now()
	p.Cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 900*time.Millisecond, "/readyz to report 503", func() bool {
		resp, err := http.Get("http://" + p.Admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	if !isAllowed(p.Check(t, request(t, "/x", "203.0.113.1"))) {
		t.Error("a Check during the drain delay was not answered normally")
	}
	err, ok := p.Wait(10 * time.Second)
	if !ok {
		t.Fatal("did not exit")
	}
	if err != nil {
		t.Fatalf("exit: %v", err)
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("exited %v after SIGTERM, before the 1s drain delay", took)
	}
}

// TestOversizedCheckRequestsAreRefusedByTheTransport: listen.max_request_bytes
// bounds a CheckRequest before any work is done on it.
func TestOversizedCheckRequestsAreRefusedByTheTransport(t *testing.T) {
	p := startFloodgate(t, `
listen: {grpc: "127.0.0.1:0", admin: "", max_request_bytes: 8192}
policies:
  - {name: a, key: [client_ip], capacity: 100, refill_per_second: 1}
`)
	if !isAllowed(p.Check(t, request(t, "/x", "203.0.113.1", "x-pad: "+strings.Repeat("a", 4000)))) {
		t.Fatal("a request under the limit was not decided")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := p.Client.Check(ctx, request(t, "/x", "203.0.113.1", "x-pad: "+strings.Repeat("a", 9000)))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 9 KB request against an 8 KiB limit: %v, want ResourceExhausted", err)
	}
}
