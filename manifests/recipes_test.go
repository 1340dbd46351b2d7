package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	emissaryv3 "github.com/emissary-ingress/emissary/v3/pkg/api/getambassador.io/v3alpha1"
	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	contourv1a1 "github.com/projectcontour/contour/apis/projectcontour/v1alpha1"
	contourconfig "github.com/projectcontour/contour/pkg/config"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/floodgatetest"
)

// Each control plane's side of the path: from its own objects, the proxy it configures, as its
// source builds that proxy's Envoy configuration.

// The proxies the recipes make call Floodgate that the recipes themselves do not create: their
// namespaces, pod labels and identities as their installers ship them.
var (
	// Istio's ingress gateway as istioctl's default profile and the gateway Helm chart (release
	// istio-ingressgateway) run it, and its service account's identity.
	istioGateway          = caller{"Istio's ingress gateway", "istio-system", map[string]string{"app": "istio-ingressgateway", "istio": "ingressgateway"}}
	istioGatewayPrincipal = "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"
	// Contour's Envoy, examples/contour/03-envoy.yaml (DaemonSet envoy).
	contourEnvoy = caller{"Contour's Envoy", "projectcontour", map[string]string{"app": "envoy"}}
	// Emissary's pods (its Envoy runs in them): charts/emissary-ingress/templates/deployment.yaml and
	// manifests/emissary/emissary-emissaryns.yaml.in, release emissary-ingress.
	emissaryPods = caller{"Emissary's pods", "emissary", map[string]string{
		"app.kubernetes.io/name": "emissary-ingress", "app.kubernetes.io/instance": "emissary-ingress",
		"app.kubernetes.io/part-of": "emissary-ingress", "product": "aes", "profile": "main",
	}}
	// httpbinAccount is the service account Istio's httpbin sample (samples/httpbin/httpbin.yaml)
	// runs as: the identity of the sidecars the CUSTOM policy protects.
	httpbinAccount = "httpbin"
)

const (
	contourConfigFile = "contour/contour.yaml"
	// envoyRLSDefault is the rate limit filter's timeout when none is set (rate_limit.proto,
	// RateLimit.timeout), and Emissary's (irratelimit.py, timeout_ms) and Contour's when the
	// ExtensionService sets no response timeout.
	envoyRLSDefault = 20 * time.Millisecond
	// envoyRLSStatusOnError is what Envoy's rate limit filter answers a failed call with when it
	// fails closed and status_on_error is unset (rate_limit.proto, RateLimit.status_on_error).
	envoyRLSStatusOnError = 500
	// extAuthzStatusOnError is ext_authz's (ext_authz.proto, ExtAuthz.status_on_error).
	extAuthzStatusOnError = 403
	// A request's client address and API key in the samples.
	clientAddress = "203.0.113.7"
	apiKey        = "k-1"
)

// withAndWithoutKey are the samples' header sets: a request with an API key and one without.
func withAndWithoutKey(base map[string]string) []map[string]string {
	with := map[string]string{"x-api-key": apiKey}
	for k, v := range base {
		with[k] = v
	}
	without := map[string]string{}
	for k, v := range base {
		without[k] = v
	}
	return []map[string]string{with, without}
}

func describeKey(h map[string]string) string {
	if _, ok := h["x-api-key"]; ok {
		return "with x-api-key"
	}
	return "without x-api-key"
}

// ---- Istio ----

