package xdsfeed_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/peertest"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// service is Floodgate's rate limit service fed by an xDS server, over
// real gRPC on loopback, its buckets in a real redis-server.
type service struct {
	client rlsv3.RateLimitServiceClient
	page   http.Handler // /debug/xds
	reg    *prometheus.Registry
	doors  []door.Door
	cfg    *door.Config
}

// startService builds the rate limit door as serve does, from a
// configuration whose rls section is rlsSection (the door builds its feed),
// runs the feed and serves the door on a loopback port.
func startService(t *testing.T, redisAddr, rlsSection string) *service {
	t.Helper()
	yaml := fmt.Sprintf("listen: {grpc: \"127.0.0.1:0\"}\nstore:\n  backend: redis\n  redis: {addresses: [%q]}\nrls:\n%s", redisAddr, rlsSection)
	cfg, err := doors.LoadBytes("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	st, err := store.Build(ctx, cfg.Config, zap.NewNop(), reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	doors := doors.Build(cfg, door.Env{Store: st, Log: zap.NewNop(), Registerer: reg})
	_, stop := door.Run(ctx, doors) // the feed runs; nothing waits for its first push
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	for _, d := range doors {
		d.Register(gs)
	}
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); cancel(); stop(); st.Close() })
	return &service{client: rlsv3.NewRateLimitServiceClient(conn), page: door.Pages(doors)["/debug/xds"], reg: reg, doors: doors, cfg: cfg}
}

// status is the feed's debug page (/debug/xds).
func (s *service) status() string {
	w := httptest.NewRecorder()
	s.page.ServeHTTP(w, httptest.NewRequest("GET", "/debug/xds", nil))
	return w.Body.String()
}

// counter is the value of the feed's counter name (with labels, the
// label pairs), as the registry exposes it.
func (s *service) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s %v", name, labels)
	return 0
}

func (s *service) ask(t *testing.T, domain string, pairs ...string) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(pairs); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}})
}

// codes sends n requests and returns their overall codes, each with the
// limit it reported.
func (s *service) codes(t *testing.T, n int, domain string, pairs ...string) string {
	t.Helper()
	var out []string
	for range n {
		r, err := s.ask(t, domain, pairs...)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		lim := r.Statuses[0].GetCurrentLimit()
		out = append(out, fmt.Sprintf("%s(%d/%s)", r.OverallCode, lim.GetRequestsPerUnit(), lim.GetUnit()))
	}
	return strings.Join(out, " ")
}

func perMinute(domain, key string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}},
	}}
}

const node = "envoy-ratelimit"

