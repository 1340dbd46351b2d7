package envoy

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
)

const (
	httpExample   = "http/envoy.yaml"
	httpFloodgate = "http/floodgate.yaml"
)

// rateLimitHeaders are the headers Floodgate's HTTP door answers with on
// allow (shared/DESIGN, "Response headers"), which the client must get.
var rateLimitHeaders = []string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy", "ratelimit", "x-ratelimit-degraded"}

// httpDoorConfig is the Floodgate configuration beside the http_service
// example, as floodgate loads it (door.Load; door.Parse for a mutated
// copy, which reads no secret).
type httpDoorConfig struct {
	listenHTTP string
	pathPrefix string
	cfg        *door.Config
}

func newHTTPDoorConfig(c *door.Config) *httpDoorConfig {
	return &httpDoorConfig{listenHTTP: c.Listen.HTTP, pathPrefix: c.HTTPAuthz.PathPrefix, cfg: c}
}

func parseHTTPDoorConfig(data []byte) (*httpDoorConfig, error) {
	c, err := doors.Parse(httpFloodgate, data)
	if err != nil {
		return nil, err
	}
	return newHTTPDoorConfig(c), nil
}

// httpBootstrap is the http_service example, unpacked.
type httpBootstrap struct {
	hcm      *hcmv3.HttpConnectionManager
	extAuthz *extauthzv3.ExtAuthz
	clusters map[string]*clusterv3.Cluster
}

