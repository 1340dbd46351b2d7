package limited_test

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"

	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// checkServer is an ext_authz server on eng's policies, in memory, telling
// rec who it limits, served over a real gRPC connection.
func checkServer(t *testing.T, policies []extauthz.PolicySpec, opts extauthz.Options, so extauthz.ServerOptions) (*extauthz.Server, authv3.AuthorizationClient) {
	t.Helper()
	eng, err := extauthz.Compile(policies, opts)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	s := extauthz.NewServer(eng, storetest.Memory(nil), so)
	return s, authv3.NewAuthorizationClient(extauthztest.Serve(t, s))
}

// TestTheRecorderHearsEachPolicysDecisionWithASafeLabel drives decisions
// over gRPC into an ext_authz server with a recorder and reads who it says
// was limited: API keys only as the hashed identity the denial's log line
// carries, client addresses as their bucket (the /64 of an IPv6 client),
// the shared bucket as "-", a context value in the clear, shadow policies
// apart, and a denied request not counted against the policy that had room.
func TestTheRecorderHearsEachPolicysDecisionWithASafeLabel(t *testing.T) {
	rec := limited.New(limited.DefaultOptions()) // decisions are recorded at the time Check read; the test takes far less than the window
	core, logs := observer.New(zapcore.DebugLevel)
	server, client := checkServer(t, []extauthz.PolicySpec{
		{Name: "keys", Match: extauthz.MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"}, Capacity: 2, RefillPerSecond: "1/3600"},
		{Name: "tenants", Match: extauthz.MatchSpec{PathPrefix: "/t/"}, Key: []string{"context:tenant", "header:x-tenant"}, Capacity: 1, RefillPerSecond: "1/3600"},
		{Name: "trial", Match: extauthz.MatchSpec{PathPrefix: "/v1/"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/3600", Mode: "shadow"},
		{Name: "both-key", Match: extauthz.MatchSpec{PathPrefix: "/both/"}, Key: []string{"header:x-api-key"}, Capacity: 5, RefillPerSecond: "1/3600"},
		{Name: "both-ip", Match: extauthz.MatchSpec{PathPrefix: "/both/"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/3600"},
	}, extauthz.Options{HashSecret: []byte("test-secret")}, extauthz.ServerOptions{Recorder: rec, Logger: zap.New(core)})

	send := func(n int, path, source string, h map[string]string, ctx map[string]string) {
		for range n {
			req := extauthztest.CheckRequest(source, withHeaders(h, map[string]string{":path": path}))
			req.Attributes.Request.Http.Path = path
			req.Attributes.ContextExtensions = ctx
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := client.Check(cctx, req)
			cancel()
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
		}
	}
	send(5, "/v1/a", "192.0.2.7", map[string]string{"x-api-key": "k_live_secret"}, nil)
	send(3, "/v1/a", "2001:db8::1234", nil, nil)
	send(2, "/v1/a", "2001:db8::99", nil, nil) // the same /64: the same bucket and caller
	send(2, "/t/a", "192.0.2.1", nil, nil)     // neither source: the shared bucket
	send(3, "/t/a", "192.0.2.1", nil, map[string]string{"tenant": "acme"})
	send(1, "/both/a", "198.51.100.1", map[string]string{"x-api-key": "k2"}, nil)
	send(2, "/both/a", "198.51.100.1", map[string]string{"x-api-key": "k3"}, nil) // both-ip denies; both-key had room

	keyID := ""
	for _, e := range logs.FilterMessage("denied").All() {
		if e.ContextMap()["policy"] == "keys" && keyID == "" { // the API key's denials come first
			keyID = e.ContextMap()["identity"].(string)
		}
	}
	if keyID == "" || keyID != server.Engine().HashIdentity("header:x-api-key", "k_live_secret") {
		t.Fatalf("no denial of the API key logged with its identity (got %q)", keyID)
	}
	got := rec.Snapshot(0)
	want := limited.Report{WindowSeconds: 60,
		Policies: []limited.PolicyReport{
			{Name: "keys", Denied: 6, Top: []limited.Caller{
				{Caller: "2001:db8::/64", Key: "client_ip", Denied: 3, Allowed: 2}, // ties read in label order
				{Caller: keyID, Key: "header:x-api-key", Denied: 3, Allowed: 2},
			}},
			{Name: "tenants", Denied: 3, Top: []limited.Caller{
				{Caller: "acme", Key: "context:tenant", Denied: 2, Allowed: 1},
				{Caller: "-", Key: "", Denied: 1, Allowed: 1},
			}},
			{Name: "both-ip", Denied: 2, Top: []limited.Caller{{Caller: "198.51.100.1", Key: "client_ip", Denied: 2, Allowed: 1}}},
			{Name: "both-key", Denied: 0, Top: []limited.Caller{}},
		},
		Shadow: []limited.PolicyReport{
			{Name: "trial", Denied: 8, Top: []limited.Caller{
				{Caller: "192.0.2.7", Key: "client_ip", Denied: 4, Allowed: 1},
				{Caller: "2001:db8::/64", Key: "client_ip", Denied: 4, Allowed: 1},
			}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func withHeaders(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// BenchmarkDeniedWithRecorder is the cost the recorder adds to a denied
// Check, in-process on the in-memory store, from every CPU at once
// (run with -cpu=2 to contend): without it, with it for callers cycling
// through 1024 API keys (more than a sketch follows, so new callers keep
// displacing others), and with it for one key (an over-limit flood, every
// decision on the same policy's lock and entry).
func BenchmarkDeniedWithRecorder(b *testing.B) {
	for _, tc := range []struct {
		name     string
		recorder bool
		keys     int
	}{
		{"no-recorder/1024-keys", false, 1024},
		{"recorder/1024-keys", true, 1024},
		{"no-recorder/one-key", false, 1},
		{"recorder/one-key", true, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tight := extauthz.PolicySpec{Name: "tight", Match: extauthz.MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key"},
				Capacity: 1, RefillPerSecond: "1/3600"}
			eng, err := extauthz.Compile([]extauthz.PolicySpec{tight}, extauthz.Options{HashSecret: []byte("benchmark-secret-0123456789")})
			if err != nil {
				b.Fatal(err)
			}
			so := extauthz.ServerOptions{Registerer: prometheus.NewRegistry()}
			if tc.recorder {
				so.Recorder = limited.New(limited.DefaultOptions())
			}
			s := extauthz.NewServer(eng, storetest.Memory(nil), so)
			reqs := extauthztest.EnvoyRequests(tc.keys)
			ctx := context.Background()
			for _, r := range reqs {
				s.Check(ctx, r) // the one token each bucket holds
			}
			var worker atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 101
				for pb.Next() {
					if resp, _ := s.Check(ctx, reqs[i%len(reqs)]); resp.GetStatus().GetCode() == 0 {
						b.Error("allowed: every bucket is empty")
						return
					}
					i++
				}
			})
		})
	}
}

// TestAQuotasDenialsAreReportedAsAPolicys: a calendar quota's denials reach
// the report (and so floodgate top) as any policy's, by caller.
func TestAQuotasDenialsAreReportedAsAPolicys(t *testing.T) {
	rec := limited.New(limited.DefaultOptions())
	_, client := checkServer(t, []extauthz.PolicySpec{
		{Name: "monthly", Key: []string{"client_ip"}, Quota: &extauthz.QuotaSpec{Limit: 2, Period: "month", Timezone: "Europe/Berlin", AnchorDay: 15}},
	}, extauthz.Options{}, extauthz.ServerOptions{Recorder: rec})
	for range 5 {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Check(cctx, extauthztest.CheckRequest("192.0.2.9", nil))
		cancel()
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
	}
	got := rec.Snapshot(0)
	want := []limited.PolicyReport{{Name: "monthly", Denied: 3, Top: []limited.Caller{{Caller: "192.0.2.9", Key: "client_ip", Denied: 3, Allowed: 2}}}}
	if !reflect.DeepEqual(got.Policies, want) {
		t.Fatalf("got  %+v\nwant %+v", got.Policies, want)
	}
}
