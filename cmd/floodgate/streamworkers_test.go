package main

import (
	"context"
	"runtime"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/doors"
)

// stackRecorder answers Check with nothing and keeps the stack of the
// goroutine that ran it.
type stackRecorder struct {
	authv3.UnimplementedAuthorizationServer
	stacks chan string
}

func (s stackRecorder) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	buf := make([]byte, 64<<10)
	s.stacks <- string(buf[:runtime.Stack(buf, false)])
	return &authv3.CheckResponse{}, nil
}

// TestCallsRunOnStreamWorkers: serve's gRPC options run calls on gRPC's
// stream workers, goroutines kept from one call to the next (whose stacks
// stay grown), not on a goroutine started per call.
func TestCallsRunOnStreamWorkers(t *testing.T) {
	opts, err := grpcServerOptions(doors.Default(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	rec := stackRecorder{stacks: make(chan string, 1)}
	client := authv3.NewAuthorizationClient(extauthztest.Serve(t, rec, opts...))
	if _, err := client.Check(context.Background(), &authv3.CheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if stack := <-rec.stacks; !strings.Contains(stack, "grpc.(*Server).serverWorker") {
		t.Errorf("the call ran outside gRPC's stream workers:\n%s", stack)
	}
}
