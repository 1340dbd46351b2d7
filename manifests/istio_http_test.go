package manifests

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	securityv1beta1 "istio.io/api/security/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/floodgate/floodgate/internal/config"
)

const (
	istioHTTPDir      = "istio/http"
	istioHTTPMesh     = "istio/http/mesh-config.yaml"
	istioHTTPProvider = "floodgate-http"
)

// doorHeaders are the headers Floodgate's HTTP door answers with, which the
// client must get: on allow the RateLimit headers and the degraded mark, on
// a denial those and Retry-After and the body's content-type.
var (
	doorHeadersOnAllow = []string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy", "ratelimit", "x-ratelimit-degraded"}
	doorHeadersOnDeny  = append(slices.Clone(doorHeadersOnAllow), "retry-after", "content-type", "grpc-status", "grpc-retry-pushback-ms")
)

// readHTTPVariant reads the files of manifests/istio/http.
func readHTTPVariant(t *testing.T) map[string][]byte { return readYAMLDirs(t, istioHTTPDir) }

// loadHTTPVariant decodes the variant strictly: its meshConfig into Istio's
// MeshConfig, every other document into its API type.
func loadHTTPVariant(files map[string][]byte) (*bundle, error) {
	objects := map[string][]byte{}
	for name, data := range files {
		if name != istioHTTPMesh {
			objects[name] = data
		}
	}
	b, err := load(objects)
	if err != nil {
		return nil, err
	}
	mesh, ok := files[istioHTTPMesh]
	if !ok {
		return nil, fmt.Errorf("no %s", istioHTTPMesh)
	}
	return b, b.loadMesh(istioHTTPMesh, mesh)
}

// lists reports whether an Istio header list names h (exact, prefix* or
// *suffix, case-insensitive: generateHeaders in
// pilot/pkg/security/authz/builder/extauthz.go builds ignore_case matchers).
func lists(patterns []string, h string) bool {
	h = strings.ToLower(h)
	return slices.ContainsFunc(patterns, func(p string) bool {
		p = strings.ToLower(p)
		switch {
		case strings.HasPrefix(p, "*"):
			return strings.HasSuffix(h, p[1:])
		case strings.HasSuffix(p, "*"):
			return strings.HasPrefix(h, p[:len(p)-1])
		}
		return p == h
	})
}

