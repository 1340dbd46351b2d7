package manifests

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1b1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/floodgate/floodgate/internal/door"
)

// gatewayProblems checks manifests/gateway against Floodgate's Service and configuration: the
// SecurityPolicy reaches the grpc port (allowed across namespaces by a ReferenceGrant), sends the
// headers the policies read, times out after Floodgate's own Redis timeout and fails open; the
// ClientTrafficPolicy counts the same trusted hops as client_ip.trusted_hops; the targets exist.
func gatewayProblems(b *bundle, cfg *door.Config, fs *corev1.Service, grpcSvc corev1.ServicePort, checkTimeout func(string, time.Duration)) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	gateways, routes := all[*gwapiv1.Gateway](b), all[*gwapiv1.HTTPRoute](b)
	if len(gateways) == 0 || len(routes) == 0 {
		return []string{"gateway: want a Gateway and an HTTPRoute"}
	}
	for _, r := range routes {
		for _, pr := range r.Spec.ParentRefs {
			if named[*gwapiv1.Gateway](b, string(pr.Name)) == nil {
				bad("HTTPRoute %s: parent %s is no Gateway of the manifests", r.Name, pr.Name)
			}
		}
	}
	targets := func(what string, refs []gwapiv1.LocalPolicyTargetReferenceWithSectionName, kind string) {
		if len(refs) == 0 {
			bad("%s targets nothing", what)
		}
		for _, ref := range refs {
			ok := string(ref.Kind) == kind && ((kind == "Gateway" && named[*gwapiv1.Gateway](b, string(ref.Name)) != nil) ||
				(kind == "HTTPRoute" && named[*gwapiv1.HTTPRoute](b, string(ref.Name)) != nil))
			if !ok {
				bad("%s targets %s %s, which is not a %s of the manifests", what, ref.Kind, ref.Name, kind)
			}
		}
	}

	sps := all[*egv1a1.SecurityPolicy](b)
	if len(sps) == 0 {
		bad("gateway: no SecurityPolicy")
	}
	for _, sp := range sps {
		at := "SecurityPolicy " + sp.Name
		targets(at, sp.Spec.TargetRefs, "HTTPRoute")
		ea := sp.Spec.ExtAuth
		if ea == nil || ea.GRPC == nil || len(ea.GRPC.BackendRefs) != 1 {
			bad("%s: want extAuth.grpc with one backendRef (the floodgate Service)", at)
			continue
		}
		ref := ea.GRPC.BackendRefs[0].BackendObjectReference
		refNS := sp.Namespace
		if ref.Namespace != nil {
			refNS = string(*ref.Namespace)
		}
		if string(ref.Name) != fs.Name || refNS != fs.Namespace || ref.Port == nil || int32(*ref.Port) != grpcSvc.Port ||
			(ref.Kind != nil && *ref.Kind != "Service") {
			bad("%s: extAuth.grpc goes to %s/%s port %v, want Service %s/%s port %d", at, refNS, ref.Name, ref.Port, fs.Namespace, fs.Name, grpcSvc.Port)
		}
		if refNS != sp.Namespace && !slices.ContainsFunc(all[*gwapiv1b1.ReferenceGrant](b), func(g *gwapiv1b1.ReferenceGrant) bool {
			from := slices.ContainsFunc(g.Spec.From, func(f gwapiv1b1.ReferenceGrantFrom) bool {
				return f.Group == "gateway.envoyproxy.io" && f.Kind == "SecurityPolicy" && string(f.Namespace) == sp.Namespace
			})
			to := slices.ContainsFunc(g.Spec.To, func(t gwapiv1b1.ReferenceGrantTo) bool {
				return t.Group == "" && t.Kind == "Service" && (t.Name == nil || string(*t.Name) == fs.Name)
			})
			return g.Namespace == fs.Namespace && from && to
		}) {
			bad("%s: no ReferenceGrant in %s lets a SecurityPolicy of %s reach Service %s", at, fs.Namespace, sp.Namespace, fs.Name)
		}
		if len(ea.HeadersToExtAuth) > 0 {
			// With headersToExtAuth set, Envoy Gateway configures ext_authz allowed_headers,
			// and Envoy puts only the matching headers in the CheckRequest's header map, while
			// method, path and host always fill their own fields
			// (source/extensions/filters/common/ext_authz/check_request_utils.cc,
			// CheckRequestUtils::setHttpRequest): every header a policy reads must be listed.
			for _, h := range cfg.Engine.Inputs().Headers {
				if !slices.ContainsFunc(ea.HeadersToExtAuth, func(s string) bool { return strings.EqualFold(s, h) }) {
					bad("%s: headersToExtAuth lacks %s, which a policy in floodgate.yaml reads", at, h)
				}
			}
		}
		// The headers list is Envoy's allowed_headers (extAuthConfig in Envoy Gateway's
		// internal/xds/translator/extauth.go): without content-type, Envoy sends none, no caller
		// looks like gRPC to Floodgate, and a gRPC caller's denial reaches it as UNAVAILABLE.
		if len(ea.HeadersToExtAuth) > 0 && !slices.ContainsFunc(ea.HeadersToExtAuth, func(s string) bool { return strings.EqualFold(s, "content-type") }) {
			bad("%s: headersToExtAuth lacks content-type: Envoy then sends Floodgate no content-type, and gRPC callers are denied as HTTP ones (their clients see UNAVAILABLE)", at)
		}
		timeout := 10 * time.Second // Envoy Gateway's default (defaultExtServiceRequestTimeout)
		if ea.Timeout == nil {
			bad("%s: set extAuth.timeout", at)
		} else if d, err := time.ParseDuration(string(*ea.Timeout)); err != nil {
			bad("%s: timeout %s: %v", at, *ea.Timeout, err)
		} else {
			timeout = d
			checkTimeout(at, d)
		}
		// A retry policy becomes GrpcService.retry_policy (buildNonRouteRetryPolicy), whose
		// max_interval Envoy makes the per-try timeout of every Check
		// (Http::Utility::convertCoreToRouteRetryPolicy): below the timeout it cuts every slower Check.
		if bs := ea.GRPC.BackendSettings; bs != nil && bs.Retry != nil && bs.Retry.PerRetry != nil && bs.Retry.PerRetry.BackOff != nil {
			bo := bs.Retry.PerRetry.BackOff
			var perTry time.Duration
			if bo.MaxInterval != nil {
				perTry, _ = time.ParseDuration(string(*bo.MaxInterval))
			} else if bo.BaseInterval != nil {
				base, _ := time.ParseDuration(string(*bo.BaseInterval))
				perTry = 10 * base
			}
			if perTry > 0 && perTry < timeout {
				bad("%s: backendSettings.retry.perRetry.backOff gives a per-try timeout of %v, below the Check's timeout %v: every Check slower than that fails and passes unlimited", at, perTry, timeout)
			}
		}
		if ea.FailOpen == nil || !*ea.FailOpen {
			bad("%s: set extAuth.failOpen: true (a rate limiter outage must not fail the API)", at)
		}
	}

	ctps := all[*egv1a1.ClientTrafficPolicy](b)
	if len(ctps) == 0 {
		bad("gateway: no ClientTrafficPolicy (client_ip.trusted_hops must match the gateway's)")
	}
	for _, ctp := range ctps {
		at := "ClientTrafficPolicy " + ctp.Name
		targets(at, ctp.Spec.TargetRefs, "Gateway")
		var hops *uint32
		if d := ctp.Spec.ClientIPDetection; d != nil && d.XForwardedFor != nil {
			hops = d.XForwardedFor.NumTrustedHops
		}
		if hops == nil || int(*hops) != cfg.ClientIP.TrustedHops || len(cfg.ClientIP.TrustedCIDRs) > 0 {
			bad("%s: clientIPDetection.xForwardedFor.numTrustedHops %v, but floodgate.yaml client_ip.trusted_hops is %d: they must agree",
				at, deref(hops), cfg.ClientIP.TrustedHops)
		}
	}
	return p
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