// followIstioCustom: a CUSTOM AuthorizationPolicy makes the sidecar of each workload it selects
// call the extension provider of the mesh config (istio pilot/pkg/security/authz/builder/extauthz.go,
// generateGRPCConfig: failure_mode_allow = failOpen, the provider's timeout, all headers) through
// its outbound cluster of the provider's service, with the workload's own identity.
func followIstioCustom(w *world) (*proxyPath, []string) {
	js, err := yaml.YAMLToJSONStrict(w.src["manifests/"+meshConfigFile])
	if err != nil {
		return nil, []string{err.Error()}
	}
	var values struct {
		MeshConfig json.RawMessage `json:"meshConfig"`
	}
	mesh := &meshv1alpha1.MeshConfig{}
	if err := floodgatetest.StrictJSON(js, &values); err != nil {
		return nil, []string{err.Error()}
	}
	if err := protojson.Unmarshal(values.MeshConfig, mesh); err != nil {
		return nil, []string{meshConfigFile + ": " + err.Error()}
	}
	var custom []*istioObject
	for _, o := range ofType[*istioObject](w.objs) {
		if o.policy != nil && o.policy.GetAction() == securityv1beta1.AuthorizationPolicy_CUSTOM {
			custom = append(custom, o)
		}
	}
	if len(custom) != 1 {
		return nil, []string{fmt.Sprintf("want one CUSTOM AuthorizationPolicy, have %d", len(custom))}
	}
	ap := custom[0]
	var prov *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider
	for _, ep := range mesh.GetExtensionProviders() {
		if ep.GetName() == ap.policy.GetProvider().GetName() {
			prov = ep.GetEnvoyExtAuthzGrpc()
		}
	}
	if prov == nil {
		return nil, []string{fmt.Sprintf("AuthorizationPolicy %s names provider %q, which the mesh config does not declare as envoyExtAuthzGrpc: the sidecar denies every request", ap.Name, ap.policy.GetProvider().GetName())}
	}
	tgt, err := serviceTarget(prov.GetService(), "", int32(prov.GetPort()))
	if err != nil {
		return nil, []string{err.Error()}
	}
	status := extAuthzStatusOnError
	if s := prov.GetStatusOnError(); s != "" {
		status, _ = strconv.Atoi(s)
	}
	// generateGRPCConfig's timeoutOrDefault: 600s without a timeout.
	timeout, from := 600*time.Second, "Istio's default"
	if prov.GetTimeout() != nil {
		timeout, from = prov.GetTimeout().AsDuration(), "the provider's timeout"
	}
	pods := ap.policy.GetSelector().GetMatchLabels()
	pp := &proxyPath{
		caller:    &caller{"the sidecars AuthorizationPolicy " + ap.Namespace + "/" + ap.Name + " protects", ap.Namespace, pods},
		principal: "cluster.local/ns/" + ap.Namespace + "/sa/" + httpbinAccount,
		target:    tgt, timeout: timeout, timeoutFrom: from, failOpen: prov.GetFailOpen(), statusOnError: status,
	}
	// Outside requests reach the workload through the ingress gateway: its sidecar's peer is the
	// gateway, which appended the client's address to X-Forwarded-For.
	for _, h := range withAndWithoutKey(map[string]string{"x-forwarded-for": clientAddress}) {
		pp.samples = append(pp.samples, sample{what: "GET /get through the ingress gateway, " + describeKey(h), check: &checkSample{
			method: "GET", path: "/get", host: "httpbin." + ap.Namespace + ".svc.cluster.local", headers: h,
			peer: "10.0.0.2", principal: "spiffe://" + istioGatewayPrincipal,
		}})
	}
	return pp, nil
}

// envoyFilterPatches decodes an EnvoyFilter's patches as the Envoy types they patch (istio
// pkg/config/xds, BuildXDSObjectFromStruct): the rate limit filter of an HTTP_FILTER patch, the
// rate_limits of a VIRTUAL_HOST one.
func envoyFilterPatches(ef *networkingv1alpha3.EnvoyFilter) (*ratelimitv3.RateLimit, *routev3.VirtualHost, error) {
	var filter *ratelimitv3.RateLimit
	var vh *routev3.VirtualHost
	for i, p := range ef.GetConfigPatches() {
		js, err := protojson.Marshal(p.GetPatch().GetValue())
		if err != nil {
			return nil, nil, err
		}
		if c := p.GetMatch().GetContext(); c != networkingv1alpha3.EnvoyFilter_GATEWAY {
			return nil, nil, fmt.Errorf("patch %d: context %v, want GATEWAY (the gateway's own listeners)", i, c)
		}
		switch p.GetApplyTo() {
		case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
			hf := &hcmv3.HttpFilter{}
			if err := protojson.Unmarshal(js, hf); err != nil {
				return nil, nil, fmt.Errorf("patch %d: not an Envoy HttpFilter: %w", i, err)
			}
			filter = &ratelimitv3.RateLimit{}
			if err := hf.GetTypedConfig().UnmarshalTo(filter); err != nil {
				return nil, nil, fmt.Errorf("patch %d: typed_config is not the rate limit filter: %w", i, err)
			}
			if err := filter.ValidateAll(); err != nil {
				return nil, nil, fmt.Errorf("patch %d: %w", i, err)
			}
			if p.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE ||
				p.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.router" {
				return nil, nil, fmt.Errorf("patch %d: the rate limit filter must go before the router", i)
			}
		case networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST:
			vh = &routev3.VirtualHost{}
			if err := protojson.Unmarshal(js, vh); err != nil {
				return nil, nil, fmt.Errorf("patch %d: not an Envoy VirtualHost: %w", i, err)
			}
		default:
			return nil, nil, fmt.Errorf("patch %d applies to %v, which this test does not model", i, p.GetApplyTo())
		}
	}
	if filter == nil || vh == nil {
		return nil, nil, fmt.Errorf("want an HTTP_FILTER and a VIRTUAL_HOST patch")
	}
	return filter, vh, nil
}

