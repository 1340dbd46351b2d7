// Package envoy holds the Envoy configurations users paste (envoy.yaml, jwt/envoy.yaml) and the
// Floodgate configurations beside them. Its tests hold them to Envoy's real v3 schema
// (go-control-plane: unknown fields are errors, every typed_config resolves and validates) and to
// each other.
package envoy

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	jwtv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// example is one Envoy configuration and the Floodgate configuration it talks to.
type example struct {
	name      string
	envoy     string // path of the Envoy bootstrap
	floodgate string // path of the Floodgate configuration beside it
	// service is the e2e compose service that runs this Floodgate: the host the Envoy cluster names.
	service string
	// notInCompose: e2e/docker-compose.yaml does not run it (it needs a TLS certificate).
	notInCompose bool
}

var examples = []example{
	{name: "edge", envoy: "envoy.yaml", floodgate: "floodgate.yaml", service: "floodgate"},
	{name: "jwt", envoy: "jwt/envoy.yaml", floodgate: "jwt/floodgate.yaml", service: "floodgate-jwt"},
	{name: "fingerprint", envoy: "fingerprint/envoy.yaml", floodgate: "fingerprint/floodgate.yaml", service: "floodgate", notInCompose: true},
}

const (
	extAuthzFilter = "envoy.filters.http.ext_authz"
	jwtFilter      = "envoy.filters.http.jwt_authn"
	mutationFilter = "envoy.filters.http.header_mutation"
	tlsInspector   = "envoy.filters.listener.tls_inspector"
	routerFilter   = "envoy.filters.http.router"
	hcmFilter      = "envoy.filters.network.http_connection_manager"
	http2Options   = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	healthService  = "envoy.service.auth.v3.Authorization"
	composeFile    = "../e2e/docker-compose.yaml"
)

// loadBootstrap decodes an Envoy YAML bootstrap as Envoy would: strictly (an unknown field or
// duplicate key is an error, an Any whose type is not linked in is an error), then runs the
// protoc-gen-validate rules on the bootstrap and on every message packed in an Any inside it.
// It returns the number of Any messages it validated.
func loadBootstrap(data []byte) (*bootstrapv3.Bootstrap, int, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, 0, fmt.Errorf("yaml: %w", err)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, bs); err != nil {
		return nil, 0, fmt.Errorf("protojson: %w", err)
	}
	if err := bs.ValidateAll(); err != nil {
		return nil, 0, fmt.Errorf("validate: %w", err)
	}
	n, err := validateAnys(bs.ProtoReflect(), "bootstrap")
	return bs, n, err
}

// validateAnys walks m and unpacks every google.protobuf.Any: its type must be registered (the
// extension exists and is linked in) and its content must pass ValidateAll — which PGV does not do
// for packed messages on its own.
func validateAnys(m protoreflect.Message, path string) (int, error) {
	count := 0
	var firstErr error
	visit := func(sub protoreflect.Message, at string) {
		if firstErr != nil {
			return
		}
		if sub.Descriptor().FullName() == "google.protobuf.Any" {
			a, ok := sub.Interface().(*anypb.Any)
			if !ok {
				firstErr = fmt.Errorf("%s: Any of unexpected Go type %T", at, sub.Interface())
				return
			}
			inner, err := a.UnmarshalNew()
			if err != nil {
				firstErr = fmt.Errorf("%s: %s: %w", at, a.GetTypeUrl(), err)
				return
			}
			count++
			if v, ok := inner.(interface{ ValidateAll() error }); ok {
				if err := v.ValidateAll(); err != nil {
					firstErr = fmt.Errorf("%s (%s): %w", at, a.GetTypeUrl(), err)
					return
				}
			}
			sub = inner.ProtoReflect()
			at += "<" + string(sub.Descriptor().FullName()) + ">"
		}
		n, err := validateAnys(sub, at)
		count += n
		if err != nil {
			firstErr = err
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		at := path + "." + string(fd.Name())
		// Envoy warns about deprecated fields and later rejects them: the examples use none.
		if opts, ok := fd.Options().(*descriptorpb.FieldOptions); ok && opts.GetDeprecated() {
			firstErr = fmt.Errorf("%s: deprecated field", at)
			return false
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				visit(l.Get(i).Message(), fmt.Sprintf("%s[%d]", at, i))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv.Message(), fmt.Sprintf("%s[%s]", at, k.String()))
				return firstErr == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visit(v.Message(), at)
		}
		return firstErr == nil
	})
	return count, firstErr
}

// envoyConfig is what the checks need from a bootstrap, unpacked.
type envoyConfig struct {
	bs       *bootstrapv3.Bootstrap
	hcm      *hcmv3.HttpConnectionManager
	filters  []string // http filter names in order
	extAuthz *extauthzv3.ExtAuthz
	jwt      *jwtv3.JwtAuthentication         // nil when the chain has no jwt_authn
	mutation *headermutationv3.HeaderMutation // nil when the chain has no header_mutation
	tls      *tlsinspectorv3.TlsInspector     // nil when no listener has a tls_inspector
	clusters map[string]*clusterv3.Cluster
	routes   []*routev3.Route
}

