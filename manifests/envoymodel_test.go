package manifests

import (
	"context"
	"fmt"
	"net"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	// The typed_config messages of envoy/envoy.yaml and envoy/ratelimit/envoy.yaml, registered so
	// that their Any fields decode.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// What Envoy sends Floodgate, modelled from Envoy's own source so that every recipe, whichever
// control plane wrote its Envoy configuration, is followed the same way once that configuration is
// known: the rate limit descriptors a route's actions build, and the CheckRequest of ext_authz.

// envoyRequest is what a route's rate limit actions read from a request.
type envoyRequest struct {
	// remote is the downstream address Envoy trusts (the peer, or the address
	// xff_num_trusted_hops picks from X-Forwarded-For).
	remote string
	// headers are the request's headers, lower-case names.
	headers map[string]string
	// cluster is the route's upstream cluster (destination_cluster).
	cluster string
}

// descriptorsOf are the descriptors Envoy's rate limit filter sends for a request on a route
// (source/extensions/filters/http/ratelimit/ratelimit.cc, Filter::populateRateLimitDescriptors):
// the route's rate_limits, then the virtual host's as vh_rate_limits says (OVERRIDE, the default:
// only when the route has none; INCLUDE: as well; IGNORE: never). Only entries of the filter's
// stage (0 unless set) count. Each entry becomes one descriptor through its actions
// (source/common/router/router_ratelimit.cc, RateLimitPolicyEntryImpl::populateDescriptors and
// the *Action::populateDescriptor functions); a descriptor one of whose actions produces no entry
// is not sent at all.
func descriptorsOf(route, vhost []*routev3.RateLimit, vh ratelimitv3.RateLimitPerRoute_VhRateLimitsOptions, req envoyRequest) ([][]rls.Entry, error) {
	entries := append([]*routev3.RateLimit(nil), route...)
	switch vh {
	case ratelimitv3.RateLimitPerRoute_INCLUDE:
		entries = append(entries, vhost...)
	case ratelimitv3.RateLimitPerRoute_OVERRIDE:
		if len(route) == 0 {
			entries = append(entries, vhost...)
		}
	}
	var out [][]rls.Entry
	for _, rl := range entries {
		if rl.GetStage().GetValue() != 0 {
			continue
		}
		d, ok, err := descriptorOf(rl, req)
		if err != nil {
			return nil, err
		}
		if ok && len(d) > 0 {
			out = append(out, d)
		}
	}
	return out, nil
}

// descriptorOf builds one descriptor; ok is false when an action produced no entry and the
// descriptor is dropped.
func descriptorOf(rl *routev3.RateLimit, req envoyRequest) (d []rls.Entry, ok bool, err error) {
	for _, a := range rl.GetActions() {
		switch {
		case a.GetGenericKey() != nil:
			// GenericKeyAction: descriptor_key defaults to "generic_key".
			k := a.GetGenericKey().GetDescriptorKey()
			if k == "" {
				k = "generic_key"
			}
			d = append(d, rls.Entry{Key: k, Value: a.GetGenericKey().GetDescriptorValue()})
		case a.GetRemoteAddress() != nil:
			// RemoteAddressAction: only an IP address makes an entry.
			if net.ParseIP(req.remote) == nil {
				return nil, false, nil
			}
			d = append(d, rls.Entry{Key: "remote_address", Value: req.remote})
		case a.GetRequestHeaders() != nil:
			// RequestHeadersAction: an absent header drops the descriptor unless skip_if_absent.
			h := a.GetRequestHeaders()
			v, present := req.headers[h.GetHeaderName()]
			if !present {
				if h.GetSkipIfAbsent() {
					continue
				}
				return nil, false, nil
			}
			d = append(d, rls.Entry{Key: h.GetDescriptorKey(), Value: v})
		case a.GetDestinationCluster() != nil:
			d = append(d, rls.Entry{Key: "destination_cluster", Value: req.cluster})
		default:
			return nil, false, fmt.Errorf("a rate limit action this test does not model: %v", a)
		}
	}
	return d, true, nil
}

// loadBootstrap decodes an Envoy bootstrap as Envoy reads it: unknown fields are errors, every
// typed_config must be a registered type, and the result must pass Envoy's validation rules.
func loadBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, bs); err != nil {
		return nil, err
	}
	return bs, bs.ValidateAll()
}

// checkRequest is an HTTP request's CheckRequest as Envoy's ext_authz filter fills it
// (source/extensions/filters/common/ext_authz/check_request_utils.cc, CheckRequestUtils::createHttpCheck):
// method, path and host in their fields and the headers (all of them, or only allowed ones when
// the proxy lists them: the caller passes what its proxy sends), the downstream peer's address and
// certificate principal, the route's context_extensions.
func checkRequest(method, path, host string, headers map[string]string, peer, principal string, contextExtensions map[string]string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Principal: principal, Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: peer, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: method, Path: path, Host: host, Headers: headers,
		}},
		ContextExtensions: contextExtensions,
	}}
}

// decideCheck sends a Check through Floodgate's own server with cfg's policies (an in-memory
// store: which policy applies does not depend on the store) and reports whether a policy matched
// and found an identity to key on.
func decideCheck(cfg *door.Config, req *authv3.CheckRequest) (matched, keyed bool, err error) {
	srv := extauthz.NewServer(cfg.Engine, storetest.Memory(nil), extauthz.ServerOptions{})
	if _, err := srv.Check(context.Background(), req); err != nil {
		return false, false, err
	}
	m := srv.Metrics()
	matched = testutil.ToFloat64(m.Checks.WithLabelValues("unmatched")) == 0
	keyed = total(m.IdentityMissing) == 0
	return matched, keyed, nil
}

// total sums a collector's counters (a vector's children exist per policy before any counts).
func total(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) == nil {
			sum += pb.GetCounter().GetValue()
		}
	}
	return sum
}
