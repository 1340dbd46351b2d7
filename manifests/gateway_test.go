package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1b1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/floodgate/floodgate/internal/config"
)

// gatewayProblems checks manifests/gateway against Floodgate's Service and configuration: the
// SecurityPolicy reaches the grpc port (allowed across namespaces by a ReferenceGrant), sends the
// headers the policies read, times out after Floodgate's own Redis timeout and fails open; the
// ClientTrafficPolicy counts the same trusted hops as client_ip.trusted_hops; the targets exist.
func gatewayProblems(b *bundle, cfg *config.Config, fs *corev1.Service, grpcSvc corev1.ServicePort, checkTimeout func(string, time.Duration)) []string {
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
		if ea.Timeout == nil {
			bad("%s: set extAuth.timeout", at)
		} else if d, err := time.ParseDuration(string(*ea.Timeout)); err != nil {
			bad("%s: timeout %s: %v", at, *ea.Timeout, err)
		} else {
			checkTimeout(at, d)
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
		{"timeout under Redis's", "gateway/security-policy.yaml", "timeout: 250ms", "timeout: 40ms", "above Floodgate's store.redis.timeout"},
		{"fail closed", "gateway/security-policy.yaml", "failOpen: true", "failOpen: false", "failOpen: true"},
		{"route target", "gateway/security-policy.yaml", "kind: HTTPRoute\n      name: httpbin", "kind: HTTPRoute\n      name: httpbn", "not a HTTPRoute"},
		{"route parent", "gateway/httproute.yaml", "- name: edge", "- name: egde", "no Gateway"},
		{"unlisted file", "gateway/kustomization.yaml", "  - reference-grant.yaml\n", "", "does not list reference-grant.yaml"},
	})
}