func unpack[T proto.Message](a *anypb.Any, into T) (T, error) {
	if a == nil {
		return into, fmt.Errorf("no typed_config")
	}
	return into, a.UnmarshalTo(into)
}

func inspect(bs *bootstrapv3.Bootstrap) (*envoyConfig, error) {
	ec := &envoyConfig{bs: bs, clusters: map[string]*clusterv3.Cluster{}}
	for _, c := range bs.GetStaticResources().GetClusters() {
		ec.clusters[c.GetName()] = c
	}
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, lf := range l.GetListenerFilters() {
			if lf.GetName() == tlsInspector {
				ti, err := unpack(lf.GetTypedConfig(), &tlsinspectorv3.TlsInspector{})
				if err != nil {
					return nil, fmt.Errorf("%s: %w", tlsInspector, err)
				}
				ec.tls = ti
			}
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != hcmFilter {
					continue
				}
				if ec.hcm != nil {
					return nil, fmt.Errorf("more than one http_connection_manager: the checks assume one")
				}
				hcm, err := unpack(f.GetTypedConfig(), &hcmv3.HttpConnectionManager{})
				if err != nil {
					return nil, fmt.Errorf("http_connection_manager: %w", err)
				}
				ec.hcm = hcm
			}
		}
	}
	if ec.hcm == nil {
		return nil, fmt.Errorf("no listener with an http_connection_manager")
	}
	for _, hf := range ec.hcm.GetHttpFilters() {
		ec.filters = append(ec.filters, hf.GetName())
		var err error
		switch hf.GetName() {
		case extAuthzFilter:
			ec.extAuthz, err = unpack(hf.GetTypedConfig(), &extauthzv3.ExtAuthz{})
		case jwtFilter:
			ec.jwt, err = unpack(hf.GetTypedConfig(), &jwtv3.JwtAuthentication{})
		case mutationFilter:
			ec.mutation, err = unpack(hf.GetTypedConfig(), &headermutationv3.HeaderMutation{})
		case routerFilter:
			_, err = unpack(hf.GetTypedConfig(), &routerv3.Router{})
		}
		if err != nil {
			return nil, fmt.Errorf("http filter %s: %w", hf.GetName(), err)
		}
	}
	if ec.extAuthz == nil {
		return nil, fmt.Errorf("no %s http filter", extAuthzFilter)
	}
	for _, vh := range ec.hcm.GetRouteConfig().GetVirtualHosts() {
		if _, ok := vh.GetTypedPerFilterConfig()[extAuthzFilter]; ok {
			return nil, fmt.Errorf("virtual host %s: per-filter config on the virtual host is not covered by these checks; set it per route", vh.GetName())
		}
		ec.routes = append(ec.routes, vh.GetRoutes()...)
	}
	return ec, nil
}

// routeAuthz is one route as ext_authz sees it.
type routeAuthz struct {
	name     string // the route's match, for messages
	path     string // a request path the route matches
	disabled bool
	context  map[string]string
	// metadata is the route's metadata.filter_metadata.floodgate, which the access log reads
	// (%METADATA(ROUTE:floodgate:KEY)%) since Envoy cannot log context_extensions; nil when unset.
	metadata *structpb.Struct
}

func routesOf(ec *envoyConfig) ([]routeAuthz, error) {
	var out []routeAuthz
	for _, r := range ec.routes {
		ra := routeAuthz{}
		switch {
		case r.GetMatch().GetPath() != "":
			ra.path, ra.name = r.GetMatch().GetPath(), "path "+r.GetMatch().GetPath()
		case r.GetMatch().GetPrefix() != "":
			ra.path, ra.name = r.GetMatch().GetPrefix(), "prefix "+r.GetMatch().GetPrefix()
		default:
			return nil, fmt.Errorf("route %v: only path and prefix matches are covered by these checks", r.GetMatch())
		}
		ra.metadata = r.GetMetadata().GetFilterMetadata()["floodgate"]
		if a, ok := r.GetTypedPerFilterConfig()[extAuthzFilter]; ok {
			per, err := unpack(a, &extauthzv3.ExtAuthzPerRoute{})
			if err != nil {
				return nil, fmt.Errorf("route %s: %w", ra.name, err)
			}
			ra.disabled = per.GetDisabled()
			ra.context = per.GetCheckSettings().GetContextExtensions()
		}
		out = append(out, ra)
	}
	return out, nil
}