// followIstioRateLimit: the EnvoyFilter of Istio's rate-limit task puts the rate limit filter on
// the gateways it selects, calling Istio's outbound cluster of a Service (pilot/pkg/model/service.go,
// BuildSubsetKey: "outbound|PORT||HOST"), which the gateway reaches with Istio mTLS and its own
// identity; the virtual host's rate_limits, which Istio's gateway routes do not override, build the
// descriptors.
func followIstioRateLimit(w *world) (*proxyPath, []string) {
	var p []string
	var efs []*istioObject
	for _, o := range ofType[*istioObject](w.objs) {
		if o.filter != nil {
			efs = append(efs, o)
		}
	}
	if len(efs) != 1 {
		return nil, []string{fmt.Sprintf("want one EnvoyFilter, have %d", len(efs))}
	}
	ef := efs[0]
	filter, vh, err := envoyFilterPatches(ef.filter)
	if err != nil {
		return nil, []string{fmt.Sprintf("EnvoyFilter %s: %v", ef.Name, err)}
	}
	if ef.Namespace != istioGateway.namespace || !selectsPods(ef.filter.GetWorkloadSelector().GetLabels(), istioGateway.pods) {
		p = append(p, fmt.Sprintf("EnvoyFilter %s/%s does not select %s (%v in %s)", ef.Namespace, ef.Name, istioGateway.what, istioGateway.pods, istioGateway.namespace))
	}
	cluster := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	parts := strings.Split(cluster, "|")
	if len(parts) != 4 || parts[0] != "outbound" || parts[2] != "" {
		return nil, append(p, fmt.Sprintf("rate limit service cluster %q is not Istio's outbound cluster of a Service (outbound|PORT||HOST)", cluster))
	}
	port, _ := strconv.Atoi(parts[1])
	tgt, err := serviceTarget(parts[3], "", int32(port))
	if err != nil {
		return nil, append(p, err.Error())
	}
	// istio pilot/pkg/model/push_context.go, GatewayServices and extraServicesForProxy: under
	// PILOT_FILTER_GATEWAY_CLUSTER_CONFIG a gateway gets the clusters of its routes, the extension
	// providers and the services an EnvoyFilter's envoyfilter.istio.io/referenced-services names.
	refs := strings.Split(ef.Annotations["envoyfilter.istio.io/referenced-services"], ",")
	if !containsTrimmed(refs, parts[3]) {
		p = append(p, fmt.Sprintf("EnvoyFilter %s does not name %s in envoyfilter.istio.io/referenced-services: a gateway under PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true gets no cluster %s, and every request passes unlimited", ef.Name, parts[3], cluster))
	}
	timeout, from := envoyRLSDefault, "Envoy's default"
	if filter.GetTimeout() != nil {
		timeout, from = filter.GetTimeout().AsDuration(), "the filter's timeout"
	}
	status := envoyRLSStatusOnError
	if s := filter.GetStatusOnError(); s != nil {
		status = int(s.GetCode())
	}
	pp := &proxyPath{rls: true, caller: &istioGateway, principal: istioGatewayPrincipal, target: tgt,
		timeout: timeout, timeoutFrom: from, failOpen: !filter.GetFailureModeDeny(), statusOnError: status, domain: filter.GetDomain()}
	for _, h := range withAndWithoutKey(nil) {
		d, err := descriptorsOf(nil, vh.GetRateLimits(), ratelimitv3.RateLimitPerRoute_OVERRIDE, envoyRequest{remote: clientAddress, headers: h})
		if err != nil {
			return nil, append(p, err.Error())
		}
		pp.samples = append(pp.samples, sample{what: "a request through the gateway, " + describeKey(h), descriptors: d})
	}
	return pp, p
}

func containsTrimmed(list []string, s string) bool {
	for _, l := range list {
		if strings.TrimSpace(l) == s {
			return true
		}
	}
	return false
}

// ---- Envoy Gateway ----

