// Package peertest is what tests need of the peers Floodgate stands in for
// as Envoy's rate limit service: go-control-plane's own xDS management
// server on a loopback port (Server), serving RateLimitConfig resources as
// Envoy Gateway serves its rate limit Deployment and recording what the
// clients acknowledge; the certificates of a mutual TLS test (CA); the
// peers' files in the Go module cache (Module: envoyproxy/ratelimit's
// examples and settings, Envoy Gateway's testdata) and their YAML read
// back into RateLimitConfig resources (FromYAML); envoyproxy/ratelimit's
// server, built from its module and run (Ratelimit).
package peertest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Server is a running management server.
type Server struct {
	// Addr is its 127.0.0.1:port.
	Addr  string
	Cache cachev3.SnapshotCache

	t     testing.TB
	tls   *tls.Config
	mu    sync.Mutex
	gs    *grpc.Server
	lis   net.Listener
	nonce map[streamNonce]string // a response → the version it carried
	acked map[string]bool        // versions acknowledged
	nack  map[string]string      // versions refused → the error detail's message
	nodes map[string]bool        // node IDs that opened a stream
	md    []map[string][]string
	// Streams counts the streams opened so far.
	streams int
}

// streamNonce names a response: nonces count per stream.
type streamNonce struct {
	stream int64
	nonce  string
}

// StartXDS runs a server on a free loopback port, with TLS when tc is set
// (tc.ClientAuth decides whether clients need a certificate), and stops it
// when the test ends.
func StartXDS(t testing.TB, tc *tls.Config) *Server {
	t.Helper()
	s := &Server{t: t, tls: tc, Cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil),
		nonce: map[streamNonce]string{}, acked: map[string]bool{}, nack: map[string]string{}, nodes: map[string]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = lis.Addr().String()
	s.serve(lis)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(lis net.Listener) {
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.streams++
			if md, ok := metadata.FromIncomingContext(ctx); ok {
				s.md = append(s.md, md)
			}
			return nil
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.nodes[req.GetNode().GetId()] = true
			if req.GetResponseNonce() == "" {
				return nil
			}
			v := s.nonce[streamNonce{id, req.GetResponseNonce()}]
			if d := req.GetErrorDetail(); d != nil {
				s.nack[v] = d.GetMessage()
			} else if req.GetVersionInfo() == v {
				s.acked[v] = true
			}
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.nonce[streamNonce{id, resp.GetNonce()}] = resp.GetVersionInfo()
		},
	}
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	gs := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(context.Background(), s.Cache, cb))
	s.mu.Lock()
	s.gs, s.lis = gs, lis
	s.mu.Unlock()
	go gs.Serve(lis)
}

// Stop stops the server, ending every stream.
func (s *Server) Stop() {
	s.mu.Lock()
	gs := s.gs
	s.mu.Unlock()
	if gs != nil {
		gs.Stop()
	}
}

// Restart stops the server and serves again on the same address, with the
// same snapshots.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var lis net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if lis, err = net.Listen("tcp", s.Addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the port is released asynchronously; nothing to wait on
	}
	if err != nil {
		s.t.Fatalf("peertest: listening again on %s: %v", s.Addr, err)
	}
	s.serve(lis)
}

// Push sets node's snapshot: version, holding configs.
func (s *Server) Push(node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	s.t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.Cache.SetSnapshot(context.Background(), node, snap); err != nil {
		s.t.Fatal(err)
	}
}

// WaitAcked waits up to 15s for a client to acknowledge version.
func (s *Server) WaitAcked(version string) {
	s.t.Helper()
	s.wait(fmt.Sprintf("an ACK of version %s", version), func() bool { return s.acked[version] })
}

// WaitNacked waits up to 15s for a client to refuse version, and returns
// the message it gave.
func (s *Server) WaitNacked(version string) string {
	s.t.Helper()
	var msg string
	s.wait(fmt.Sprintf("a NACK of version %s", version), func() bool {
		m, ok := s.nack[version]
		msg = m
		return ok
	})
	return msg
}

// Acked reports whether version was acknowledged.
func (s *Server) Acked(version string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked[version]
}

// Node reports whether a stream named node.
func (s *Server) Node(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[node]
}

// Streams counts the streams opened so far.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams
}

// Metadata is the gRPC metadata of every stream opened so far.
func (s *Server) Metadata() []map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string][]string(nil), s.md...)
}

func (s *Server) wait(what string, ok func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s.mu.Lock()
		done := ok()
		s.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("peertest: no %s within 15s", what)
		}
		time.Sleep(5 * time.Millisecond) // the callbacks run on the server's goroutines; polled
	}
}