// subset reports whether every key of want is in have with the same value.
func subset(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// consistency lists every way the Envoy configuration and the Floodgate configuration beside it
// disagree; empty means they fit.
func consistency(ec *envoyConfig, cfg *door.Config, service string) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	// The connection manager: client addresses as Floodgate reads them.
	if !ec.hcm.GetUseRemoteAddress().GetValue() {
		bad("http_connection_manager.use_remote_address must be true at the edge (Floodgate's client_ip reads the X-Forwarded-For Envoy appends)")
	}
	if got, want := int(ec.hcm.GetXffNumTrustedHops()), cfg.ClientIP.TrustedHops; got != want {
		bad("xff_num_trusted_hops is %d but Floodgate's client_ip.trusted_hops is %d", got, want)
	}

	// Paths: one form for routes, Floodgate and the upstream. By default Envoy keeps %2F as it is
	// (path_with_escaped_slashes_action KEEP_UNCHANGED) and resolves no dot segment
	// (ConnectionManagerUtility::maybeNormalizePath, source/common/http/conn_manager_utility.cc).
	if a := ec.hcm.GetPathWithEscapedSlashesAction(); a != hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT {
		bad("http_connection_manager.path_with_escaped_slashes_action must be UNESCAPE_AND_REDIRECT (got %v): /v1%%2Fsearch would miss the /v1/search route", a)
	}
	if !ec.hcm.GetNormalizePath().GetValue() || !ec.hcm.GetMergeSlashes() {
		bad("http_connection_manager must set normalize_path and merge_slashes")
	}

	// The filter chain: ext_authz before the router, the router last, jwt_authn (if any) first.
	az := slices.Index(ec.filters, extAuthzFilter)
	if len(ec.filters) == 0 || ec.filters[len(ec.filters)-1] != routerFilter {
		bad("the router must be the last http filter (got %v)", ec.filters)
	}
	if j := slices.Index(ec.filters, jwtFilter); j >= 0 && j > az {
		bad("jwt_authn must come before ext_authz, or Floodgate never sees the claims (got %v)", ec.filters)
	}

	// ext_authz itself.
	x := ec.extAuthz
	if x.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		bad("ext_authz.transport_api_version must be V3 (got %v)", x.GetTransportApiVersion())
	}
	if !x.GetFailureModeAllow() || !x.GetFailureModeAllowHeaderAdd() {
		bad("ext_authz must fail open with a marker: failure_mode_allow and failure_mode_allow_header_add")
	}
	if x.GetStatusOnError().GetCode() != typev3.StatusCode_ServiceUnavailable {
		bad("ext_authz.status_on_error must be 503 (got %v)", x.GetStatusOnError().GetCode())
	}
	if !x.GetEncodeRawHeaders() {
		bad("ext_authz.encode_raw_headers should be true (Envoy >= 1.30; Floodgate reads header_map)")
	}
	gs := x.GetGrpcService()
	timeout := gs.GetTimeout().AsDuration()
	if gs.GetTimeout() == nil || timeout <= cfg.Store.Redis.Timeout {
		bad("ext_authz grpc_service.timeout (%v) must be above Floodgate's store.redis.timeout (%v), so Floodgate's failure mode answers before Envoy's", timeout, cfg.Store.Redis.Timeout)
	}
	if timeout > time.Second {
		bad("ext_authz grpc_service.timeout (%v) is above 1s: every request would wait that long on a hung Floodgate", timeout)
	}

	// A Check that fails to connect (a replica that just went away) is retried on another replica,
	// not handed to failure_mode_allow. ext_authz's gRPC client applies GrpcService.retry_policy;
	// envoy_grpc.retry_policy is honoured for xDS streams only (its proto comment says so).
	rp := gs.GetRetryPolicy()
	if rp == nil || !strings.Contains(rp.GetRetryOn(), "connect-failure") || (rp.GetNumRetries() != nil && rp.GetNumRetries().GetValue() == 0) {
		bad("ext_authz grpc_service.retry_policy must retry on connect-failure (got %v): a replica that just stopped would otherwise send its Checks to failure_mode_allow", rp)
	}
	if gs.GetEnvoyGrpc().GetRetryPolicy() != nil {
		bad("ext_authz grpc_service.envoy_grpc.retry_policy applies to xDS streams only: set grpc_service.retry_policy")
	}
	if rp != nil && len(rp.GetRetryHostPredicate()) == 0 {
		bad("ext_authz grpc_service.retry_policy should retry on another host (retry_host_predicate previous_hosts)")
	}

	// The cluster Envoy calls: HTTP/2, health-checked, at Floodgate's listen.grpc.
	name := gs.GetEnvoyGrpc().GetClusterName()
	c, ok := ec.clusters[name]
	if !ok {
		bad("ext_authz names cluster %q, which is not defined", name)
		return p
	}
	opts, ok := c.GetTypedExtensionProtocolOptions()[http2Options]
	if !ok {
		bad("cluster %s has no %s: gRPC needs HTTP/2", name, http2Options)
	} else if po, err := unpack(opts, &upstreamhttpv3.HttpProtocolOptions{}); err != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		bad("cluster %s must set explicit_http_config.http2_protocol_options (err %v)", name, err)
	}
	hcOK := false
	for _, hc := range c.GetHealthChecks() {
		if hc.GetGrpcHealthCheck().GetServiceName() == healthService {
			hcOK = true
		}
	}
	if !hcOK {
		bad("cluster %s should health-check gRPC service %s (Floodgate reports NOT_SERVING while it drains)", name, healthService)
	}
	// Envoy learns that a replica stops only from its active health check: interval ×
	// unhealthy_threshold (+ the last check's timeout) after NOT_SERVING. Floodgate must keep
	// answering that long, or every Check sent meanwhile is an error, let through unlimited by
	// failure_mode_allow (HealthCheckerImplBase, source/common/upstream/health_checker_impl.cc).
	for _, hc := range c.GetHealthChecks() {
		need := hc.GetInterval().AsDuration()*time.Duration(hc.GetUnhealthyThreshold().GetValue()) + hc.GetTimeout().AsDuration()
		if cfg.Listen.DrainDelay.Duration < need {
			bad("listen.drain_delay (%v) is shorter than cluster %s's health check needs to see NOT_SERVING: interval %v × unhealthy_threshold %d + timeout %v = %v",
				cfg.Listen.DrainDelay.Duration, name, hc.GetInterval().AsDuration(), hc.GetUnhealthyThreshold().GetValue(), hc.GetTimeout().AsDuration(), need)
		}
	}
	_, listenPort, err := net.SplitHostPort(cfg.Listen.GRPC)
	if err != nil {
		bad("listen.grpc %q: %v", cfg.Listen.GRPC, err)
	}
	var eps []*corev3.SocketAddress
	for _, lle := range c.GetLoadAssignment().GetEndpoints() {
		for _, e := range lle.GetLbEndpoints() {
			eps = append(eps, e.GetEndpoint().GetAddress().GetSocketAddress())
		}
	}
	if len(eps) == 0 {
		bad("cluster %s has no endpoints", name)
	}
	for _, sa := range eps {
		if strconv.Itoa(int(sa.GetPortValue())) != listenPort {
			bad("cluster %s points at port %d but Floodgate's listen.grpc is %s", name, sa.GetPortValue(), cfg.Listen.GRPC)
		}
		if sa.GetAddress() != service {
			bad("cluster %s points at host %q, want the compose service %q", name, sa.GetAddress(), service)
		}
	}

	// Routes select policies; every context policy is selected by some route.
	routes, err := routesOf(ec)
	if err != nil {
		bad("%v", err)
		return p
	}
	disabled := 0
	used := map[string]bool{}
	for _, r := range routes {
		if r.disabled {
			disabled++
			continue
		}
		if len(r.context) == 0 {
			bad("route %s sets no context_extensions: say which policy applies", r.name)
			continue
		}
		matched := false
		for _, pol := range cfg.Policies {
			if len(pol.Match.Context) > 0 && subset(pol.Match.Context, r.context) {
				matched = true
				used[pol.Name] = true
			}
		}
		if !matched {
			bad("route %s sets context_extensions %v, which no Floodgate policy's match.context selects", r.name, r.context)
		}
	}
	// Envoy cannot log a route's context_extensions; the access log replay reads logs the same
	// values from the route's metadata, so the two must agree on every route.
	for _, r := range routes {
		md := map[string]any{}
		for k, v := range r.metadata.GetFields() {
			md[k] = v.AsInterface()
		}
		ctx := map[string]any{}
		for k, v := range r.context {
			ctx[k] = v
		}
		if !reflect.DeepEqual(md, ctx) {
			bad("route %s: metadata.filter_metadata.floodgate %v differs from its context_extensions %v: the access log would tell floodgate replay another route", r.name, md, ctx)
		}
	}
	if disabled == 0 {
		bad("no route disables ext_authz (a health check route should not cost tokens)")
	}
	for _, pol := range cfg.Policies {
		if len(pol.Match.Context) > 0 && !used[pol.Name] {
			bad("policy %s matches context %v, which no route sets: it can never apply", pol.Name, pol.Match.Context)
		}
	}

	// Fingerprints: a fingerprint header Floodgate hashes must be Envoy's, never the client's.
	// Envoy sends no TLS fingerprint in a CheckRequest (AttributeContext.TLSSession has the SNI only;
	// CheckRequestUtils::setTLSSession), and a route's request_headers_to_add is applied by the
	// router, after ext_authz: the header must be set by header_mutation before ext_authz, after
	// removing the client's copy, from a fingerprint tls_inspector computes.
	for _, pol := range cfg.Policies {
		if !slices.Contains(pol.Key, "fingerprint") {
			continue
		}
		tlsHeaders := 0
		for _, h := range pol.FingerprintHeaders {
			h = strings.ToLower(h)
			var operator string
			var enabled bool
			switch h {
			case "x-ja3":
				operator, enabled = "%TLS_JA3_FINGERPRINT%", ec.tls.GetEnableJa3Fingerprinting().GetValue()
			case "x-ja4":
				operator, enabled = "%TLS_JA4_FINGERPRINT%", ec.tls.GetEnableJa4Fingerprinting().GetValue()
			default:
				continue
			}
			tlsHeaders++
			if !enabled {
				bad("policy %s hashes %s, but no listener's tls_inspector enables that fingerprint", pol.Name, h)
			}
			if m := slices.Index(ec.filters, mutationFilter); m < 0 || m > az {
				bad("policy %s hashes %s: a header_mutation filter must set it before ext_authz (got %v)", pol.Name, h, ec.filters)
				continue
			}
			removed, set := false, false
			for _, mu := range ec.mutation.GetMutations().GetRequestMutations() {
				switch {
				case strings.EqualFold(mu.GetRemove(), h):
					removed = true
				case strings.EqualFold(mu.GetAppend().GetHeader().GetKey(), h):
					set = removed && mu.GetAppend().GetHeader().GetValue() == operator &&
						mu.GetAppend().GetAppendAction() == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
				}
			}
			if !set {
				bad("policy %s hashes %s: header_mutation must first remove the client's %s, then set it to %s", pol.Name, h, h, operator)
			}
		}
		if tlsHeaders == 0 {
			bad("policy %s keys on a fingerprint of client-written headers only (%v): add x-ja4, which Envoy sets", pol.Name, pol.FingerprintHeaders)
		}
	}

	// Metadata keys: the namespace must be forwarded, and jwt_authn must write the path.
	for _, pol := range cfg.Policies {
		for _, k := range pol.Key {
			rest, ok := strings.CutPrefix(k, "metadata:")
			if !ok {
				continue
			}
			ns, path, _ := strings.Cut(rest, ":")
			if !slices.Contains(x.GetMetadataContextNamespaces(), ns) {
				bad("policy %s keys on metadata namespace %s, which ext_authz.metadata_context_namespaces does not forward", pol.Name, ns)
			}
			if ns == jwtFilter {
				top, _, _ := strings.Cut(path, ".")
				found := false
				for _, prov := range ec.jwt.GetProviders() {
					if prov.GetPayloadInMetadata() == top {
						found = true
					}
				}
				if !found {
					bad("policy %s reads %s, but no jwt_authn provider sets payload_in_metadata: %s", pol.Name, k, top)
				}
			}
		}
	}
	return p
}