// followEnvoyGateway: a SecurityPolicy's extAuth makes the Envoy of the Gateway its HTTPRoute
// attaches to send Checks to its backendRef (internal/xds/translator/extauth.go): the headers of
// headersToExtAuth only (allowed_headers), its timeout (defaultExtServiceRequestTimeout, 10s,
// without one), failure_mode_allow = failOpen. With mTLS, the Gateway's Envoy presents the
// EnvoyProxy's client certificate only when the Gateway's infrastructure.parametersRef names that
// EnvoyProxy.
func followEnvoyGateway(mtls bool) func(w *world) (*proxyPath, []string) {
	return func(w *world) (*proxyPath, []string) {
		var p []string
		sps := ofType[*egv1a1.SecurityPolicy](w.objs)
		if len(sps) != 1 || sps[0].Spec.ExtAuth == nil || sps[0].Spec.ExtAuth.GRPC == nil || len(sps[0].Spec.ExtAuth.GRPC.BackendRefs) != 1 {
			return nil, []string{"want one SecurityPolicy with extAuth.grpc and one backendRef"}
		}
		sp := sps[0]
		ea := sp.Spec.ExtAuth
		var gw *gwapiv1.Gateway
		for _, ref := range sp.Spec.TargetRefs {
			for _, r := range ofType[*gwapiv1.HTTPRoute](w.objs) {
				if r.Name == string(ref.Name) && r.Namespace == sp.Namespace {
					for _, pr := range r.Spec.ParentRefs {
						for _, g := range ofType[*gwapiv1.Gateway](w.objs) {
							if g.Name == string(pr.Name) && g.Namespace == r.Namespace {
								gw = g
							}
						}
					}
				}
			}
		}
		if gw == nil {
			return nil, []string{"SecurityPolicy " + sp.Name + " attaches to no HTTPRoute of a Gateway of the recipe"}
		}
		ref := ea.GRPC.BackendRefs[0].BackendObjectReference
		ns := sp.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		var port int32
		if ref.Port != nil {
			port = int32(*ref.Port)
		}
		timeout, from := 10*time.Second, "Envoy Gateway's default"
		if ea.Timeout != nil {
			d, err := time.ParseDuration(string(*ea.Timeout))
			if err != nil {
				return nil, []string{err.Error()}
			}
			timeout, from = d, "extAuth.timeout"
		}
		pods := envoyGatewayPods(gw)
		pp := &proxyPath{
			caller: &caller{"Envoy Gateway's proxies of Gateway " + gw.Namespace + "/" + gw.Name, envoyGatewayNamespace, pods},
			target: target{string(ref.Name), ns, port}, timeout: timeout, timeoutFrom: from,
			failOpen: ea.FailOpen != nil && *ea.FailOpen, statusOnError: extAuthzStatusOnError,
		}
		// The request a client sends; Envoy forwards the listed headers only.
		for _, h := range withAndWithoutKey(map[string]string{"content-type": "application/json", "cookie": "session=1", "authorization": "Bearer t"}) {
			sent := map[string]string{}
			for k, v := range h {
				for _, allowed := range ea.HeadersToExtAuth {
					if strings.EqualFold(allowed, k) {
						sent[k] = v
					}
				}
			}
			if len(ea.HeadersToExtAuth) == 0 {
				sent = h
			}
			pp.samples = append(pp.samples, sample{what: "GET /get at Gateway " + gw.Name + ", " + describeKey(h), check: &checkSample{
				method: "GET", path: "/get", host: "httpbin.example.com", headers: sent, peer: clientAddress,
			}})
		}
		if !mtls {
			return pp, p
		}
		// internal/gatewayapi: a Gateway's Envoy takes its EnvoyProxy from the Gateway's
		// infrastructure.parametersRef (an EnvoyProxy of the Gateway's namespace), and presents
		// its backendTLS.clientCertificateRef to every TLS backend (backendtlspolicy.go,
		// processClientTLSSettings).
		var epName string
		if inf := gw.Spec.Infrastructure; inf != nil && inf.ParametersRef != nil &&
			inf.ParametersRef.Group == "gateway.envoyproxy.io" && inf.ParametersRef.Kind == "EnvoyProxy" {
			epName = inf.ParametersRef.Name
		}
		var ep *egv1a1.EnvoyProxy
		for _, e := range ofType[*egv1a1.EnvoyProxy](w.objs) {
			if e.Name == epName && e.Namespace == gw.Namespace {
				ep = e
			}
		}
		switch {
		case ep == nil:
			p = append(p, fmt.Sprintf("Gateway %s/%s names no EnvoyProxy of the recipe in spec.infrastructure.parametersRef: its Envoy presents no client certificate, Floodgate (listen.tls with client_ca_file) refuses every Check, and every request passes unlimited", gw.Namespace, gw.Name))
		case ep.Spec.BackendTLS == nil || ep.Spec.BackendTLS.ClientCertificateRef == nil:
			p = append(p, fmt.Sprintf("EnvoyProxy %s (the Gateway's parametersRef) presents no client certificate", ep.Name))
		}
		covered := false
		for _, btp := range ofType[*gwapiv1.BackendTLSPolicy](w.objs) {
			for _, r := range btp.Spec.TargetRefs {
				if btp.Namespace == ns && r.Kind == "Service" && string(r.Name) == string(ref.Name) {
					covered = true
				}
			}
		}
		if !covered {
			p = append(p, "no BackendTLSPolicy covers the Service extAuth sends to: the Checks stay plaintext")
		}
		return pp, p
	}
}