// httpVariantProblems lists every way the variant disagrees with itself, with
// the base manifests (base) and with what the door needs, as Istio builds
// Envoy's http_service from the provider (generateHTTPConfig) and Envoy's HTTP
// client applies it (source/extensions/filters/common/ext_authz/ext_authz_http_impl.cc).
func httpVariantProblems(v, base *bundle, files map[string][]byte) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	// The kustomization lists every manifest beside it (the meshConfig is Helm values).
	var k *kustomization
	for f, objs := range v.files {
		for _, o := range objs {
			if kk, ok := o.(*kustomization); ok && path.Dir(f) == istioHTTPDir {
				k = kk
			}
		}
	}
	if k == nil {
		return append(p, istioHTTPDir+": no kustomization.yaml")
	}
	for f := range v.files {
		if b := path.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
			bad("%s/kustomization.yaml does not list %s", istioHTTPDir, b)
		}
	}

	// The door's Service selects Floodgate's pods; its target port is the listen.http the
	// kustomization tells the operator to set.
	fd := named[*appsv1.Deployment](base, "floodgate")
	svc := named[*corev1.Service](v, "floodgate-http")
	if fd == nil || svc == nil {
		return append(p, "want the base Deployment floodgate and the variant's Service floodgate-http")
	}
	if !selects(svc.Spec.Selector, fd.Spec.Template.Labels) || svc.Namespace != fd.Namespace {
		bad("Service %s does not select Floodgate's pods (namespace %s, labels %v)", svc.Name, fd.Namespace, fd.Spec.Template.Labels)
	}
	var door *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if strings.HasPrefix(svc.Spec.Ports[i].Name, "http") {
			door = &svc.Spec.Ports[i]
		}
	}
	// The base ConfigMap turns the door on: listen.http on the container port the Service
	// targets, http_authz as the provider sends its requests.
	cm := named[*corev1.ConfigMap](base, "floodgate-config")
	cfg, _, err := floodgateConfig(cm.Data["floodgate.yaml"])
	if err != nil {
		return append(p, err.Error())
	}
	var target corev1.ContainerPort
	switch {
	case door == nil:
		bad("Service %s has no port named http-*: Istio would not treat it as HTTP", svc.Name)
	case cfg.Listen.HTTP == "":
		bad("the ConfigMap floodgate-config sets no listen.http: the door the provider asks is off")
	default:
		cp, ok := containerPort(&fd.Spec.Template.Spec.Containers[0], door.TargetPort)
		if !ok || cp.ContainerPort != portOf(cfg.Listen.HTTP) {
			bad("Service %s targets port %s, but the door listens on listen.http %s (a container port of Deployment floodgate)", svc.Name, door.TargetPort.String(), cfg.Listen.HTTP)
		}
		target = cp
	}
	// The sidecar asking the door sends it X-Forwarded-For with its own address appended, which
	// its gRPC Checks do not carry (Envoy's async HTTP client, AsyncStreamImpl::sendHeaders in
	// source/common/http/async_client_impl.cc, appends the local address unless send_xff is off).
	if h := cfg.HTTPAuthz.TrustedHops; h == nil || *h != cfg.ClientIP.TrustedHops+1 {
		bad("http_authz.trusted_hops %v, want client_ip.trusted_hops + 1 = %d (the sidecar's HTTP client appends its own address)", h, cfg.ClientIP.TrustedHops+1)
	}

	// The provider.
	var prov *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationHttpProvider
	for _, ep := range v.mesh.GetExtensionProviders() {
		if ep.GetName() == istioHTTPProvider {
			prov = ep.GetEnvoyExtAuthzHttp()
		}
	}
	if prov == nil {
		return append(p, fmt.Sprintf("meshConfig declares no envoyExtAuthzHttp provider %s", istioHTTPProvider))
	}
	if want := svc.Name + "." + svc.Namespace + ".svc.cluster.local"; prov.GetService() != want {
		bad("provider %s service %q, want the door's Service %s", istioHTTPProvider, prov.GetService(), want)
	}
	if door != nil && prov.GetPort() != uint32(door.Port) {
		bad("provider %s port %d, want the Service's %s port %d", istioHTTPProvider, prov.GetPort(), door.Name, door.Port)
	}
	if to := prov.GetTimeout().AsDuration(); to <= cfg.Store.Redis.Timeout || to <= config.DefaultRedisTimeout || to > time.Second {
		bad("provider %s timeout %v: set it above Floodgate's store.redis.timeout (%v) and at most 1s (Istio's default is 600s)", istioHTTPProvider, to, cfg.Store.Redis.Timeout)
	}
	if !prov.GetFailOpen() {
		bad("provider %s: failOpen should be true (a rate limiter outage must not fail the API)", istioHTTPProvider)
	}
	if prov.GetStatusOnError() != "503" {
		bad("provider %s: statusOnError %q, want 503 (Envoy's default is 403)", istioHTTPProvider, prov.GetStatusOnError())
	}
	if pp := prov.GetPathPrefix(); pp == "" || !strings.HasPrefix(pp, "/") || pp != cfg.HTTPAuthz.PathPrefix {
		bad("provider %s pathPrefix %q: want one starting with /, and http_authz.path_prefix (%q) the same", istioHTTPProvider, pp, cfg.HTTPAuthz.PathPrefix)
	}
	//lint:ignore SA1019 the test checks that the deprecated field is not used
	if len(prov.GetIncludeHeadersInCheck()) > 0 {
		bad("provider %s uses the deprecated includeHeadersInCheck", istioHTTPProvider)
	}
	// Never content-type: the sidecar's HTTP client marks a request with a gRPC one gRPC, and its
	// own errors then read as allows (envoy/http_test.go says where; envoyproxy/envoy#32476).
	if lists(prov.GetIncludeRequestHeadersInCheck(), "content-type") {
		bad("provider %s: includeRequestHeadersInCheck lists content-type, which turns Floodgate's outage into allows for gRPC callers (envoyproxy/envoy#32476)", istioHTTPProvider)
	}
	if cfg.HTTPAuthz.GRPCStatusOnDeny != "always" {
		bad("http_authz.grpc_status_on_deny %q, want always: the door sees no content-type, so a gRPC caller's denial would reach it as UNAVAILABLE", cfg.HTTPAuthz.GRPCStatusOnDeny)
	}
	if !lists(prov.GetIncludeRequestHeadersInCheck(), "x-forwarded-for") {
		bad("provider %s: includeRequestHeadersInCheck lacks x-forwarded-for, the client's address", istioHTTPProvider)
	}
	for _, pol := range cfg.Policies {
		for _, key := range pol.Key {
			if name, ok := strings.CutPrefix(key, "header:"); ok && !lists(prov.GetIncludeRequestHeadersInCheck(), name) {
				bad("policy %s keys on %s, which includeRequestHeadersInCheck does not list", pol.Name, key)
			}
		}
	}
	for _, h := range doorHeadersOnAllow {
		if !lists(prov.GetHeadersToDownstreamOnAllow(), h) {
			bad("provider %s: headersToDownstreamOnAllow lacks %s", istioHTTPProvider, h)
		}
	}
	if len(prov.GetHeadersToDownstreamOnDeny()) > 0 {
		for _, h := range doorHeadersOnDeny {
			if !lists(prov.GetHeadersToDownstreamOnDeny(), h) {
				bad("provider %s: headersToDownstreamOnDeny lacks %s (a listed set passes no other)", istioHTTPProvider, h)
			}
		}
	}

	// The CUSTOM policy names the provider; the callers it makes are admitted to the door's port.
	// The sidecars of a CUSTOM policy's workloads send the requests with their own identity
	// (TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT), as for Checks (istioaccess_test.go).
	var callers []string
	for _, o := range customPolicies(v) {
		ap := o.policy
		if ap.GetAction() != securityv1beta1.AuthorizationPolicy_CUSTOM || ap.GetProvider().GetName() != istioHTTPProvider || len(ap.GetRules()) == 0 {
			bad("AuthorizationPolicy %s: want CUSTOM with provider %s and rules", o.Name, istioHTTPProvider)
		}
		callers = append(callers, "/ns/"+o.Namespace+"/sa/")
	}
	if len(callers) == 0 {
		bad("no CUSTOM AuthorizationPolicy names provider %s", istioHTTPProvider)
	}
	var admitted []string
	for _, o := range all[*istioObject](v) {
		if o.policy == nil || o.policy.GetAction() != securityv1beta1.AuthorizationPolicy_ALLOW || !selects(o.policy.GetSelector().GetMatchLabels(), fd.Spec.Template.Labels) {
			continue
		}
		for _, r := range o.policy.GetRules() {
			for _, to := range r.GetTo() {
				if door == nil || !slices.Contains(to.GetOperation().GetPorts(), strconv.Itoa(int(target.ContainerPort))) {
					continue
				}
				for _, f := range r.GetFrom() {
					admitted = append(admitted, f.GetSource().GetPrincipals()...)
				}
			}
		}
	}
	for _, c := range callers {
		if !slices.ContainsFunc(admitted, func(pr string) bool { return strings.Contains(pr, c) }) {
			bad("no ALLOW policy on Floodgate's pods admits …%s… to the door's port: its sidecars' authorization requests would be refused, and with failOpen pass unlimited", c)
		}
	}
	netAdmits := false
	for _, np := range all[*networkingv1.NetworkPolicy](v) {
		for _, in := range np.Spec.Ingress {
			for _, pt := range in.Ports {
				netAdmits = netAdmits || (door != nil && pt.Port != nil && (pt.Port.IntVal == target.ContainerPort || pt.Port.StrVal == target.Name) && len(in.From) > 0)
			}
		}
	}
	if !netAdmits {
		bad("no NetworkPolicy admits the door's port from its callers: manifests/network-policy.yaml denies it")
	}
	return p
}

