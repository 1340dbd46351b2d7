package envoy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	rlqfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/door/rlqs"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const (
	rlqsExample   = "rlqs/envoy.yaml"
	rlqsFloodgate = "rlqs/floodgate.yaml"
	rlqsConfigDir = "rlqs/config"
	rlqsFilter    = "envoy.filters.http.rate_limit_quota"
	rlqsService   = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"
)

// rlqsBootstrap loads the quota example as Envoy would and returns its
// filter's configuration, each bucket matcher's settings in order, and the
// clusters.
func rlqsBootstrap(t *testing.T) (*rlqfv3.RateLimitQuotaFilterConfig, []*rlqfv3.RateLimitQuotaBucketSettings, map[string]*clusterv3.Cluster) {
	t.Helper()
	data, err := os.ReadFile(rlqsExample)
	if err != nil {
		t.Fatal(err)
	}
	bs, anys, err := loadBootstrap(data)
	if err != nil {
		t.Fatalf("%s: %v", rlqsExample, err)
	}
	if anys < 8 {
		t.Fatalf("%s: only %d typed_config messages validated", rlqsExample, anys)
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	var fc *rlqfv3.RateLimitQuotaFilterConfig
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, ch := range l.GetFilterChains() {
			for _, f := range ch.GetFilters() {
				if f.GetName() != hcmFilter {
					continue
				}
				hcm, err := unpack(f.GetTypedConfig(), &hcmv3.HttpConnectionManager{})
				if err != nil {
					t.Fatal(err)
				}
				for _, hf := range hcm.GetHttpFilters() {
					if hf.GetName() == rlqsFilter {
						if fc, err = unpack(hf.GetTypedConfig(), &rlqfv3.RateLimitQuotaFilterConfig{}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		}
	}
	if fc == nil {
		t.Fatalf("%s: no %s http filter", rlqsExample, rlqsFilter)
	}
	var settings []*rlqfv3.RateLimitQuotaBucketSettings
	for _, m := range fc.GetBucketMatchers().GetMatcherList().GetMatchers() {
		s, err := unpack(m.GetOnMatch().GetAction().GetTypedConfig(), &rlqfv3.RateLimitQuotaBucketSettings{})
		if err != nil {
			t.Fatal(err)
		}
		settings = append(settings, s)
	}
	if len(settings) == 0 {
		t.Fatalf("%s: no bucket matchers", rlqsExample)
	}
	return fc, settings, clusters
}

// TestTheQuotaExampleTalksToFloodgate holds what envoy/rlqs/envoy.yaml
// explains: the filter's domain is a domain of the limits, its server the
// floodgate cluster on listen.grpc's port, HTTP/2, health-checked by the
// quota service's name (a draining replica reports it NOT_SERVING).
func TestTheQuotaExampleTalksToFloodgate(t *testing.T) {
	fc, _, clusters := rlqsBootstrap(t)
	cfg := rlqsConfig(t)
	limits, err := rls.Load(rlqsConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	if !limits.HasDomain(fc.GetDomain()) {
		t.Errorf("the filter's domain %q is not a domain of %s", fc.GetDomain(), rlqsConfigDir)
	}
	if cfg.Store.Backend != "redis" {
		t.Errorf("store.backend %q: replicas divide a limit among every Envoy through Redis", cfg.Store.Backend)
	}
	name := fc.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
	c := clusters[name]
	if c == nil {
		t.Fatalf("rlqs_server names cluster %q, which the bootstrap does not define", name)
	}
	opts, err := unpack(c.GetTypedExtensionProtocolOptions()[http2Options], &upstreamhttpv3.HttpProtocolOptions{})
	if err != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s does not speak HTTP/2: %v", name, err)
	}
	checked := false
	for _, hc := range c.GetHealthChecks() {
		checked = checked || hc.GetGrpcHealthCheck().GetServiceName() == rlqsService
	}
	if !checked {
		t.Errorf("cluster %s does not health-check %s", name, rlqsService)
	}
	port := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
	if want := portOf(t, cfg.Listen.GRPC); port != want {
		t.Errorf("cluster %s port %d, listen.grpc %s", name, port, cfg.Listen.GRPC)
	}
}

// TestEveryQuotaBucketMeetsALimit builds the bucket_id each matcher's
// bucket_id_builder makes (a custom_value read from the request, here a
// sample) and requires its pairs, sorted by key, to select the limit the
// example means: a bucket that selects nothing is answered ALLOW_ALL,
// silently unlimited.
func TestEveryQuotaBucketMeetsALimit(t *testing.T) {
	fc, settings, _ := rlqsBootstrap(t)
	limits, err := rls.Load(rlqsConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"api-per-key", "api-total"}
	if len(settings) != len(want) {
		t.Fatalf("%d bucket matchers, want %d", len(settings), len(want))
	}
	for i, s := range settings {
		var chain []rls.Entry
		for k, v := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
			value := v.GetStringValue()
			if v.GetCustomValue() != nil {
				value = "sample-" + k
			}
			chain = append(chain, rls.Entry{Key: k, Value: value})
		}
		sort.Slice(chain, func(a, b int) bool { return chain[a].Key < chain[b].Key })
		lim := limits.Select(fc.GetDomain(), chain)
		if lim == nil {
			t.Errorf("matcher %d: bucket %v selects no limit in %s", i, chain, rlqsConfigDir)
			continue
		}
		if lim.Name != want[i] {
			t.Errorf("matcher %d: bucket %v selects %s, want %s", i, chain, lim.Name, want[i])
		}
	}
}

// TestTheQuotaExamplesBehaviourIsWhatEnvoyDoes: each bucket's settings as
// Envoy reads them (source/extensions/filters/http/rate_limit_quota/):
// the first request allowed until Floodgate answers (filter.cc,
// noAssignmentBehaviorShouldAllow: only DENY_ALL denies it); an expired
// assignment's fallback a token bucket Envoy can enforce (whole-second fill
// interval: createTokenBucketFromAction divides by its whole seconds) for
// whole seconds (only .seconds() is read), longer than Floodgate's TTL is
// short; the denial a 429 (sendDenyResponse; its grpc_status is not read).
func TestTheQuotaExamplesBehaviourIsWhatEnvoyDoes(t *testing.T) {
	_, settings, _ := rlqsBootstrap(t)
	for i, s := range settings {
		if s.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
			t.Errorf("matcher %d: no_assignment_behavior is not ALLOW_ALL: a bucket's first request would wait on nothing and be denied", i)
		}
		if code := s.GetDenyResponseSettings().GetHttpStatus().GetCode(); code != typev3.StatusCode_TooManyRequests {
			t.Errorf("matcher %d: deny_response_settings.http_status %v, want 429", i, code)
		}
		if s.GetDenyResponseSettings().GetGrpcStatus() != nil {
			t.Errorf("matcher %d: deny_response_settings.grpc_status is set, and Envoy does not read it", i)
		}
		e := s.GetExpiredAssignmentBehavior()
		if e == nil {
			continue
		}
		if d := e.GetExpiredAssignmentBehaviorTimeout(); d.GetNanos() != 0 || d.AsDuration() < time.Duration(rlqs.TTLReports)*rlqs.ReportInterval {
			t.Errorf("matcher %d: expired_assignment_behavior_timeout %v: whole seconds (Envoy reads only them), at least Floodgate's TTL", i, d.AsDuration())
		}
		if tb := e.GetFallbackRateLimit().GetTokenBucket(); tb != nil {
			if tb.GetFillInterval().AsDuration() < time.Second || tb.GetFillInterval().GetNanos() != 0 || tb.GetTokensPerFill().GetValue() == 0 {
				t.Errorf("matcher %d: the fallback token bucket %v: Envoy divides tokens_per_fill (0 when unset) by the interval's whole seconds", i, tb)
			}
		}
		if e.GetReuseLastAssignment() != nil {
			t.Errorf("matcher %d: reuse_last_assignment, which Envoy does not implement (only fallback_rate_limit is read)", i)
		}
	}
}

// rlqsConfig is the example's Floodgate configuration as serve loads it
// (offline: no secret), rls.config read from the repository root as its
// header says.
func rlqsConfig(t *testing.T) *door.Config {
	t.Helper()
	data, err := os.ReadFile(rlqsFloodgate)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := doors.Parse(rlqsFloodgate, data)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RLS.Config = filepath.Join("..", cfg.RLS.Config)
	if err := doors.ReadFiles(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestAnEnvoyOfTheQuotaExampleGetsItsAssignments: Floodgate built from
// envoy/rlqs/floodgate.yaml (on an in-memory store) answers an Envoy
// holding the buckets the example's matchers build with the limits meant:
// the API's 1,000 a second and a key's 600 a minute, each Envoy's share of
// them, alone here: the whole.
func TestAnEnvoyOfTheQuotaExampleGetsItsAssignments(t *testing.T) {
	fc, settings, _ := rlqsBootstrap(t)
	cfg := rlqsConfig(t)
	cfg.Store.Backend = "memory"
	st := &store.Stores{Main: storetest.Memory(nil)}
	st.Shadow = st.Main
	ds := doors.Build(cfg, door.Env{Store: st, Log: zap.NewNop(), Registerer: prometheus.NewRegistry()})
	srv := grpc.NewServer()
	for _, d := range ds {
		d.Register(srv)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e := rlqs.NewEnvoy(conn, rlqs.EnvoyOptions{Domain: fc.GetDomain()})
	defer e.Close()
	want := []string{"token_bucket max 1, 10 per 1s (10/s), ttl 15s", "token_bucket max 100, 1000 per 1s (1000/s), ttl 15s"}
	var buckets []map[string]string
	for _, s := range settings {
		b := map[string]string{}
		for k, v := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
			b[k] = v.GetStringValue()
			if v.GetCustomValue() != nil {
				b[k] = "sample-" + k
			}
		}
		buckets = append(buckets, b)
		e.Request(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !e.WaitAnswers(ctx, len(buckets)) {
		t.Fatal("no answers")
	}
	for i, b := range buckets {
		if got := e.Assignment(b); got != want[i] {
			t.Errorf("bucket %v: %q, want %q", b, got, want[i])
		}
	}
}

// portOf is the port of a HOST:PORT setting.
func portOf(t *testing.T, hostPort string) uint32 {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}