// ---- Contour ----

// followContour: Contour's configuration file names the ExtensionService that is the rate limit
// service (cmd/contour/serve.go, setupRateLimitService and getExtensionSvcConfig); the filter's
// timeout is that ExtensionService's timeoutPolicy.response, or Envoy's 20ms, and failure_mode_deny
// is !failOpen, failOpen defaulting to false (internal/envoy/v3/ratelimit.go, GlobalRateLimitFilter);
// the cluster reaches the Services of the ExtensionService's own namespace
// (internal/dag/extension_processor.go, buildExtensionService). Each HTTPProxy's descriptors become
// Envoy rate limits (internal/dag/policy.go, globalRateLimitPolicy; ratelimit.go, GlobalRateLimits):
// the virtual host's on the virtual host, or the configuration's defaultGlobalRateLimitPolicy
// (internal/dag/httpproxy_processor.go, computeVirtualHostRateLimitPolicy), a route's on the route,
// IGNORE for a route whose global policy is disabled (rateLimitPerRoute).
func followContour(w *world) (*proxyPath, []string) {
	var p []string
	params, err := contourconfig.Parse(bytes.NewReader(w.src["manifests/"+contourConfigFile]))
	if err != nil {
		return nil, []string{contourConfigFile + ": " + err.Error()}
	}
	if err := params.Validate(); err != nil {
		return nil, []string{contourConfigFile + ": " + err.Error()}
	}
	rs := params.RateLimitService
	ns, name, ok := strings.Cut(rs.ExtensionService, "/")
	if !ok {
		return nil, []string{contourConfigFile + ": rateLimitService.extensionService is not NAMESPACE/NAME: Contour adds no rate limit filter"}
	}
	var ext *contourv1a1.ExtensionService
	for _, e := range ofType[*contourv1a1.ExtensionService](w.objs) {
		if e.Namespace == ns && e.Name == name {
			ext = e
		}
	}
	if ext == nil || len(ext.Spec.Services) != 1 {
		return nil, []string{fmt.Sprintf("rateLimitService names ExtensionService %s/%s, which the recipe does not create with one service: Contour refuses to start", ns, name)}
	}
	protocol := "h2" // Contour's default: HTTP/2 over TLS
	if ext.Spec.Protocol != nil {
		protocol = *ext.Spec.Protocol
	}
	if protocol != "h2c" && w.fg.cfg.Listen.TLS == nil {
		p = append(p, fmt.Sprintf("ExtensionService %s: protocol %s is TLS, and Floodgate serves plaintext (no listen.tls): use h2c", ext.Name, protocol))
	}
	timeout, from := envoyRLSDefault, "Envoy's default: the ExtensionService sets no timeoutPolicy.response"
	if tp := ext.Spec.TimeoutPolicy; tp != nil && tp.Response != "" {
		switch d, err := time.ParseDuration(tp.Response); {
		case tp.Response == "infinity" || tp.Response == "infinite":
			timeout, from = 0, "timeoutPolicy.response: none"
		case err != nil:
			return nil, append(p, err.Error())
		case d > 0:
			timeout, from = d, "the ExtensionService's timeoutPolicy.response"
		}
	}
	if !rs.EnableResourceExhaustedCode {
		p = append(p, contourConfigFile+": enableResourceExhaustedCode is off: gRPC callers over the limit get UNAVAILABLE, which they retry at once")
	}
	pp := &proxyPath{rls: true, caller: &contourEnvoy,
		target:  target{ext.Spec.Services[0].Name, ext.Namespace, int32(ext.Spec.Services[0].Port)},
		timeout: timeout, timeoutFrom: from, failOpen: rs.FailOpen, statusOnError: envoyRLSStatusOnError, domain: rs.Domain}
	for _, hp := range ofType[*contourv1.HTTPProxy](w.objs) {
		vhost := hp.Spec.VirtualHost
		if vhost == nil {
			continue
		}
		var vhDescs []contourv1.RateLimitDescriptor
		switch g := globalOf(vhost.RateLimitPolicy); {
		case g != nil && !g.Disabled && len(g.Descriptors) > 0:
			vhDescs = g.Descriptors
		case (g == nil || !g.Disabled) && rs.DefaultGlobalRateLimitPolicy != nil:
			vhDescs = rs.DefaultGlobalRateLimitPolicy.Descriptors
		}
		vhLimits, err := contourLimits(vhDescs)
		if err != nil {
			return nil, append(p, err.Error())
		}
		for _, route := range hp.Spec.Routes {
			opt := ratelimitv3.RateLimitPerRoute_OVERRIDE
			var routeLimits []*routev3.RateLimit
			if g := globalOf(route.RateLimitPolicy); g != nil {
				if g.Disabled {
					opt = ratelimitv3.RateLimitPerRoute_IGNORE
				} else if routeLimits, err = contourLimits(g.Descriptors); err != nil {
					return nil, append(p, err.Error())
				}
			}
			prefix := "/"
			for _, c := range route.Conditions {
				if c.Prefix != "" {
					prefix = c.Prefix
				}
			}
			for _, h := range withAndWithoutKey(nil) {
				d, err := descriptorsOf(routeLimits, vhLimits, opt, envoyRequest{remote: clientAddress, headers: h})
				if err != nil {
					return nil, append(p, err.Error())
				}
				pp.samples = append(pp.samples, sample{what: fmt.Sprintf("HTTPProxy %s/%s route %s, %s", hp.Namespace, hp.Name, prefix, describeKey(h)), descriptors: d})
			}
		}
	}
	return pp, p
}