func loadHTTPBootstrap(src []byte) (*httpBootstrap, error) {
	bs, anys, err := loadBootstrap(src)
	if err != nil {
		return nil, err
	}
	// The connection manager, the per-route config, ext_authz, the router.
	if anys < 4 {
		return nil, fmt.Errorf("only %d typed_config messages validated", anys)
	}
	hb := &httpBootstrap{clusters: map[string]*clusterv3.Cluster{}}
	for _, c := range bs.GetStaticResources().GetClusters() {
		hb.clusters[c.GetName()] = c
	}
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() == hcmFilter {
					if hb.hcm, err = unpack(f.GetTypedConfig(), &hcmv3.HttpConnectionManager{}); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	for _, hf := range hb.hcm.GetHttpFilters() {
		if hf.GetName() == extAuthzFilter {
			if hb.extAuthz, err = unpack(hf.GetTypedConfig(), &extauthzv3.ExtAuthz{}); err != nil {
				return nil, err
			}
		}
	}
	if hb.extAuthz == nil || hb.extAuthz.GetHttpService() == nil {
		return nil, fmt.Errorf("no %s filter with an http_service", extAuthzFilter)
	}
	return hb, nil
}

// matchesAny reports whether a header name matches a ListStringMatcher as
// Envoy applies it to header keys (Matchers::StringMatcherImpl; keys are
// lower case).
func matchesAny(l *matcherv3.ListStringMatcher, name string) bool {
	for _, m := range l.GetPatterns() {
		v, key := name, ""
		switch {
		case m.GetExact() != "":
			key = m.GetExact()
		case m.GetPrefix() != "":
			key = m.GetPrefix()
		case m.GetSuffix() != "":
			key = m.GetSuffix()
		case m.GetContains() != "":
			key = m.GetContains()
		}
		if m.GetIgnoreCase() {
			v, key = strings.ToLower(v), strings.ToLower(key)
		}
		switch {
		case m.GetExact() != "" && v == key,
			m.GetPrefix() != "" && strings.HasPrefix(v, key),
			m.GetSuffix() != "" && strings.HasSuffix(v, key),
			m.GetContains() != "" && strings.Contains(v, key):
			return true
		}
	}
	return false
}

func port(addr string) uint32 {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return uint32(n)
}

// httpProblems lists every way the http_service example and the Floodgate
// configuration beside it disagree with each other or with what the door
// needs. What Envoy does with each setting follows its ext_authz HTTP
// client (source/extensions/filters/common/ext_authz/ext_authz_http_impl.cc:
// ClientConfig's matchers, RawHttpClientImpl::check and toResponse) and the
// filter (source/extensions/filters/http/ext_authz/ext_authz.cc,
// FilterConfig: the filter-level allowed_headers applies to http_service
// unless the deprecated authorization_request.allowed_headers is set).
func httpProblems(hb *httpBootstrap, fc *httpDoorConfig) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	x := hb.extAuthz
	hs := x.GetHttpService()

	// Timeout: Floodgate's failure mode answers first, and a hung Floodgate costs little.
	timeout := hs.GetServerUri().GetTimeout().AsDuration()
	if timeout <= fc.cfg.Store.Redis.Timeout || timeout <= config.DefaultRedisTimeout || timeout > time.Second {
		bad("http_service.server_uri.timeout %v: want above Floodgate's store.redis.timeout (%v) and at most 1s", timeout, fc.cfg.Store.Redis.Timeout)
	}
	if !x.GetFailureModeAllow() || !x.GetFailureModeAllowHeaderAdd() {
		bad("ext_authz must fail open with a marker, as the other shipped configurations: failure_mode_allow and failure_mode_allow_header_add")
	}
	if x.GetStatusOnError().GetCode() != typev3.StatusCode_ServiceUnavailable {
		bad("status_on_error %v, want ServiceUnavailable", x.GetStatusOnError().GetCode())
	}

	// What Envoy sends: the headers the policies read, and the client's address.
	if !matchesAny(x.GetAllowedHeaders(), "x-forwarded-for") {
		bad("allowed_headers does not list x-forwarded-for: Envoy sends only Host, Authorization, method and path to an HTTP authorizer")
	}
	for _, pol := range fc.cfg.Policies {
		for _, k := range pol.Key {
			if name, ok := strings.CutPrefix(k, "header:"); ok && !matchesAny(x.GetAllowedHeaders(), strings.ToLower(name)) {
				bad("policy %s keys on %s, which allowed_headers does not list", pol.Name, k)
			}
		}
	}
	// Never content-type: Envoy's HTTP client marks an authorization request with a gRPC one gRPC
	// (AsyncStreamImpl::sendHeaders, source/common/http/async_client_impl.cc, from
	// Grpc::Common::isGrpcRequestHeaders), and the router's local replies to it (timeout, no
	// healthy host) are then :status 200 with grpc-status, which toResponse
	// (ext_authz_http_impl.cc) reads as an allow: envoyproxy/envoy#32476.
	if matchesAny(x.GetAllowedHeaders(), "content-type") {
		bad("allowed_headers lets content-type through: a gRPC one makes Envoy read its own errors (Floodgate down or slow) as allows (envoyproxy/envoy#32476)")
	}
	if fc.cfg.HTTPAuthz.GRPCStatusOnDeny != "always" {
		bad("http_authz.grpc_status_on_deny %q, want always: without content-type the door cannot tell a gRPC caller, whose denial Envoy would send as UNAVAILABLE", fc.cfg.HTTPAuthz.GRPCStatusOnDeny)
	}
	if hs.GetPathPrefix() != fc.pathPrefix || (hs.GetPathPrefix() != "" && !strings.HasPrefix(hs.GetPathPrefix(), "/")) {
		bad("http_service.path_prefix %q, http_authz.path_prefix %q: want the same, starting with /", hs.GetPathPrefix(), fc.pathPrefix)
	}
	// Envoy's HTTP client appends Envoy's own address to the X-Forwarded-For it sends
	// (AsyncStreamImpl::sendHeaders, source/common/http/async_client_impl.cc: send_xff is true
	// unless a caller turns it off, and RawHttpClientImpl::check does not): the door counts one
	// hop more than a Check from the same Envoy, whose X-Forwarded-For lacks it.
	if got, want := *fc.cfg.HTTPAuthz.TrustedHops, int(hb.hcm.GetXffNumTrustedHops())+1; got != want {
		bad("http_authz.trusted_hops %d, want xff_num_trusted_hops + 1 = %d (Envoy's HTTP client appends its own address)", got, want)
	}
	if got, want := fc.cfg.ClientIP.TrustedHops, int(hb.hcm.GetXffNumTrustedHops()); got != want {
		bad("client_ip.trusted_hops %d, want xff_num_trusted_hops = %d, what a Check from this Envoy needs", got, want)
	}
	if !hb.hcm.GetUseRemoteAddress().GetValue() {
		bad("use_remote_address must be true at the edge")
	}

	// What Envoy passes back. On success only the listed headers; on a denial, a non-empty list
	// gives the listed ones plus :status, content-length, www-authenticate and location.
	resp := hs.GetAuthorizationResponse()
	for _, h := range rateLimitHeaders {
		if !matchesAny(resp.GetAllowedClientHeadersOnSuccess(), h) {
			bad("allowed_client_headers_on_success does not list %s: the client of an allowed request would not see it", h)
		}
	}
	if len(resp.GetAllowedClientHeaders().GetPatterns()) > 0 {
		for _, h := range append(slices.Clone(rateLimitHeaders), "retry-after", "content-type", "grpc-status", "grpc-retry-pushback-ms") {
			if !matchesAny(resp.GetAllowedClientHeaders(), h) {
				bad("allowed_client_headers does not list %s: a denied client would not see it", h)
			}
		}
	}

	// The cluster: HTTP/1.1 to listen.http, health-checked at listen.admin's /readyz.
	name := hs.GetServerUri().GetCluster()
	c, ok := hb.clusters[name]
	if !ok {
		bad("http_service names cluster %q, which is not defined", name)
		return p
	}
	if opts, ok := c.GetTypedExtensionProtocolOptions()[http2Options]; ok {
		if po, err := unpack(opts, &upstreamhttpv3.HttpProtocolOptions{}); err == nil && po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil {
			bad("cluster %s speaks HTTP/2; the HTTP door speaks HTTP/1.1", name)
		}
	}
	for _, lle := range c.GetLoadAssignment().GetEndpoints() {
		for _, e := range lle.GetLbEndpoints() {
			ep := e.GetEndpoint()
			if got := ep.GetAddress().GetSocketAddress().GetPortValue(); got != port(fc.listenHTTP) {
				bad("cluster %s points at port %d but listen.http is %s", name, got, fc.listenHTTP)
			}
			if got := ep.GetHealthCheckConfig().GetPortValue(); got != port(fc.cfg.Listen.Admin) {
				bad("cluster %s health-checks port %d but /readyz is on listen.admin %s", name, got, fc.cfg.Listen.Admin)
			}
		}
	}
	checked := false
	for _, hc := range c.GetHealthChecks() {
		checked = checked || hc.GetHttpHealthCheck().GetPath() == "/readyz"
		need := hc.GetInterval().AsDuration()*time.Duration(hc.GetUnhealthyThreshold().GetValue()) + hc.GetTimeout().AsDuration()
		if fc.cfg.Listen.DrainDelay.Duration < need {
			bad("listen.drain_delay (%v) is shorter than the health check needs to see /readyz fail (%v)", fc.cfg.Listen.DrainDelay.Duration, need)
		}
	}
	if !checked {
		bad("cluster %s should health-check /readyz (Floodgate answers 503 there while it drains)", name)
	}
	return p
}