// TestPushesOverMutualTLSAreAppliedUpdatedAndABadOneRefused: an xDS server
// requiring client certificates pushes limits, updates them, pushes a
// broken configuration and then a good one again. Before the first push
// the service answers with an RPC error (rls.on_failure: error, as
// envoyproxy/ratelimit answers before its first configuration); each good
// push is answered with its limits without a restart and ACKed; the bad
// one is NACKed with rls's problem at its line, counted, and the limits
// before it keep serving; the debug page shows both.
func TestPushesOverMutualTLSAreAppliedUpdatedAndABadOneRefused(t *testing.T) {
	redis := redistest.Start(t)
	ca := peertest.NewCA(t, "xds")
	serverCert := ca.Issue("envoy-gateway", []string{"envoy-gateway"}, net.IPv4(127, 0, 0, 1))
	client := ca.Issue("envoy-ratelimit", []string{"envoy-ratelimit"})
	xds := peertest.StartXDS(t, ca.ServerTLS(serverCert))
	svc := startService(t, redis.Addr, fmt.Sprintf(`  on_failure: error
  burst: {edge.api_key: 3}
  xds:
    server: %s
    node_id: %s
    node_metadata: {cluster: floodgate-test}
    headers: {x-floodgate-test: yes}
    tls: {ca_file: %s, cert_file: %s, key_file: %s}
    retry: {initial: 10ms, max: 100ms}
`, xds.Addr, node, ca.File, client.CertFile, client.KeyFile))

	if _, err := svc.ask(t, "edge", "api_key", "k0"); status.Code(err) != codes.Unavailable {
		t.Fatalf("before the first push: %v, want UNAVAILABLE (rls.on_failure: error)", err)
	}
	if find(svc.doors, ratelimit.Name).On(svc.cfg) {
		t.Fatal("the door reports serving (its health) before its first push")
	}

	xds.Push(node, "1", perMinute("edge", "api_key", 2))
	xds.WaitAcked("1")
	if got, want := svc.codes(t, 4, "edge", "api_key", "k1"), "OK(2/MINUTE) OK(2/MINUTE) OK(2/MINUTE) OVER_LIMIT(2/MINUTE)"; got != want {
		t.Errorf("push 1 (2 a minute, burst 3): %s, want %s", got, want)
	}

	xds.Push(node, "2", perMinute("edge", "api_key", 5), perMinute("internal", "user", 1))
	xds.WaitAcked("2")
	if got, want := svc.codes(t, 4, "edge", "api_key", "k2"), "OK(5/MINUTE) OK(5/MINUTE) OK(5/MINUTE) OVER_LIMIT(5/MINUTE)"; got != want {
		t.Errorf("push 2 (5 a minute, the burst still 3): %s, want %s", got, want)
	}
	if got, want := svc.codes(t, 2, "internal", "user", "u"), "OK(1/MINUTE) OVER_LIMIT(1/MINUTE)"; got != want {
		t.Errorf("push 2's second domain: %s, want %s", got, want)
	}

	bad := perMinute("edge", "api_key", 9)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	xds.Push(node, "3", bad)
	msg := xds.WaitNacked("3")
	if !strings.Contains(msg, `xds:edge:5: edge: descriptors[0]: rate_limit: unit "UNKNOWN"`) {
		t.Errorf("NACK of push 3: %q, want rls's problem at its line", msg)
	}
	if got, want := svc.codes(t, 1, "edge", "api_key", "k3"), "OK(5/MINUTE)"; got != want {
		t.Errorf("after the bad push: %s, want push 2's limits still (%s)", got, want)
	}
	if n := svc.counter(t, "floodgate_rls_xds_pushes_total", "result", "rejected"); n != 1 {
		t.Errorf("rejected pushes counted: %v, want 1", n)
	}
	page := svc.status()
	for _, want := range []string{"rls.xds " + xds.Addr + ", node envoy-ratelimit: connected since", "pushes: 2 accepted, 1 rejected",
		"ok (rate limit domains edge internal)", "xds:edge: domain edge\n  edge.api_key: 5 per minute\n",
		"rejected (NACK), the limits above keep serving: 1 problem", `xds:edge:5: edge: descriptors[0]: rate_limit: unit "UNKNOWN"`,
		"   5        unit: UNKNOWN\n"} {
		if !strings.Contains(page, want) {
			t.Errorf("the debug page lacks %q:\n%s", want, page)
		}
	}

	xds.Push(node, "4", perMinute("edge", "api_key", 7))
	xds.WaitAcked("4")
	if got, want := svc.codes(t, 1, "edge", "api_key", "k4"), "OK(7/MINUTE)"; got != want {
		t.Errorf("push 4: %s, want %s", got, want)
	}
	if r, err := svc.ask(t, "internal", "user", "u"); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("a domain push 4 no longer holds: %v %v, want OK with no limit (state of the world)", r, err)
	}
	page = svc.status()
	if strings.Contains(page, "rejected (NACK)") {
		t.Errorf("the debug page still shows a rejection an accepted push replaced:\n%s", page)
	}

	md := xds.Metadata()
	if len(md) == 0 || strings.Join(md[0]["x-floodgate-test"], ",") != "yes" {
		t.Errorf("stream metadata %v, want x-floodgate-test: yes", md)
	}
	if !xds.Node(node) {
		t.Errorf("no stream named node %s", node)
	}
}

