package admission

import (
	"context"
	"fmt"
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestBudgetTakesWhatFitsAndWaitsForTheRest(t *testing.T) {
	b := NewBudget(100)
	ctx := context.Background()
	if n, ok := b.Take(ctx, 70, 0); !ok || n != 70 {
		t.Fatalf("Take(70) of 100: %d, %v", n, ok)
	}
	if _, ok := b.Take(ctx, 40, 10*time.Millisecond); ok {
		t.Fatal("Take(40) with 30 free succeeded")
	}
	if n, ok := b.Take(ctx, 30, 0); !ok || n != 30 {
		t.Fatalf("Take(30) with 30 free: %d, %v", n, ok)
	}
	done := make(chan int64)
	go func() {
		n, _ := b.Take(ctx, 500, 10*time.Second) // more than the budget: all of it
		done <- n
	}()
	b.Give(30)
	select {
	case n := <-done:
		t.Fatalf("Take(500) returned %d while 70 were taken", n)
	case <-time.After(20 * time.Millisecond):
	}
	b.Give(70)
	select {
	case n := <-done:
		if n != 100 {
			t.Fatalf("Take(500) of a budget of 100 took %d, want 100", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Give did not wake the waiting Take")
	}
	if b.InUse() != 100 {
		t.Fatalf("in use %d, want 100", b.InUse())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := b.Take(cctx, 1, time.Hour); ok {
		t.Fatal("Take on an ended context succeeded with the budget spent")
	}
}

// checkServer answers each Check with its path in a header; a Check whose
// path is /hold waits for release first.
type checkServer struct {
	authv3.UnimplementedAuthorizationServer
	holding chan struct{}
	release chan struct{}
}

func (s *checkServer) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	path := req.GetAttributes().GetRequest().GetHttp().GetPath()
	if path == "/hold" {
		s.holding <- struct{}{}
		<-s.release
	}
	return &authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "path", Value: path}}},
	}}}, nil
}

func check(path string, size int) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Path: path, Headers: map[string]string{"filler": strings.Repeat("f", size)}},
	}}}
}

// TestAGatedServerReadsWithinTheBudget, over real gRPC: a request that
// does not fit within the wait is answered unread (Options.Unread), while a
// small one still passes beside the large one holding the budget; every
// request is read with its length known first (none coarsely); a method
// without an Unread answer gets RESOURCE_EXHAUSTED; a streaming RPC reads
// through the gate too.
func TestAGatedServerReadsWithinTheBudget(t *testing.T) {
	reg := prometheus.NewRegistry()
	const method = "/envoy.service.auth.v3.Authorization/Check"
	g := New(Options{
		Budget:     NewBudget(1 << 20),
		MaxMessage: 4 << 20,
		Codec:      encoding.GetCodecV2("proto"),
		Wait:       50 * time.Millisecond,
		Unread: map[string]func(context.Context) (any, error){method: func(context.Context) (any, error) {
			return &authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
				ResponseHeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "path", Value: "unread"}}},
			}}}, nil
		}},
		Registerer: reg,
	})
	srv := &checkServer{holding: make(chan struct{}, 1), release: make(chan struct{})}
	gs := grpc.NewServer(append(g.ServerOptions(), grpc.MaxRecvMsgSize(4<<20))...)
	services := g.Registrar(gs)
	authv3.RegisterAuthorizationServer(services, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(services, hs)
	conn := extauthztest.ServeGRPC(t, gs)
	client := authv3.NewAuthorizationClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pathOf := func(req *authv3.CheckRequest) string {
		t.Helper()
		resp, err := client.Check(ctx, req)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return resp.GetOkResponse().GetResponseHeadersToAdd()[0].GetHeader().GetValue()
	}

	held := make(chan string, 1)
	go func() {
		resp, err := client.Check(ctx, check("/hold", 700<<10))
		if err != nil {
			held <- err.Error()
			return
		}
		held <- resp.GetOkResponse().GetResponseHeadersToAdd()[0].GetHeader().GetValue()
	}()
	<-srv.holding // 700 KiB of the 1 MiB held until released
	if got := pathOf(check("/big", 700<<10)); got != "unread" {
		t.Errorf("a 700 KiB Check beside a held one: answered %q, want unread", got)
	}
	if got := pathOf(check("/small", 1<<10)); got != "/small" {
		t.Errorf("a 1 KiB Check beside a held one: answered %q, want it read and decided", got)
	}
	// A request within a stream's window is never kept waiting, even with
	// the whole budget taken: its sender has sent it already.
	rest, ok := g.o.Budget.Take(ctx, g.o.Budget.Limit()-g.o.Budget.InUse(), 0)
	if !ok {
		t.Fatal("could not take the rest of the budget")
	}
	if got := pathOf(check("/window", 60<<10)); got != "/window" {
		t.Errorf("a 60 KiB Check with the budget spent: answered %q, want it read and decided", got)
	}
	g.o.Budget.Give(rest)
	hctx, hcancel := context.WithTimeout(ctx, time.Second)
	_, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 700<<10)})
	hcancel()
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 700 KiB health check beside a held Check: %v, want RESOURCE_EXHAUSTED", err)
	}
	close(srv.release)
	if got := <-held; got != "/hold" {
		t.Errorf("the held Check answered %q", got)
	}
	if got := pathOf(check("/big", 700<<10)); got != "/big" {
		t.Errorf("a 700 KiB Check once the budget is free: answered %q, want it read", got)
	}
	if g.o.Budget.InUse() != 0 {
		t.Errorf("%d bytes still taken with no RPC in flight", g.o.Budget.InUse())
	}
	// A server-streaming RPC reads its request through the gate as well.
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := w.Recv(); err != nil || st.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Watch: %v, %v", st, err)
	}
	if n := testutil.ToFloat64(g.unread.WithLabelValues(method)); n != 1 {
		t.Errorf("unread Checks counted %v, want 1", n)
	}
	if n := testutil.ToFloat64(g.coarse); n != 0 {
		t.Errorf("%v requests read without their length known first: grpc-go's ServerTransportStream no longer offers ReadMessageHeader and Read", n)
	}
}

// TestNewRefusesNoWait: the wait is taken as given; none is a programming
// error, not a default.
func TestNewRefusesNoWait(t *testing.T) {
	for _, w := range []time.Duration{0, -time.Millisecond} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Options.Wait must be positive") {
					t.Errorf("Wait %v: recovered %v, want a panic naming Options.Wait", w, r)
				}
			}()
			New(Options{Budget: NewBudget(1 << 20), MaxMessage: 1 << 20, Codec: encoding.GetCodecV2("proto"), Wait: w})
		}()
	}
}