func readExample(t *testing.T, ex example) (*envoyConfig, *door.Config) {
	t.Helper()
	data, err := os.ReadFile(ex.envoy)
	if err != nil {
		t.Fatal(err)
	}
	bs, anys, err := loadBootstrap(data)
	if err != nil {
		t.Fatalf("%s: %v", ex.envoy, err)
	}
	// Listener filter, access log, http filters, per-route configs, cluster options: a walk that
	// found few Any messages did not walk.
	if anys < 6 {
		t.Fatalf("%s: only %d typed_config messages validated", ex.envoy, anys)
	}
	ec, err := inspect(bs)
	if err != nil {
		t.Fatalf("%s: %v", ex.envoy, err)
	}
	cfg, err := doors.Load(ex.floodgate)
	if err != nil {
		t.Fatalf("doors.Load(%s): %v", ex.floodgate, err)
	}
	return ec, cfg
}

func TestExamplesDecodeAndValidate(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			ec, cfg := readExample(t, ex)
			if ec.bs.GetAdmin().GetAddress().GetSocketAddress().GetPortValue() == 0 {
				t.Errorf("%s: no admin address", ex.envoy)
			}
			if cfg.Store.Backend != "redis" {
				t.Errorf("%s: store.backend is %q; the examples share buckets across replicas through Redis", ex.floodgate, cfg.Store.Backend)
			}
			for _, p := range consistency(ec, cfg, ex.service) {
				t.Errorf("%s vs %s: %s", ex.envoy, ex.floodgate, p)
			}
		})
	}
}