// TestTheFeedConnectsAgainAfterTheServerGoesAway: the server stops and
// comes back; the feed opens a new stream within its backoff, is sent the
// state of the world again, and applies what changed meanwhile. Between
// the two, the service keeps the limits it had.
func TestTheFeedConnectsAgainAfterTheServerGoesAway(t *testing.T) {
	redis := redistest.Start(t)
	xds := peertest.StartXDS(t, nil)
	svc := startService(t, redis.Addr, fmt.Sprintf("  xds: {server: %q, node_id: %s, retry: {initial: 10ms, max: 50ms}}\n", xds.Addr, node))
	xds.Push(node, "1", perMinute("edge", "api_key", 2))
	xds.WaitAcked("1")
	xds.Stop()
	if got, want := svc.codes(t, 1, "edge", "api_key", "a"), "OK(2/MINUTE)"; got != want {
		t.Errorf("while the server is away: %s, want the pushed limits (%s)", got, want)
	}
	xds.Push(node, "2", perMinute("edge", "api_key", 4))
	xds.Restart()
	xds.WaitAcked("2")
	if got, want := svc.codes(t, 1, "edge", "api_key", "b"), "OK(4/MINUTE)"; got != want {
		t.Errorf("after the server came back: %s, want %s", got, want)
	}
	if n := xds.Streams(); n < 1 {
		t.Errorf("%d streams on the restarted server", n)
	}
	if n := svc.counter(t, "floodgate_rls_xds_reconnects_total"); n < 1 {
		t.Errorf("reconnects counted: %v", n)
	}
}

// TestTheServerIsAuthenticated: the server's certificate must be signed by
// the CA and carry the expected name. Dialled by address, a certificate
// for envoy-gateway alone is refused, until server_name names it (Envoy
// Gateway's CONFIG_GRPC_XDS_SERVER_TLS_SAN); and a server requiring a
// client certificate refuses a client without one.
func TestTheServerIsAuthenticated(t *testing.T) {
	redis := redistest.Start(t)
	ca := peertest.NewCA(t, "xds")
	named := ca.Issue("envoy-gateway", []string{"envoy-gateway"})
	client := ca.Issue("envoy-ratelimit", []string{"envoy-ratelimit"})
	for _, tc := range []struct {
		name, tls string
		works     bool
	}{
		{"the name dialled is not the certificate's", fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s}", ca.File, client.CertFile, client.KeyFile), false},
		{"server_name names it", fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s, server_name: envoy-gateway}", ca.File, client.CertFile, client.KeyFile), true},
		{"no client certificate", fmt.Sprintf("{ca_file: %s, server_name: envoy-gateway}", ca.File), false},
		{"another CA", fmt.Sprintf("{ca_file: %s, cert_file: %s, key_file: %s, server_name: envoy-gateway}", peertest.NewCA(t, "other").File, client.CertFile, client.KeyFile), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xds := peertest.StartXDS(t, ca.ServerTLS(named))
			xds.Push(node, "1", perMinute("edge", "api_key", 2))
			svc := startService(t, redis.Addr, fmt.Sprintf("  xds: {server: %q, node_id: %s, tls: %s, retry: {initial: 10ms, max: 20ms}}\n", xds.Addr, node, tc.tls))
			if tc.works {
				xds.WaitAcked("1")
				return
			}
			// Refused: several attempts fail, and none reaches a stream.
			deadline := time.Now().Add(10 * time.Second)
			for svc.counter(t, "floodgate_rls_xds_reconnects_total") < 3 {
				if time.Now().After(deadline) {
					t.Fatal("the feed did not retry three times within 10s")
				}
				time.Sleep(5 * time.Millisecond) // the feed retries on its own goroutine; polled
			}
			if xds.Acked("1") || xds.Streams() > 0 {
				t.Errorf("the push reached the client: acked %v, %d streams", xds.Acked("1"), xds.Streams())
			}
			page := svc.status()
			if !strings.Contains(page, "not connected: ") || !strings.Contains(page, "no push accepted yet") {
				t.Errorf("debug page:\n%s", page)
			}
		})
	}
}

// find is the door named name among doors, nil when there is none.
func find(doors []door.Door, name string) door.Door {
	for _, d := range doors {
		if d.Name() == name {
			return d
		}
	}
	return nil
}
