package extauthz

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestTheRecorderHearsEachPolicysDecisionWithASafeLabel drives decisions
// over gRPC into a server with a recorder and reads who it says was
// limited: API keys only as the hashed identity the denial's log line
// carries, client addresses as their bucket (the /64 of an IPv6 client),
// the shared bucket as "-", a context value in the clear, shadow policies
// apart, and a denied request not counted against the policy that had room.
func TestTheRecorderHearsEachPolicysDecisionWithASafeLabel(t *testing.T) {
	rec := limited.New(limited.DefaultOptions()) // decisions are recorded at the time Check read; the test takes far less than the window
	core, logs := observer.New(zapcore.DebugLevel)
	r := newRig(t, []PolicySpec{
		{Name: "keys", Match: MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"}, Capacity: 2, RefillPerSecond: "1/3600"},
		{Name: "tenants", Match: MatchSpec{PathPrefix: "/t/"}, Key: []string{"context:tenant", "header:x-tenant"}, Capacity: 1, RefillPerSecond: "1/3600"},
		{Name: "trial", Match: MatchSpec{PathPrefix: "/v1/"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/3600", Mode: "shadow"},
		{Name: "both-key", Match: MatchSpec{PathPrefix: "/both/"}, Key: []string{"header:x-api-key"}, Capacity: 5, RefillPerSecond: "1/3600"},
		{Name: "both-ip", Match: MatchSpec{PathPrefix: "/both/"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/3600"},
	}, Options{HashSecret: []byte("test-secret")}, nil, ServerOptions{Limited: rec, Logger: zap.New(core)})

	send := func(n int, path, source string, h map[string]string, ctx map[string]string) {
		for range n {
			req := checkRequest(source, withHeaders(h, map[string]string{":path": path}))
			req.Attributes.ContextExtensions = ctx
			r.check(t, req)
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
	if keyID == "" || keyID != r.server.Engine().hasher.id("header:x-api-key", "k_live_secret") {
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
// decision, in-process on the in-memory store, from every CPU at once
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
		{"no-recorder/1024-keys", false, benchKeys},
		{"recorder/1024-keys", true, benchKeys},
		{"no-recorder/one-key", false, 1},
		{"recorder/one-key", true, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			eng, err := Compile([]PolicySpec{benchTight}, Options{HashSecret: []byte("benchmark-secret-0123456789")})
			if err != nil {
				b.Fatal(err)
			}
			so := ServerOptions{Registerer: prometheus.NewRegistry()}
			if tc.recorder {
				so.Limited = limited.New(limited.DefaultOptions())
			}
			s := NewServer(eng, storetest.Memory(nil), so)
			reqs := benchRequests(tc.keys)
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
					if resp, _ := s.Check(ctx, reqs[i%len(reqs)]); allowed(resp) {
						b.Error("allowed: every bucket is empty")
						return
					}
					i++
				}
			})
		})
	}
}