// TestComposeRunsTheExamples ties each example to the compose file that runs it: the Envoy
// cluster's host is a compose service, and that service mounts this Floodgate configuration.
func TestComposeRunsTheExamples(t *testing.T) {
	data, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Volumes []string `json:"volumes"`
		} `json:"services"`
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &compose); err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples {
		if ex.notInCompose {
			continue
		}
		svc, ok := compose.Services[ex.service]
		if !ok {
			t.Errorf("%s: compose has no service %q", composeFile, ex.service)
			continue
		}
		want := "../envoy/" + ex.floodgate + ":/etc/floodgate/floodgate.yaml"
		if !slices.ContainsFunc(svc.Volumes, func(v string) bool { return strings.HasPrefix(v, want) }) {
			t.Errorf("%s: service %s does not mount %s (volumes %v)", composeFile, ex.service, want, svc.Volumes)
		}
	}
}

// TestRoutesSelectPoliciesAtRuntime asks a real Floodgate engine (compiled from the Floodgate
// configuration beside each Envoy file) about one request per route, shaped as Envoy sends it with
// that route's context_extensions, and checks which policies answered.
func TestRoutesSelectPoliciesAtRuntime(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			ec, cfg := readExample(t, ex)
			srv := extauthz.NewServer(cfg.Engine, storetest.Memory(nil), extauthz.ServerOptions{})
			routes, err := routesOf(ec)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range routes {
				if r.disabled {
					continue // Envoy never calls Floodgate here
				}
				method, want := "GET", []string{}
				for _, pol := range cfg.Policies {
					if len(pol.Match.Context) > 0 && subset(pol.Match.Context, r.context) {
						if len(pol.Match.Methods) > 0 {
							method = pol.Match.Methods[0]
						}
						want = append(want, pol.Name)
					}
				}
				req := checkRequest(method, r.path, r.context, map[string]string{"x-api-key": "route-" + r.name}, nil)
				resp, err := srv.Check(context.Background(), req)
				if err != nil {
					t.Fatalf("route %s: %v", r.name, err)
				}
				got := policiesOf(resp)
				slices.Sort(got)
				slices.Sort(want)
				if resp.GetStatus().GetCode() != 0 || !slices.Equal(got, want) {
					t.Errorf("route %s (%s %s, context %v): status %d, policies %v; want allowed by %v",
						r.name, method, r.path, r.context, resp.GetStatus().GetCode(), got, want)
				}
			}
		})
	}
}