func globalOf(rlp *contourv1.RateLimitPolicy) *contourv1.GlobalRateLimitPolicy {
	if rlp == nil {
		return nil
	}
	return rlp.Global
}

// contourLimits are Envoy's rate limits for Contour descriptors, as GlobalRateLimits builds them.
func contourLimits(descs []contourv1.RateLimitDescriptor) ([]*routev3.RateLimit, error) {
	var out []*routev3.RateLimit
	for _, d := range descs {
		rl := &routev3.RateLimit{}
		for _, e := range d.Entries {
			var a *routev3.RateLimit_Action
			switch {
			case e.GenericKey != nil:
				a = &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{GenericKey: &routev3.RateLimit_Action_GenericKey{
					DescriptorKey: e.GenericKey.Key, DescriptorValue: e.GenericKey.Value}}}
			case e.RequestHeader != nil:
				a = &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{
					HeaderName: strings.ToLower(e.RequestHeader.HeaderName), DescriptorKey: e.RequestHeader.DescriptorKey}}}
			case e.RemoteAddress != nil:
				a = &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}}}
			default:
				return nil, fmt.Errorf("a Contour descriptor entry this test does not model: %+v", e)
			}
			rl.Actions = append(rl.Actions, a)
		}
		out = append(out, rl)
	}
	return out, nil
}

// ---- Emissary ----

