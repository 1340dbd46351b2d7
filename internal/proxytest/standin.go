package proxytest

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// StandIn is an authorizer that records every authorization request it
// gets and lets each one through (200, no headers), for the recipes' tests
// that pin what a proxy sends and how often it asks: what the door decides
// is tested against the door itself (StartDoor).
type StandIn struct {
	recorder
	addr string
	srv  *http.Server

	mu      sync.Mutex
	paused  chan struct{} // closed by Resume; nil when not paused
	stopped bool
}

// StartStandIn serves a StandIn on a free loopback port until the test
// ends.
func StartStandIn(t testing.TB) *StandIn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &StandIn{addr: l.Addr().String()}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(l)
	t.Cleanup(s.Stop)
	return s
}

// Addr is the stand-in's address.
func (s *StandIn) Addr() string { return s.addr }

// Pause makes the stand-in hold every request without an answer until
// Resume or until the proxy gives up on it; a held request is recorded.
func (s *StandIn) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused == nil {
		s.paused = make(chan struct{})
	}
}

// Resume answers again.
func (s *StandIn) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused != nil {
		close(s.paused)
		s.paused = nil
	}
}

// Stop closes the listener and every connection.
func (s *StandIn) Stop() {
	s.mu.Lock()
	stopped := s.stopped
	s.stopped = true
	s.mu.Unlock()
	if !stopped {
		s.Resume()
		s.srv.Close()
	}
}

func (s *StandIn) serve(w http.ResponseWriter, r *http.Request) {
	s.record(r)
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if paused != nil {
		select {
		case <-paused:
		case <-r.Context().Done():
			return // the proxy gave up: it never learns an answer
		}
	}
	w.WriteHeader(http.StatusOK)
}