// TestGatewayBrokenCopiesAreRejected: the Envoy Gateway checks can fail.
func TestGatewayBrokenCopiesAreRejected(t *testing.T) {
	caught(t, []mutation{
		{"unknown SecurityPolicy field", "gateway/security-policy.yaml", "failOpen: true", "failopen: true", "failopen"},
		{"unknown ClientTrafficPolicy field", "gateway/client-traffic-policy.yaml", "numTrustedHops: 0", "trustedHops: 0", "trustedHops"},
		{"unknown HTTPRoute field", "gateway/httproute.yaml", "parentRefs:", "parents:", "parents"},
		{"hop counts disagree", "gateway/client-traffic-policy.yaml", "numTrustedHops: 0", "numTrustedHops: 1", "must agree"},
		{"trusted_hops changed alone", "configmap.yaml", "trusted_hops: 0", "trusted_hops: 2", "must agree"},
		{"wrong backend port", "gateway/security-policy.yaml", "port: 9191", "port: 9192", "want Service floodgate/floodgate port 9191"},
		{"wrong backend namespace", "gateway/security-policy.yaml", "namespace: floodgate\n          port", "namespace: default\n          port", "want Service floodgate/floodgate"},
		{"no ReferenceGrant", "gateway/reference-grant.yaml", "namespace: demo", "namespace: other", "no ReferenceGrant"},
		{"a header left out", "gateway/security-policy.yaml", "      - x-api-key\n", "", "lacks x-api-key"},
		{"content-type left out", "gateway/security-policy.yaml", "      - content-type\n", "", "lacks content-type"},
		{"a retry that cuts the Check", "gateway/security-policy.yaml", "          port: 9191\n", "          port: 9191\n      backendSettings:\n        retry:\n          numRetries: 1\n          perRetry:\n            backOff:\n              baseInterval: 5ms\n              maxInterval: 25ms\n", "per-try timeout of 25ms"},
		{"timeout under Redis's", "gateway/security-policy.yaml", "timeout: 250ms", "timeout: 40ms", "above Floodgate's store.redis.timeout"},
		{"fail closed", "gateway/security-policy.yaml", "failOpen: true", "failOpen: false", "failOpen: true"},
		{"route target", "gateway/security-policy.yaml", "kind: HTTPRoute\n      name: httpbin", "kind: HTTPRoute\n      name: httpbn", "not a HTTPRoute"},
		{"route parent", "gateway/httproute.yaml", "- name: edge", "- name: egde", "no Gateway"},
		{"unlisted file", "gateway/kustomization.yaml", "  - reference-grant.yaml\n", "", "does not list reference-grant.yaml"},
	})
}