// TestIstioHTTPProviderPointsAtTheDoor decodes manifests/istio/http strictly
// and holds it to the base manifests and to what the HTTP door needs.
func TestIstioHTTPProviderPointsAtTheDoor(t *testing.T) {
	base, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	files := readHTTPVariant(t)
	v, err := loadHTTPVariant(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range httpVariantProblems(v, base, files) {
		t.Error(problem)
	}
}

// TestIstioHTTPBrokenCopiesAreCaught proves the checks can fail.
func TestIstioHTTPBrokenCopiesAreCaught(t *testing.T) {
	base, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	files := readHTTPVariant(t)
	for _, tc := range []mutation{
		{"unknown provider field", istioHTTPMesh, "failOpen: true", "failOpened: true", "failOpened"},
		{"provider port", istioHTTPMesh, "port: 9193", "port: 9191", "provider floodgate-http port"},
		{"provider service", istioHTTPMesh, "floodgate-http.floodgate.svc", "floodgate.floodgate.svc", "want the door's Service"},
		{"default timeout", istioHTTPMesh, "timeout: 0.25s", "timeout: 600s", "timeout"},
		{"no x-forwarded-for", istioHTTPMesh, "[x-api-key, x-forwarded-for]", "[x-api-key]", "x-forwarded-for"},
		{"no x-api-key", istioHTTPMesh, "[x-api-key, x-forwarded-for]", "[x-forwarded-for]", "header:x-api-key"},
		{"no content-type on deny", istioHTTPMesh, "          - content-type\n", "", "content-type"},
		{"content-type sent to the door", istioHTTPMesh, "[x-api-key, x-forwarded-for]", "[x-api-key, x-forwarded-for, content-type]", "32476"},
		{"no grpc-status on deny", istioHTTPMesh, "          - grpc-status\n", "", "grpc-status"},
		{"no RateLimit on allow", istioHTTPMesh, "        headersToDownstreamOnAllow:\n          - ratelimit-limit\n", "        headersToDownstreamOnAllow:\n", "ratelimit-limit"},
		{"path prefix not told", istioHTTPMesh, "pathPrefix: /authz", "pathPrefix: /check", "pathPrefix"},
		{"service elsewhere", istioHTTPDir + "/service.yaml", "targetPort: http-authz", "targetPort: grpc", "targets port"},
		{"not http", istioHTTPDir + "/service.yaml", "name: http-authz", "name: authz", "http-*"},
		{"wrong provider", istioHTTPDir + "/authorization-policy.yaml", "name: floodgate-http", "name: floodgate", "want CUSTOM with provider"},
		{"caller not admitted", istioHTTPDir + "/floodgate-access.yaml", `principals: ["cluster.local/ns/demo/sa/httpbin"]`, `principals: ["cluster.local/ns/other/sa/httpbin"]`, "admits …/ns/demo/sa/…"},
		{"no network path", istioHTTPDir + "/floodgate-access.yaml", "        - port: 9193\n", "        - port: 9194\n", "NetworkPolicy"},
		{"unlisted file", istioHTTPDir + "/kustomization.yaml", "  - floodgate-access.yaml\n", "", "does not list floodgate-access.yaml"},
		{"the door off", "configmap.yaml", "      http: 0.0.0.0:9193\n", "", "listen.http"},
		{"the door elsewhere", "configmap.yaml", "http: 0.0.0.0:9193", "http: 0.0.0.0:9194", "listens on listen.http"},
		{"the door's hops as for gRPC", "configmap.yaml", "      trusted_hops: 1\n", "      trusted_hops: 0\n", "http_authz.trusted_hops"},
		{"another prefix", "configmap.yaml", "path_prefix: /authz", "path_prefix: /check", "pathPrefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			baseFiles := readFiles(t)
			src, ok := files[tc.file]
			if !ok {
				src, ok = baseFiles[tc.file]
			}
			if !ok || !strings.Contains(string(src), tc.old) {
				t.Fatalf("%s no longer contains %q: update this test", tc.file, tc.old)
			}
			broken := map[string][]byte{}
			for k, v := range files {
				broken[k] = v
			}
			b := base
			if _, inBase := baseFiles[tc.file]; inBase {
				baseFiles[tc.file] = []byte(strings.Replace(string(src), tc.old, tc.new, 1))
				var err error
				if b, err = load(baseFiles); err != nil {
					t.Fatal(err)
				}
			} else {
				broken[tc.file] = []byte(strings.Replace(string(src), tc.old, tc.new, 1))
			}
			v, err := loadHTTPVariant(broken)
			got := []string{fmt.Sprint(err)}
			if err == nil {
				got = httpVariantProblems(v, b, broken)
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("not caught: %v (want %q)", got, tc.want)
			}
		})
	}
}
