// Package extauthztest serves an ext_authz server (or any gRPC server) to
// tests over a real gRPC connection on loopback, as Envoy reaches
// floodgate, and builds Envoy-shaped CheckRequests: the tests of the
// server, the codec, the rate limit service, replay against serve and the
// failure modes all need them.
package extauthztest

import (
	"net"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Serve serves s on a free 127.0.0.1 port, with opts (floodgate serve's
// codec, say), and returns a connection to it. Both close when t ends.
func Serve(t testing.TB, s authv3.AuthorizationServer, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	gs := grpc.NewServer(opts...)
	authv3.RegisterAuthorizationServer(gs, s)
	return ServeGRPC(t, gs)
}

// ServeGRPC serves gs, with whatever services it has registered, on a free
// 127.0.0.1 port and returns a connection to it. Both close when t ends.
func ServeGRPC(t testing.TB, gs *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