// egFeatureSince lists SecurityPolicy extAuth fields by the Envoy Gateway release that introduced
// them (api/v1alpha1/ext_auth_types.go at the v1.5.0, v1.6.0 and v1.7.0 tags): an older release does
// not know the field.
var egFeatureSince = []struct {
	field string
	since string
	uses  func(*egv1a1.ExtAuth) bool
}{
	{"extAuth.timeout", "1.6", func(ea *egv1a1.ExtAuth) bool { return ea.Timeout != nil }},
	{"extAuth.contextExtensions", "1.7", func(ea *egv1a1.ExtAuth) bool { return len(ea.ContextExtensions) > 0 }},
}

// TestGatewayVersionNotes: a SecurityPolicy that uses a field of a newer Envoy Gateway says so in its
// file's comments ("Envoy Gateway >= 1.N"), and manifests/README.md says it too.
func TestGatewayVersionNotes(t *testing.T) {
	files := readFiles(t)
	b, err := load(files)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for name, objs := range b.files {
		for _, o := range objs {
			sp, ok := o.(*egv1a1.SecurityPolicy)
			if !ok || sp.Spec.ExtAuth == nil {
				continue
			}
			for _, f := range egFeatureSince {
				if !f.uses(sp.Spec.ExtAuth) {
					continue
				}
				used++
				note := "Envoy Gateway >= " + f.since
				if !strings.Contains(yamlComments(string(files[name])), note) {
					t.Errorf("%s: SecurityPolicy %s sets %s but its comments do not say %q", name, sp.Name, f.field, note)
				}
				if !strings.Contains(string(readme), note) {
					t.Errorf("manifests/README.md does not say %q (%s)", note, f.field)
				}
			}
		}
	}
	if used == 0 {
		t.Fatal("no SecurityPolicy uses a versioned field: the test tests nothing")
	}
}

// yamlComments returns the comments of a YAML file, one per line.
func yamlComments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			b.WriteString(line[i:])
			b.WriteByte('\n')
		}
	}
	return b.String()
}
