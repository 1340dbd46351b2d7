package rlqs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestABrokenStreamIsReopenedAtTheNextReport: the server goes; the stream
// closes (onRemoteClose), reports while nothing listens are dropped
// (onSendReportsTimer: the stream cannot start), and the first report once
// the server is back opens a new stream, answered with the assignment.
func TestABrokenStreamIsReopenedAtTheNextReport(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	e := r.envoy(EnvoyOptions{})
	e.Request(tenant1)
	settle(t, e)
	r.srv.Stop()
	redistest.Eventually(t, 5*time.Second, "the stream closed", func() error {
		if e.Stats().Open {
			return context.DeadlineExceeded
		}
		return nil
	})
	if e.Report() {
		t.Error("a report with no server to open a stream on was sent")
	}
	if st := e.Stats(); st.Dropped != 1 {
		t.Errorf("%d reports dropped, want 1", st.Dropped)
	}
	r.listen(r.addr)
	redistest.Eventually(t, 10*time.Second, "a report on a new stream", func() error {
		if !e.Report() {
			return context.DeadlineExceeded
		}
		return nil
	})
	settle(t, e)
	if st := e.Stats(); st.Streams != 2 || !st.Open {
		t.Errorf("%+v: want a second stream, open", st)
	}
	if got := e.Assignment(tenant1); got != "token_bucket max 10, 100 per 1s (100/s), ttl 15s" {
		t.Errorf("after the stream was reopened: %q", got)
	}
}

// TestAnAssignmentNotRefreshedExpires: an Envoy whose reports go
// unanswered for the TTL (three report intervals) falls back to its
// no_assignment_behavior (allow all, by default).
func TestAnAssignmentNotRefreshedExpires(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 1), rigOptions{})
	e := r.envoy(EnvoyOptions{})
	e.Request(tenant1)
	settle(t, e)
	r.clock.Advance(14 * time.Second)
	if e.Assignment(tenant1) == "default" {
		t.Fatal("expired before its TTL")
	}
	r.clock.Advance(time.Second)
	if got := e.Assignment(tenant1); got != "default" {
		t.Errorf("after 15 s without an answer: %q, want the default", got)
	}
	for range 10 {
		if !e.Request(tenant1) {
			t.Fatal("the default (no_assignment_behavior unset) denied")
		}
	}
}

// TestAStoppingReplicaEndsItsStreams: once serve stops (the door's Run
// ends, after the drain delay) every stream ends with UNAVAILABLE, and a
// new one is refused, so that graceful stop is not held by them and each
// Envoy reopens its stream elsewhere at its next report.
func TestAStoppingReplicaEndsItsStreams(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	e := r.envoy(EnvoyOptions{})
	e.Request(tenant1)
	settle(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.door.Run(ctx); close(done) }()
	cancel()
	<-done
	redistest.Eventually(t, 5*time.Second, "the stream ended", func() error {
		if e.Stats().Open {
			return context.DeadlineExceeded
		}
		return nil
	})
	if err := e.Stats().Err; status.Code(err) != codes.Unavailable {
		t.Errorf("the stream ended with %v, want UNAVAILABLE", err)
	}
	before := e.Stats().Streams
	e.Report()
	redistest.Eventually(t, 5*time.Second, "the new stream ended", func() error {
		if st := e.Stats(); st.Streams <= before || st.Open {
			return fmt.Errorf("streams %d (before %d), open %v", st.Streams, before, st.Open)
		}
		return nil
	})
	if err := e.Stats().Err; status.Code(err) != codes.Unavailable {
		t.Errorf("a new stream: %v, want UNAVAILABLE", err)
	}
}