func readHTTPExample(t *testing.T) (*httpBootstrap, *httpDoorConfig, []byte, []byte) {
	t.Helper()
	envoySrc, err := os.ReadFile(httpExample)
	if err != nil {
		t.Fatal(err)
	}
	fgSrc, err := os.ReadFile(httpFloodgate)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := loadHTTPBootstrap(envoySrc)
	if err != nil {
		t.Fatalf("%s: %v", httpExample, err)
	}
	c, err := doors.Load(httpFloodgate)
	if err != nil {
		t.Fatalf("%s: %v", httpFloodgate, err)
	}
	return hb, newHTTPDoorConfig(c), envoySrc, fgSrc
}

// TestTheHTTPServiceExampleFitsTheDoor decodes envoy/http/envoy.yaml as Envoy
// would and holds it to the Floodgate configuration beside it.
func TestTheHTTPServiceExampleFitsTheDoor(t *testing.T) {
	hb, fc, _, _ := readHTTPExample(t)
	if fc.listenHTTP == "" || !slices.ContainsFunc(doors.Describe(fc.cfg), func(s string) bool { return strings.HasPrefix(s, "HTTP authorization") }) {
		t.Fatalf("%s does not turn the HTTP door on", httpFloodgate)
	}
	for _, problem := range httpProblems(hb, fc) {
		t.Error(problem)
	}
}

