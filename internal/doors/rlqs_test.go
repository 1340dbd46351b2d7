package doors

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/rlqs"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const quotaLimits = `domain: edge
descriptors:
  - key: tenant
    value: t1
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: path
    value: /x
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 50}
`

// serveDoors loads config.yaml naming limits.yaml (limits) from a temp
// directory, builds every door on one in-memory store and serves their
// gRPC services on loopback.
func serveDoors(t *testing.T, limits string) (ds []door.Door, c *door.Config, conn *grpc.ClientConn, reload func(limits string)) {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("limits.yaml", limits)
	write("config.yaml", "listen: {grpc: \"127.0.0.1:0\"}\nrls:\n  config: "+filepath.Join(dir, "limits.yaml")+"\n")
	c, err := Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	st := &store.Stores{Main: storetest.Memory(nil)}
	st.Shadow = st.Main
	ds = Build(c, door.Env{Store: st, Log: zap.NewNop(), Registerer: prometheus.NewRegistry()})
	srv := grpc.NewServer()
	for _, d := range ds {
		d.Register(srv)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ds, c, conn, func(limits string) {
		write("limits.yaml", limits)
		c, err := Load(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			d.Reload(c)
		}
	}
}

// TestTheQuotaDoorDividesTheRateLimitFilesLimits: an Envoy's bucket_id,
// its pairs sorted by key, is the descriptor chain that selects the limit
// of the rate limit door's files ({tenant: t1}: 60 a minute; {tenant: t1,
// path: /x}: path=/x then tenant, 50 a second); a report charges the
// bucket the rate limit service decides the same chain by; and a reload of
// the files reaches the Envoy at once.
func TestTheQuotaDoorDividesTheRateLimitFilesLimits(t *testing.T) {
	ds, c, conn, reload := serveDoors(t, quotaLimits)
	if d := find(ds, rlqs.Name); d == nil || !d.On(c) {
		t.Fatal("the quota door is not on beside the rate limit door")
	}
	e := rlqs.NewEnvoy(conn, rlqs.EnvoyOptions{Domain: "edge"})
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t1, t1x := map[string]string{"tenant": "t1"}, map[string]string{"tenant": "t1", "path": "/x"}
	e.Request(t1)
	e.Request(t1x)
	e.WaitAnswers(ctx, 2)
	if got := e.Assignment(t1); got != "token_bucket max 1, 1 per 1s (1/s), ttl 15s" {
		t.Errorf("{tenant: t1}: %q", got)
	}
	if got := e.Assignment(t1x); got != "token_bucket max 5, 50 per 1s (50/s), ttl 15s" {
		t.Errorf("{tenant: t1, path: /x}: %q", got)
	}

	// 60 allowed by Envoys under tenant=t1: the rate limit service's bucket
	// of 60 a minute is spent.
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: t1}, NumRequestsAllowed: 60}}})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t1"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the rate limit service after the quota reports spent the bucket: %v", resp.GetOverallCode())
	}

	// That second stream is an Envoy of its own: once it ends, its share
	// goes back.
	s.CloseSend()
	s.Recv()
	time.Sleep(50 * time.Millisecond)
	n := e.Stats().Answers
	reload(`domain: edge
descriptors:
  - key: tenant
    value: t1
    rate_limit: {unit: second, requests_per_unit: 30}
`)
	if !e.WaitAnswers(ctx, n+1) {
		t.Fatal("the reload pushed nothing")
	}
	if got := e.Assignment(t1); got != "token_bucket max 3, 30 per 1s (30/s), ttl 15s" {
		t.Errorf("{tenant: t1} after the reload: %q", got)
	}
	if got := e.Assignment(t1x); got != "none" {
		t.Errorf("{tenant: t1, path: /x}, whose limit the reload removed: %q, want it abandoned", got)
	}
}
