package admission

import (
	"context"
	"net"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

// BenchmarkCheckOverLoopback: a 1 KiB Check over loopback gRPC, read by
// gRPC itself (plain) and through a Gate (gated): what the budget costs a
// Check that fits.
func BenchmarkCheckOverLoopback(b *testing.B) {
	for _, gated := range []bool{false, true} {
		name := "plain"
		if gated {
			name = "gated"
		}
		b.Run(name, func(b *testing.B) {
			var gs *grpc.Server
			srv := &checkServer{}
			if gated {
				g := New(Options{Budget: NewBudget(48 << 20), MaxMessage: 32 << 20, Codec: encoding.GetCodecV2("proto"), Wait: DefaultWait})
				gs = grpc.NewServer(g.ServerOptions()...)
				authv3.RegisterAuthorizationServer(g.Registrar(gs), srv)
			} else {
				gs = grpc.NewServer()
				authv3.RegisterAuthorizationServer(gs, srv)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go gs.Serve(lis)
			defer gs.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := authv3.NewAuthorizationClient(conn)
			req := check("/x", 1<<10)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := client.Check(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