// TestTheHTTPServiceChecksCanFail: each broken copy is caught by the check
// that guards against it.
func TestTheHTTPServiceChecksCanFail(t *testing.T) {
	_, _, envoySrc, fgSrc := readHTTPExample(t)
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"unknown field", "envoy", "path_prefix: /authz", "path_prefx: /authz", "path_prefx"},
		{"deprecated request allowed_headers", "envoy", "                        authorization_response:", "                        authorization_request: { allowed_headers: { patterns: [{ exact: x-api-key }] } }\n                        authorization_response:", "deprecated"},
		{"no x-forwarded-for", "envoy", "- exact: x-forwarded-for", "- exact: x-real-ip", "x-forwarded-for"},
		{"no x-api-key for a policy keyed on it", "envoy", "- exact: x-api-key", "- exact: x-other", "header:x-api-key"},
		{"no retry-after on denial", "envoy", "- exact: retry-after", "- exact: x-retry", "retry-after"},
		{"no content-type on denial", "envoy", "- exact: content-type", "- exact: x-content", "content-type"},
		{"no grpc-status on denial", "envoy", "- exact: grpc-status\n", "- exact: x-grpc\n", "grpc-status"},
		{"content-type sent to the door", "envoy", "- exact: x-forwarded-for", "- exact: x-forwarded-for\n                          - prefix: content-", "32476"},
		{"gRPC status only for gRPC content", "floodgate", "  grpc_status_on_deny: always\n", "", "grpc_status_on_deny"},
		{"no RateLimit on success", "envoy", "allowed_client_headers_on_success:\n                            patterns:\n                              - exact: ratelimit-limit", "allowed_client_headers_on_success:\n                            patterns:\n                              - exact: x-limit", "ratelimit-limit"},
		{"timeout below the store's", "envoy", "timeout: 0.25s\n                        # The authorization", "timeout: 0.04s\n                        # The authorization", "server_uri.timeout"},
		{"fail closed", "envoy", "failure_mode_allow: true", "failure_mode_allow: false", "fail open"},
		{"HTTP/2 to the door", "envoy", "      connect_timeout: 0.25s\n", "      connect_timeout: 0.25s\n      typed_extension_protocol_options:\n        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n          \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n          explicit_http_config: { http2_protocol_options: {} }\n", "HTTP/2"},
		{"health check elsewhere", "envoy", "health_check_config: { port_value: 9192 }", "health_check_config: { port_value: 9193 }", "listen.admin"},
		{"the door's hops as for gRPC", "floodgate", "  trusted_hops: 1", "  trusted_hops: 0", "http_authz.trusted_hops"},
		{"the gRPC hops as for the door", "floodgate", "  trusted_hops: 0\n", "  trusted_hops: 1\n", "client_ip.trusted_hops"},
		{"door port", "floodgate", "http: 0.0.0.0:9193", "http: 0.0.0.0:9194", "listen.http"},
		{"path prefix", "floodgate", "path_prefix: /authz", "path_prefix: /check", "path_prefix"},
		{"drain shorter than the health check", "floodgate", "drain_delay: 5s", "drain_delay: 4s", "drain_delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, f := envoySrc, fgSrc
			if tc.file == "envoy" {
				e = mutate(t, envoySrc, tc.old, tc.new)
			} else {
				f = mutate(t, fgSrc, tc.old, tc.new)
			}
			hb, err := loadHTTPBootstrap(e)
			var got []string
			if err != nil {
				got = []string{err.Error()}
			} else if fc, err := parseHTTPDoorConfig(f); err != nil {
				got = []string{err.Error()}
			} else {
				got = httpProblems(hb, fc)
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("not caught: %v (want %q)", got, tc.want)
			}
		})
	}
}
