package envoy

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/doors"
)

const (
	rlsExample   = "ratelimit/envoy.yaml"
	rlsConfigDir = "ratelimit/config"
	rlsFilter    = "envoy.filters.http.ratelimit"
	rlsService   = "envoy.service.ratelimit.v3.RateLimitService"
)

// rlsBootstrap loads the rate limit example as Envoy would and returns its
// connection manager and the rate limit filter's configuration.
func rlsBootstrap(t *testing.T) (*hcmv3.HttpConnectionManager, *ratelimitv3.RateLimit, *envoyConfig) {
	t.Helper()
	data, err := os.ReadFile(rlsExample)
	if err != nil {
		t.Fatal(err)
	}
	bs, anys, err := loadBootstrap(data)
	if err != nil {
		t.Fatalf("%s: %v", rlsExample, err)
	}
	if anys < 4 {
		t.Fatalf("%s: only %d typed_config messages validated", rlsExample, anys)
	}
	ec := &envoyConfig{bs: bs, clusters: map[string]*clusterv3.Cluster{}}
	for _, c := range bs.GetStaticResources().GetClusters() {
		ec.clusters[c.GetName()] = c
	}
	var hcm *hcmv3.HttpConnectionManager
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() == hcmFilter {
					if hcm, err = unpack(f.GetTypedConfig(), &hcmv3.HttpConnectionManager{}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	if hcm == nil {
		t.Fatalf("%s: no http_connection_manager", rlsExample)
	}
	var rl *ratelimitv3.RateLimit
	for _, hf := range hcm.GetHttpFilters() {
		if hf.GetName() == rlsFilter {
			if rl, err = unpack(hf.GetTypedConfig(), &ratelimitv3.RateLimit{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rl == nil {
		t.Fatalf("%s: no %s http filter", rlsExample, rlsFilter)
	}
	return hcm, rl, ec
}

// TestTheRateLimitExampleTalksToFloodgate holds the settings
// envoy/ratelimit/envoy.yaml explains: the v3 transport, a timeout above
// Floodgate's own Redis timeout (Envoy's default is 20 ms: with a slower
// Redis, Envoy's failure mode would decide instead of Floodgate's), fail
// open, RESOURCE_EXHAUSTED for gRPC callers and the draft 03 headers, a
// cluster speaking HTTP/2 and health-checking the rate limit service by
// name (envoy source/extensions/filters/http/ratelimit/ratelimit.cc,
// Filter::complete; api/envoy/extensions/filters/http/ratelimit/v3/rate_limit.proto).
func TestTheRateLimitExampleTalksToFloodgate(t *testing.T) {
	_, rl, ec := rlsBootstrap(t)
	if rl.GetDomain() != "edge" {
		t.Errorf("domain %q, want edge (config/edge.yaml's)", rl.GetDomain())
	}
	if got := rl.GetTimeout().AsDuration(); got < 2*config.DefaultRedisTimeout {
		t.Errorf("timeout %v: want at least twice Floodgate's Redis timeout %v, so that Floodgate's failure mode answers first", got, config.DefaultRedisTimeout)
	}
	if rl.GetFailureModeDeny() {
		t.Error("failure_mode_deny: true turns an unreachable Floodgate into an outage; the example fails open")
	}
	if !rl.GetRateLimitedAsResourceExhausted() {
		t.Error("rate_limited_as_resource_exhausted is off: gRPC callers would get UNAVAILABLE and retry at once")
	}
	if rl.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		t.Errorf("enable_x_ratelimit_headers %v, want DRAFT_VERSION_03", rl.GetEnableXRatelimitHeaders())
	}
	svc := rl.GetRateLimitService()
	if svc.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		t.Errorf("rate_limit_service.transport_api_version %v, want V3", svc.GetTransportApiVersion())
	}
	name := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	c := ec.clusters[name]
	if c == nil {
		t.Fatalf("rate_limit_service names cluster %q, which the bootstrap does not define", name)
	}
	opts, err := unpack(c.GetTypedExtensionProtocolOptions()[http2Options], &upstreamhttpv3.HttpProtocolOptions{})
	if err != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s does not speak HTTP/2 (gRPC needs it): %v", name, err)
	}
	var checked bool
	for _, hc := range c.GetHealthChecks() {
		checked = checked || hc.GetGrpcHealthCheck().GetServiceName() == rlsService
	}
	if !checked {
		t.Errorf("cluster %s does not health-check %s: a draining replica would keep getting calls", name, rlsService)
	}
	if got := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); got != 9191 {
		t.Errorf("cluster %s port %d, want 9191 (Floodgate serves both APIs on listen.grpc)", name, got)
	}
}

// descriptors builds the descriptors Envoy's rate limit filter sends for a
// request on route, from its rate_limits actions: generic_key, remote_address
// and request_headers, the three the example uses (envoy
// source/common/router/router_ratelimit.cc, the *Action::populateDescriptor
// functions: a request_headers action whose header is absent drops the whole
// descriptor unless skip_if_absent).
func descriptors(t *testing.T, route *routev3.Route, remote string, headers map[string]string) [][]rls.Entry {
	t.Helper()
	var out [][]rls.Entry
	for _, r := range route.GetRoute().GetRateLimits() {
		var d []rls.Entry
		ok := true
		for _, a := range r.GetActions() {
			switch {
			case a.GetGenericKey() != nil:
				k := a.GetGenericKey().GetDescriptorKey()
				if k == "" {
					k = "generic_key"
				}
				d = append(d, rls.Entry{Key: k, Value: a.GetGenericKey().GetDescriptorValue()})
			case a.GetRemoteAddress() != nil:
				d = append(d, rls.Entry{Key: "remote_address", Value: remote})
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				v, present := headers[h.GetHeaderName()]
				if !present {
					ok = ok && h.GetSkipIfAbsent()
					continue
				}
				d = append(d, rls.Entry{Key: h.GetDescriptorKey(), Value: v})
			default:
				t.Fatalf("route %s: an action this test does not model: %v", route.GetMatch(), a)
			}
		}
		if ok {
			out = append(out, d)
		}
	}
	return out
}

// TestEveryRateLimitedRouteMeetsALimit sends, for every route with
// rate_limits, the descriptors Envoy would build and requires each to select
// the limit config/edge.yaml means for it: a route whose descriptors select
// nothing is not limited at all, silently.
func TestEveryRateLimitedRouteMeetsALimit(t *testing.T) {
	hcm, rl, _ := rlsBootstrap(t)
	cfg, err := rls.Load(rlsConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"/login": {"login-per-address"},
		"/v1/":   {"api-per-address", "api-per-key"},
	}
	seen := 0
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, route := range vh.GetRoutes() {
			if len(route.GetRoute().GetRateLimits()) == 0 {
				continue
			}
			key := route.GetMatch().GetPath() + route.GetMatch().GetPrefix()
			ds := descriptors(t, route, "203.0.113.7", map[string]string{"x-api-key": "k-123"})
			var names []string
			for _, d := range ds {
				lim := cfg.Select(rl.GetDomain(), d)
				if lim == nil {
					t.Errorf("route %s: descriptor %v selects no limit in %s", key, d, rlsConfigDir)
					continue
				}
				names = append(names, lim.Name)
			}
			if len(names) != len(want[key]) || (len(names) > 0 && names[0] != want[key][0]) || (len(names) > 1 && names[1] != want[key][1]) {
				t.Errorf("route %s selects %v, want %v", key, names, want[key])
			}
			seen++
		}
	}
	if seen != len(want) {
		t.Errorf("%d rate-limited routes, want %d", seen, len(want))
	}
	partner := cfg.Select(rl.GetDomain(), []rls.Entry{{Key: "generic_key", Value: "api"}, {Key: "api_key", Value: "partner-9"}})
	if partner == nil || partner.Name != "api-per-partner-key" {
		t.Errorf("a partner key selects %+v, want api-per-partner-key", partner)
	}
}

// TestTheRateLimitExampleFloodgateConfigMatches loads the Floodgate
// configuration beside the rate limit example as serve does (offline: no
// secret), and holds it to the Envoy side: the cluster's port is
// listen.grpc, the filter's domain is one rls.config defines, and the
// burst names the per-key limit.
func TestTheRateLimitExampleFloodgateConfigMatches(t *testing.T) {
	_, rl, ec := rlsBootstrap(t)
	data, err := os.ReadFile("ratelimit/floodgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := doors.Parse("ratelimit/floodgate.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	// rls.config is written from the repository root, as the header says.
	cfg.RLS.Config = filepath.Join("..", cfg.RLS.Config)
	if err := doors.ReadFiles(cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ratelimit.Limits(cfg).Domains(), rl.GetDomain()) {
		t.Errorf("the filter's domain %q is not among rls.config's %v", rl.GetDomain(), ratelimit.Limits(cfg).Domains())
	}
	_, port, _ := net.SplitHostPort(cfg.Listen.GRPC)
	c := ec.clusters[rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	if got := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); strconv.Itoa(int(got)) != port {
		t.Errorf("cluster port %d, listen.grpc %s", got, cfg.Listen.GRPC)
	}
	lim := ratelimit.Limits(cfg).Select(rl.GetDomain(), []rls.Entry{{Key: "generic_key", Value: "api"}, {Key: "api_key", Value: "k"}})
	if lim == nil || lim.Burst != 20 || lim.RequestsPerUnit != 100 {
		t.Errorf("the per-key limit: %+v, want 100 a minute with a burst of 20", lim)
	}
	if d := cfg.Store.Redis.Timeout; d >= rl.GetTimeout().AsDuration() {
		t.Errorf("store.redis.timeout %v is not below the filter's timeout %v", d, rl.GetTimeout().AsDuration())
	}
}