// followEmissary: Emissary builds the rate limit filter from its one RateLimitService
// (python/ambassador/ir/irratelimit.py, IRRateLimit.setup: domain defaults to the Ambassador
// Module's default_label_domain, "ambassador"; timeout_ms to 20; failure_mode_deny to false;
// protocol_version v2 is refused) and each Mapping's route actions from the labels filed under that
// domain (python/ambassador/envoy/v3/v3route.py; v3ratelimitaction.py, V3RateLimitAction).
func followEmissary(w *world) (*proxyPath, []string) {
	var p []string
	rlss := ofType[*emissaryv3.RateLimitService](w.objs)
	if len(rlss) != 1 {
		return nil, []string{fmt.Sprintf("want one RateLimitService (Emissary supports one), have %d", len(rlss))}
	}
	spec := rlss[0].Spec
	if spec.ProtocolVersion != "v3" {
		return nil, []string{fmt.Sprintf("RateLimitService %s: protocol_version %q: Emissary refuses anything but v3, builds no rate limit filter, and nothing is limited", rlss[0].Name, spec.ProtocolVersion)}
	}
	tgt, err := serviceTarget(spec.Service, rlss[0].Namespace, 0)
	if err != nil {
		return nil, []string{err.Error()}
	}
	domain := spec.Domain
	if domain == "" {
		domain = "ambassador"
	}
	timeout, from := envoyRLSDefault, "Emissary's default timeout_ms"
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		timeout, from = spec.Timeout.Duration, "timeout_ms"
	}
	pp := &proxyPath{rls: true, caller: &emissaryPods, target: tgt, timeout: timeout, timeoutFrom: from,
		failOpen: !spec.FailureModeDeny, statusOnError: envoyRLSStatusOnError, domain: domain}
	for _, m := range ofType[*emissaryv3.Mapping](w.objs) {
		var limits []*routev3.RateLimit
		for _, group := range m.Spec.Labels[domain] {
			for _, specs := range group {
				rl := &routev3.RateLimit{}
				for _, s := range specs {
					var a *routev3.RateLimit_Action
					switch {
					case s.GenericKey != nil:
						k := s.GenericKey.Key
						if k == "" {
							k = "generic_key"
						}
						a = &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: k, DescriptorValue: s.GenericKey.Value}}}
					case s.RemoteAddress != nil:
						a = &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}}}
					case s.RequestHeaders != nil:
						a = &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{
							HeaderName: strings.ToLower(s.RequestHeaders.HeaderName), DescriptorKey: s.RequestHeaders.Key}}}
					case s.DestinationCluster != nil:
						a = &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_DestinationCluster_{DestinationCluster: &routev3.RateLimit_Action_DestinationCluster{}}}
					default:
						return nil, append(p, fmt.Sprintf("Mapping %s: a label this test does not model: %+v", m.Name, s))
					}
					rl.Actions = append(rl.Actions, a)
				}
				limits = append(limits, rl)
			}
		}
		for _, h := range withAndWithoutKey(nil) {
			d, err := descriptorsOf(limits, nil, ratelimitv3.RateLimitPerRoute_OVERRIDE, envoyRequest{remote: clientAddress, headers: h, cluster: m.Spec.Service})
			if err != nil {
				return nil, append(p, err.Error())
			}
			pp.samples = append(pp.samples, sample{what: fmt.Sprintf("Mapping %s/%s (%s), %s", m.Namespace, m.Name, m.Spec.Prefix, describeKey(h)), descriptors: d})
		}
	}
	return pp, p
}

// ---- plain Envoy ----

// plainFloodgate loads the Floodgate configuration beside a plain Envoy example, its rls.config
// (written from the repository root) from src, as serve would read it.
func plainFloodgate(w *world, file string) (*door.Config, error) {
	cfg, err := doors.Parse(file, w.src[file])
	if err != nil {
		return nil, err
	}
	if cfg.RLS.Config != "" {
		dir := w.t.TempDir()
		for name, data := range w.src {
			if rest, ok := strings.CutPrefix(name, cfg.RLS.Config+"/"); ok && !strings.Contains(rest, "/") {
				if err := os.WriteFile(filepath.Join(dir, rest), data, 0o644); err != nil {
					return nil, err
				}
			}
		}
		cfg.RLS.Config = dir
		if err := doors.ReadFiles(cfg); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// plainEnvoy decodes a plain Envoy example: its connection manager, the typed config of its
// filter named filterName, and the endpoint of the cluster a gRPC service names.
func plainEnvoy(w *world, file, filterName string, into proto.Message) (*hcmv3.HttpConnectionManager, error) {
	bs, err := loadBootstrap(w.src[file])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().UnmarshalTo(hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					if hf.GetName() == filterName {
						return hcm, hf.GetTypedConfig().UnmarshalTo(into)
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("%s: no %s filter", file, filterName)
}

// plainCluster is the address of the first endpoint of a cluster of a plain Envoy example.
func plainCluster(w *world, file, name string) (target, error) {
	bs, err := loadBootstrap(w.src[file])
	if err != nil {
		return target{}, err
	}
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
			return target{service: sa.GetAddress(), port: int32(sa.GetPortValue())}, nil
		}
	}
	return target{}, fmt.Errorf("%s: no cluster %s", file, name)
}

// plainSide is Floodgate off Kubernetes: reached by whatever name the proxy uses, on listen.grpc.
func plainSide(cfg *door.Config, tgt target) *floodgateSide {
	_, port, _ := net.SplitHostPort(cfg.Listen.GRPC)
	n, _ := strconv.Atoi(port)
	return &floodgateSide{service: tgt.service, port: int32(n), cfg: cfg}
}

// followEnvoyExtAuthz: envoy/envoy.yaml's ext_authz filter and the per-route context_extensions
// its routes send (ExtAuthzPerRoute.check_settings), decided by envoy/floodgate.yaml.
func followEnvoyExtAuthz(w *world) (*proxyPath, []string) {
	const file, fgFile = "envoy/envoy.yaml", "envoy/floodgate.yaml"
	ea := &extauthzv3.ExtAuthz{}
	hcm, err := plainEnvoy(w, file, "envoy.filters.http.ext_authz", ea)
	if err != nil {
		return nil, []string{err.Error()}
	}
	tgt, err := plainCluster(w, file, ea.GetGrpcService().GetEnvoyGrpc().GetClusterName())
	if err != nil {
		return nil, []string{err.Error()}
	}
	cfg, err := plainFloodgate(w, fgFile)
	if err != nil {
		return nil, []string{err.Error()}
	}
	w.fg = plainSide(cfg, tgt)
	// ext_authz's gRPC timeout defaults to 200ms (GrpcService.timeout in ext_authz.proto).
	timeout, from := 200*time.Millisecond, "ext_authz's default"
	if ea.GetGrpcService().GetTimeout() != nil {
		timeout, from = ea.GetGrpcService().GetTimeout().AsDuration(), "grpc_service.timeout"
	}
	status := extAuthzStatusOnError
	if s := ea.GetStatusOnError(); s != nil {
		status = int(s.GetCode())
	}
	pp := &proxyPath{target: tgt, timeout: timeout, timeoutFrom: from, failOpen: ea.GetFailureModeAllow(), statusOnError: status}
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, route := range vh.GetRoutes() {
			per := &extauthzv3.ExtAuthzPerRoute{}
			if a := route.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"]; a != nil {
				if err := a.UnmarshalTo(per); err != nil {
					return nil, []string{err.Error()}
				}
			}
			if per.GetDisabled() || route.GetDirectResponse() != nil {
				continue
			}
			p := route.GetMatch().GetPath() + route.GetMatch().GetPrefix()
			for _, h := range withAndWithoutKey(nil) {
				pp.samples = append(pp.samples, sample{what: "POST " + p + ", " + describeKey(h), check: &checkSample{
					method: "POST", path: p, host: "api.example.com", headers: h, peer: clientAddress,
					contextExtensions: per.GetCheckSettings().GetContextExtensions(),
				}})
			}
		}
	}
	return pp, nil
}