// TestJWTSubjectIsTheBucket drives the jwt example's policy with the metadata jwt_authn writes:
// each user's bucket empties on its own.
func TestJWTSubjectIsTheBucket(t *testing.T) {
	ec, cfg := readExample(t, examples[1])
	if ec.jwt == nil || len(ec.jwt.GetProviders()) != 1 {
		t.Fatalf("jwt example: want one jwt_authn provider")
	}
	var prov *jwtv3.JwtProvider
	for _, p := range ec.jwt.GetProviders() {
		prov = p
	}
	srv := extauthz.NewServer(cfg.Engine, storetest.Memory(nil), extauthz.ServerOptions{})
	ctxExt := map[string]string{}
	routes, _ := routesOf(ec)
	for _, r := range routes {
		if !r.disabled {
			ctxExt = r.context
		}
	}
	claims := func(sub string) map[string]*structpb.Struct {
		payload, err := structpb.NewStruct(map[string]any{
			"iss": prov.GetIssuer(), "sub": sub, "aud": prov.GetAudiences()[0],
		})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]*structpb.Struct{jwtFilter: {Fields: map[string]*structpb.Value{
			prov.GetPayloadInMetadata(): structpb.NewStructValue(payload),
		}}}
	}
	capacity := cfg.Policies[0].Capacity
	for i := int64(1); i <= capacity+1; i++ {
		resp, err := srv.Check(context.Background(), checkRequest("GET", "/v1/items", ctxExt, nil, claims("alice")))
		if err != nil {
			t.Fatal(err)
		}
		allowed := resp.GetStatus().GetCode() == 0
		if allowed != (i <= capacity) {
			t.Fatalf("alice request %d: allowed=%v, want %v (capacity %d)", i, allowed, i <= capacity, capacity)
		}
		if !allowed && resp.GetDeniedResponse().GetStatus().GetCode() != typev3.StatusCode_TooManyRequests {
			t.Fatalf("alice request %d: denied with %v, want 429", i, resp.GetDeniedResponse().GetStatus())
		}
	}
	resp, err := srv.Check(context.Background(), checkRequest("GET", "/v1/items", ctxExt, nil, claims("bob")))
	if err != nil || resp.GetStatus().GetCode() != 0 {
		t.Fatalf("bob after alice ran out: %v %v; want allowed (his own bucket)", resp.GetStatus(), err)
	}
}

