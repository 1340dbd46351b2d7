package proxytest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcPolicy limits calls to the health service by API key.
var grpcPolicy = Policy{Name: "grpc", PathPrefix: "/grpc.health.v1.Health/", Key: []string{"header:x-api-key"}, Capacity: 2}

// GRPCUpstream is the gRPC application behind the proxy: the standard health
// service (SERVING), recording each call's metadata.
type GRPCUpstream struct {
	mu   sync.Mutex
	seen []metadata.MD
	// Addr is its 127.0.0.1 address.
	Addr string
}

// StartGRPCUpstream serves a GRPCUpstream on a free loopback port until the
// test ends.
func StartGRPCUpstream(t testing.TB) *GRPCUpstream {
	t.Helper()
	u := &GRPCUpstream{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Addr = l.Addr().String()
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		u.mu.Lock()
		u.seen = append(u.seen, md.Copy())
		u.mu.Unlock()
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return u
}

// Calls returns the metadata of every call seen so far.
func (u *GRPCUpstream) Calls() []metadata.MD {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]metadata.MD(nil), u.seen...)
}

// grpcEnv is one run of a gRPC front: its door, application and client.
type grpcEnv struct {
	t        *testing.T
	r        Recipe
	door     Door
	upstream *GRPCUpstream
	client   healthpb.HealthClient
}

func setupGRPC(t *testing.T, r Recipe) *grpcEnv {
	t.Helper()
	cfg := r.Door
	cfg.Policies = []Policy{grpcPolicy}
	cfg.OnFailure = "allow"
	e := &grpcEnv{t: t, r: r, door: StartDoor(t, cfg), upstream: StartGRPCUpstream(t)}
	addr := r.GRPCStart(t, e.door.Addr(), e.upstream.Addr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.client = healthpb.NewHealthClient(conn)
	return e
}

// grpcAnswer is what a gRPC client got for one call.
type grpcAnswer struct {
	err             error
	header, trailer metadata.MD
	serving         bool
}

func (a grpcAnswer) String() string {
	return fmt.Sprintf("status %v, header %v, trailer %v", status.Convert(a.err), a.header, a.trailer)
}

// call makes one Health/Check with the API key, carrying the client's own
// failure marker (which the recipe must drop).
func (e *grpcEnv) call(key string) grpcAnswer {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key, e.r.FailureHeader, forgedMarker)
	var a grpcAnswer
	resp, err := e.client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	a.err = err
	a.serving = err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	return a
}

// value is the single value of key in md ("" when absent).
func value(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// RunGRPC checks a recipe's gRPC front from a grpc-go client's side: a burst
// passes with the RateLimit headers, then the call is denied with r.GRPCDenied
// (with grpc-retry-pushback-ms in the trailers when it is
// RESOURCE_EXHAUSTED, so that a retry policy waits), and the application saw
// only the burst; the door down lets calls through, marked for the
// application, and the client's own marker never reaches it.
func RunGRPC(t *testing.T, r Recipe) {
	t.Run("a burst passes, then the proxy's gRPC denial", func(t *testing.T) {
		e := setupGRPC(t, r)
		for i := int64(1); i <= grpcPolicy.Capacity; i++ {
			a := e.call("key-1")
			if !a.serving {
				t.Fatalf("call %d of the burst: %v, want SERVING from the application", i, a)
			}
			if r.NoRateLimitHeaders {
				continue
			}
			if got, want := value(a.header, "ratelimit-remaining"), strconv.FormatInt(grpcPolicy.Capacity-i, 10); got != want {
				t.Errorf("call %d: ratelimit-remaining %q in the response headers, want %q (%v)", i, got, want, a)
			}
		}
		a := e.call("key-1")
		if got := status.Code(a.err); got != r.GRPCDenied {
			t.Fatalf("a spent client's call: %v, want %v", a, r.GRPCDenied)
		}
		if r.GRPCDenied == codes.ResourceExhausted {
			ms, err := strconv.Atoi(value(a.trailer, "grpc-retry-pushback-ms"))
			if err != nil || ms > RefillSeconds*1000 || ms < (RefillSeconds-60)*1000 {
				t.Errorf("grpc-retry-pushback-ms %q: want milliseconds near %d s (%v)", value(a.trailer, "grpc-retry-pushback-ms"), RefillSeconds, a)
			}
			if got := value(a.trailer, "ratelimit-remaining"); got != "0" {
				t.Errorf("ratelimit-remaining %q on the denial, want 0 (%v)", got, a)
			}
		}
		if n := len(e.upstream.Calls()); n != int(grpcPolicy.Capacity) {
			t.Errorf("the application saw %d calls, want the %d of the burst", n, grpcPolicy.Capacity)
		}
		for i, md := range e.upstream.Calls() {
			if v := md.Get(r.FailureHeader); len(v) > 0 {
				t.Errorf("call %d reached the application with %s %q: the client's own marker got through", i+1, r.FailureHeader, v)
			}
		}
		if b := e.call("key-2"); !b.serving {
			t.Errorf("another key's call: %v, want SERVING (its own bucket)", b)
		}
	})

	t.Run("the door down: the call passes, marked for the application (or the proxy's own error)", func(t *testing.T) {
		e := setupGRPC(t, r)
		e.door.Stop()
		a := e.call("key-1")
		if r.GRPCDoorDown != codes.OK {
			if got := status.Code(a.err); got != r.GRPCDoorDown {
				t.Errorf("a call the door did not answer: %v, want %v", a, r.GRPCDoorDown)
			}
			if n := len(e.upstream.Calls()); n != 0 {
				t.Errorf("the application saw %d calls, want none", n)
			}
			return
		}
		if !a.serving {
			t.Fatalf("a call the door did not answer: %v, want SERVING (fail open)", a)
		}
		calls := e.upstream.Calls()
		if len(calls) != 1 || value(calls[0], r.FailureHeader) != "true" {
			t.Errorf("the application saw %v; want the one call, with %s: true", calls, r.FailureHeader)
		}
	})
}