// followEnvoyRateLimit: envoy/ratelimit/envoy.yaml's rate limit filter and its routes' rate
// limits, against envoy/ratelimit/floodgate.yaml's rls.config.
func followEnvoyRateLimit(w *world) (*proxyPath, []string) {
	const file, fgFile = "envoy/ratelimit/envoy.yaml", "envoy/ratelimit/floodgate.yaml"
	rl := &ratelimitv3.RateLimit{}
	hcm, err := plainEnvoy(w, file, "envoy.filters.http.ratelimit", rl)
	if err != nil {
		return nil, []string{err.Error()}
	}
	tgt, err := plainCluster(w, file, rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName())
	if err != nil {
		return nil, []string{err.Error()}
	}
	cfg, err := plainFloodgate(w, fgFile)
	if err != nil {
		return nil, []string{err.Error()}
	}
	w.fg = plainSide(cfg, tgt)
	timeout, from := envoyRLSDefault, "Envoy's default"
	if rl.GetTimeout() != nil {
		timeout, from = rl.GetTimeout().AsDuration(), "the filter's timeout"
	}
	status := envoyRLSStatusOnError
	if s := rl.GetStatusOnError(); s != nil {
		status = int(s.GetCode())
	}
	pp := &proxyPath{rls: true, target: tgt, timeout: timeout, timeoutFrom: from, failOpen: !rl.GetFailureModeDeny(), statusOnError: status, domain: rl.GetDomain()}
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, route := range vh.GetRoutes() {
			if len(route.GetRoute().GetRateLimits()) == 0 && len(vh.GetRateLimits()) == 0 {
				continue // a route the example leaves unlimited on purpose
			}
			opt := ratelimitv3.RateLimitPerRoute_OVERRIDE
			if a := route.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"]; a != nil {
				per := &ratelimitv3.RateLimitPerRoute{}
				if err := a.UnmarshalTo(per); err != nil {
					return nil, []string{err.Error()}
				}
				opt = per.GetVhRateLimits()
			}
			p := route.GetMatch().GetPath() + route.GetMatch().GetPrefix()
			for _, h := range withAndWithoutKey(nil) {
				d, err := descriptorsOf(route.GetRoute().GetRateLimits(), vh.GetRateLimits(), opt, envoyRequest{remote: clientAddress, headers: h, cluster: route.GetRoute().GetCluster()})
				if err != nil {
					return nil, []string{err.Error()}
				}
				pp.samples = append(pp.samples, sample{what: "route " + p + ", " + describeKey(h), descriptors: d})
			}
		}
	}
	return pp, nil
}