// TestJWTDemoTokens verifies the demo tokens shipped beside jwt/envoy.yaml against its inline JWKS
// and provider, as jwt_authn would: RS256 signature, kid, issuer, audience, no past expiry.
func TestJWTDemoTokens(t *testing.T) {
	ec, _ := readExample(t, examples[1])
	var prov *jwtv3.JwtProvider
	for _, p := range ec.jwt.GetProviders() {
		prov = p
	}
	var jwks struct {
		Keys []struct{ Kty, Alg, Kid, N, E string } `json:"keys"`
	}
	if err := json.Unmarshal([]byte(prov.GetLocalJwks().GetInlineString()), &jwks); err != nil {
		t.Fatalf("inline JWKS: %v", err)
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range jwks.Keys {
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if k.Kty != "RSA" || err1 != nil || err2 != nil {
			t.Fatalf("JWKS key %q: kty %s, %v %v", k.Kid, k.Kty, err1, err2)
		}
		keys[k.Kid] = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	}
	for _, sub := range []string{"alice", "bob"} {
		raw, err := os.ReadFile(filepath.Join("jwt", "demo-token-"+sub+".jwt"))
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(strings.TrimSpace(string(raw)), ".")
		if len(parts) != 3 {
			t.Fatalf("%s: not a JWS compact token", sub)
		}
		var hdr struct{ Alg, Kid string }
		var claims struct {
			Iss string `json:"iss"`
			Sub string `json:"sub"`
			Aud any    `json:"aud"`
			Exp *int64 `json:"exp"`
		}
		decode := func(s string, into any) {
			b, err := base64.RawURLEncoding.DecodeString(s)
			if err == nil {
				err = json.Unmarshal(b, into)
			}
			if err != nil {
				t.Fatalf("%s: %v", sub, err)
			}
		}
		decode(parts[0], &hdr)
		decode(parts[1], &claims)
		key := keys[hdr.Kid]
		if hdr.Alg != "RS256" || key == nil {
			t.Fatalf("%s: alg %s kid %s: not an RS256 key of the JWKS", sub, hdr.Alg, hdr.Kid)
		}
		sig, err := base64.RawURLEncoding.DecodeString(parts[2])
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if err := rsa.VerifyPKCS1v15(key, crypto.SHA256, h[:], sig); err != nil {
			t.Errorf("%s: signature does not verify against the inline JWKS: %v", sub, err)
		}
		if claims.Iss != prov.GetIssuer() || claims.Sub != sub || fmt.Sprint(claims.Aud) != prov.GetAudiences()[0] {
			t.Errorf("%s: claims iss=%q sub=%q aud=%v; provider wants iss %q aud %v", sub, claims.Iss, claims.Sub, claims.Aud, prov.GetIssuer(), prov.GetAudiences())
		}
		if claims.Exp != nil && time.Unix(*claims.Exp, 0).Before(time.Now()) {
			t.Errorf("%s: expired", sub)
		}
	}
}

// TestBrokenCopiesAreRejected proves the checks above can fail: each broken copy of a shipped
// file must be caught by the check that guards against it.
func TestBrokenCopiesAreRejected(t *testing.T) {
	envoyYAML, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fgYAML, err := os.ReadFile("floodgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	schema := []struct{ name, old, new, want string }{
		{"unknown field in a typed_config", "failure_mode_allow: true", "failure_mode_alow: true", "failure_mode_alow"},
		{"unknown field at the top", "static_resources:", "static_resource:", "static_resource"},
		{"unresolvable typed_config", "ext_authz.v3.ExtAuthz\n", "ext_authz.v3.ExtAuthZ\n", "ExtAuthZ"},
		{"deprecated field", "merge_slashes: true", "merge_slashes: true\n                flush_access_log_on_new_request: true", "deprecated field"},
		{"duplicate key", "merge_slashes: true", "merge_slashes: true\n                merge_slashes: false", "merge_slashes"},
		{"cluster rule", "connect_timeout: 0.25s", "connect_timeout: 0s", "ConnectTimeout"},
		{"rule inside a typed_config", "code: ServiceUnavailable", "code: 0", "Code"},
		{"rule inside a per-route typed_config", "disabled: true", "# disabled: true", "Override"},
	}
	for _, tc := range schema {
		t.Run("schema/"+tc.name, func(t *testing.T) {
			_, _, err := loadBootstrap(mutate(t, envoyYAML, tc.old, tc.new))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("broken copy accepted or rejected for another reason: %v (want %q)", err, tc.want)
			}
		})
	}

	t.Run("floodgate config typo", func(t *testing.T) {
		_, err := doors.Parse("floodgate.yaml", mutate(t, fgYAML, "capacity: 5", "capacty: 5"))
		if err == nil || !strings.Contains(err.Error(), "capacty") {
			t.Fatalf("config.Parse accepted a typo: %v", err)
		}
	})

	ec := mustInspect(t, envoyYAML)
	pairs := []struct{ name, old, new, want string }{
		{"port mismatch", "grpc: 0.0.0.0:9191", "grpc: 0.0.0.0:9292", "listen.grpc"},
		{"trusted hops mismatch", "trusted_hops: 0", "trusted_hops: 1", "xff_num_trusted_hops"},
		{"route context without a policy", "context: { route: search }", "context: { route: searches }", "no Floodgate policy"},
		{"store timeout above Envoy's", "timeout: 50ms", "timeout: 300ms", "store.redis.timeout"},
		{"drain delay shorter than the health check", "drain_delay: 5s", "drain_delay: 4s", "listen.drain_delay"},
	}
	for _, tc := range pairs {
		t.Run("pair/"+tc.name, func(t *testing.T) {
			cfg, err := doors.Parse("floodgate.yaml", mutate(t, fgYAML, tc.old, tc.new))
			if err != nil {
				t.Fatal(err)
			}
			p := consistency(ec, cfg, "floodgate")
			if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("mismatch not reported: %v (want %q)", p, tc.want)
			}
		})
	}
	envoyPairs := []struct{ name, old, new, want string }{
		{"escaped slashes kept", "path_with_escaped_slashes_action: UNESCAPE_AND_REDIRECT", "path_with_escaped_slashes_action: KEEP_UNCHANGED", "path_with_escaped_slashes_action"},
		{"no retry on connect failure", "retry_on: connect-failure,refused-stream,unavailable", "retry_on: unavailable", "retry_policy"},
		{"health check slower than the drain", "unhealthy_threshold: 2", "unhealthy_threshold: 3", "listen.drain_delay"},
		{"route metadata differs from context_extensions", "floodgate: { route: search }", "floodgate: { route: api }", "differs from its context_extensions"},
	}
	cfg, err := doors.Parse("floodgate.yaml", fgYAML)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range envoyPairs {
		t.Run("pair/"+tc.name, func(t *testing.T) {
			requireReported(t, mutate(t, envoyYAML, tc.old, tc.new), cfg, "floodgate", tc.want)
		})
	}
	t.Run("pair/wrong compose host", func(t *testing.T) {
		if p := consistency(ec, cfg, "floodgate-jwt"); len(p) != 1 || !strings.Contains(p[0], "compose service") {
			t.Fatalf("got %v, want exactly the host mismatch", p)
		}
	})
	t.Run("pair/metadata namespace not forwarded", func(t *testing.T) {
		jwtYAML, err := os.ReadFile("jwt/envoy.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := doors.Load("jwt/floodgate.yaml")
		if err != nil {
			t.Fatal(err)
		}
		requireReported(t, mutate(t, jwtYAML, "metadata_context_namespaces: [envoy.filters.http.jwt_authn]", "metadata_context_namespaces: []"),
			cfg, "floodgate-jwt", "metadata_context_namespaces")
	})
}

