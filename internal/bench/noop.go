package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/floodgate/floodgate/internal/config"
)

// serverOptions are the gRPC server settings floodgate serve uses with its
// default configuration (cmd/floodgate/serve.go, listen.* defaults): the
// no-op server must differ from Floodgate only in what Check does.
func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(1 << 20),
		grpc.MaxConcurrentStreams(1024),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(config.StreamWorkers),
	}
}

// noopServer allows every request and looks at nothing: the cost of the gRPC
// layer alone, the ceiling any ext_authz server in Go reaches on this machine.
type noopServer struct {
	authv3.UnimplementedAuthorizationServer
}

func (noopServer) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{}}, nil
}

// noopRateLimitServer answers OK to every rate-limit request: the ceiling
// of (r), whose requests and answers differ from ext_authz's.
type noopRateLimitServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (noopRateLimitServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// ServeNoop serves the no-op server on listen until ctx ends. Like floodgate
// serve it logs one JSON line {"msg":"serving","grpc":ADDR} to stdout naming
// the bound address: the line bench waits for.
func ServeNoop(ctx context.Context, listen string, gogc int, stdout io.Writer) error {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	// Floodgate's collector setting too (runtime.gogc, unless GOGC is set):
	// the ceiling runs with the same runtime as the server it is compared to.
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(gogc)
	}
	gs := grpc.NewServer(serverOptions()...)
	authv3.RegisterAuthorizationServer(gs, noopServer{})
	rlsv3.RegisterRateLimitServiceServer(gs, noopRateLimitServer{})
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	line, _ := json.Marshal(map[string]string{"msg": "serving", "grpc": lis.Addr().String()})
	fmt.Fprintf(stdout, "%s\n", line)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	gs.Stop()
	return nil
}