// mutate returns src with its first old replaced by new; old must be in src.
func mutate(t *testing.T, src []byte, old, new string) []byte {
	t.Helper()
	if !strings.Contains(string(src), old) {
		t.Fatalf("the shipped file no longer contains %q: update this test", old)
	}
	return []byte(strings.Replace(string(src), old, new, 1))
}

// mustInspect loads the Envoy bootstrap src and reads what the checks need.
func mustInspect(t *testing.T, src []byte) *envoyConfig {
	t.Helper()
	bs, _, err := loadBootstrap(src)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := inspect(bs)
	if err != nil {
		t.Fatal(err)
	}
	return ec
}

// requireReported loads the Envoy bootstrap envoySrc and requires the
// consistency check against cfg (served as the compose service) to report a
// problem containing want.
func requireReported(t *testing.T, envoySrc []byte, cfg *door.Config, service, want string) {
	t.Helper()
	if p := consistency(mustInspect(t, envoySrc), cfg, service); !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, want) }) {
		t.Fatalf("not reported: %v (want %q)", p, want)
	}
}

// checkRequest builds a CheckRequest as Envoy sends one for an HTTP request through a route.
func checkRequest(method, path string, ctxExt, headers map[string]string, md map[string]*structpb.Struct) *authv3.CheckRequest {
	h := map[string]string{":method": method, ":path": path, ":authority": "api.example.com", ":scheme": "http",
		"x-forwarded-for": "203.0.113.7"}
	for k, v := range headers {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "203.0.113.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 51544}}}}},
		ContextExtensions: ctxExt,
		MetadataContext:   &corev3.Metadata{FilterMetadata: md},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: method, Path: path, Host: "api.example.com", Scheme: "http", Protocol: "HTTP/1.1", Headers: h,
		}},
	}}
}

// policiesOf returns the policy names of a response's RateLimit-Policy header
// ("name";q=..;w=.., ...).
func policiesOf(resp *authv3.CheckResponse) []string {
	hs := resp.GetOkResponse().GetResponseHeadersToAdd()
	if resp.GetStatus().GetCode() != 0 {
		hs = resp.GetDeniedResponse().GetHeaders()
	}
	names := []string{}
	for _, h := range hs {
		if h.GetHeader().GetKey() != "ratelimit-policy" {
			continue
		}
		for _, m := range strings.Split(h.GetHeader().GetValue(), ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(m), ";")
			names = append(names, strings.Trim(name, `"`))
		}
	}
	return names
}

// TestFingerprintComesFromEnvoy: the fingerprint example's broken copies are caught, and at run
// time clients that share an address but differ in JA4 or User-Agent get buckets of their own.
func TestFingerprintComesFromEnvoy(t *testing.T) {
	ex := examples[2]
	src, err := os.ReadFile(ex.envoy)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := doors.Load(ex.floodgate)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"ja4 not computed", "enable_ja4_fingerprinting: true", "enable_ja4_fingerprinting: false", "tls_inspector"},
		{"client's copy kept", "- remove: x-ja4", "- remove: x-other", "first remove"},
		{"set from elsewhere", `"%TLS_JA4_FINGERPRINT%"`, `"%REQ(x-ja4)%"`, "first remove"},
		{"mutation after ext_authz", "                  - name: envoy.filters.http.header_mutation", "                  - name: envoy.filters.http.header_mutation_moved", "before ext_authz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireReported(t, mutate(t, src, tc.old, tc.new), cfg, ex.service, tc.want)
		})
	}

	srv := extauthz.NewServer(cfg.Engine, storetest.Memory(nil), extauthz.ServerOptions{})
	login := func(ua, ja4 string) bool {
		req := checkRequest("POST", "/login", map[string]string{"route": "login"}, map[string]string{"user-agent": ua, "x-ja4": ja4}, nil)
		resp, err := srv.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus().GetCode() == 0
	}
	const chrome, firefox = "t13d1516h2_8daaf6152771_02713d6af862", "t13d1715h2_5b57614c22b0_3d5424432f57"
	for i := 0; i < 5; i++ {
		if !login("Mozilla/5.0 Chrome", chrome) {
			t.Fatalf("attempt %d of the first client denied", i+1)
		}
	}
	if login("Mozilla/5.0 Chrome", chrome) {
		t.Error("the sixth attempt of one fingerprint passed")
	}
	if !login("Mozilla/5.0 Firefox", firefox) || !login("Mozilla/5.0 Chrome", firefox) {
		t.Error("another fingerprint behind the same address shares the first one's bucket")
	}
}
