package manifests

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	securityv1beta1 "istio.io/api/security/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// customPolicies are the AuthorizationPolicies that send Checks to a provider (action CUSTOM, or
// any policy naming a provider, so a provider policy with the wrong action is still checked).
func customPolicies(b *bundle) []*istioObject {
	var out []*istioObject
	for _, o := range all[*istioObject](b) {
		if o.policy != nil && (o.policy.GetAction() == securityv1beta1.AuthorizationPolicy_CUSTOM || o.policy.GetProvider() != nil) {
			out = append(out, o)
		}
	}
	return out
}

// selectsPods reports whether an Istio workload selector picks pods with these labels (Istio: a
// policy without a selector applies to every workload of its namespace).
func selectsPods(matchLabels, podLabels map[string]string) bool {
	for k, v := range matchLabels {
		if podLabels[k] != v {
			return false
		}
	}
	return true
}

// meshAccessProblems checks what guards Floodgate's own ports under Istio
// (istio/floodgate-access.yaml): a STRICT PeerAuthentication for the gRPC port, so a caller's
// principal comes from its certificate, and an ALLOW policy admitting Checks only from named
// principals, among them the sidecars of every workload a CUSTOM policy protects (they send the
// Checks, with their own identity: istiod builds the ext_authz cluster as the caller's outbound
// cluster, pilot/pkg/security/authz/builder/extauthz.go, parseService), and the admin port only
// for GET /metrics.
func meshAccessProblems(b *bundle, fc *corev1.Container) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	fd := named[*appsv1.Deployment](b, "floodgate")
	if fd == nil {
		return nil
	}
	podLabels, ns := fd.Spec.Template.Labels, fd.Namespace
	grpcPort, _ := containerPort(fc, intstr.FromString("grpc"))
	adminPort, _ := containerPort(fc, intstr.FromString("admin"))
	grpc, admin := strconv.Itoa(int(grpcPort.ContainerPort)), strconv.Itoa(int(adminPort.ContainerPort))

	var peers, allows []*istioObject
	for _, o := range all[*istioObject](b) {
		switch {
		case o.Namespace != ns:
		case o.peer != nil && selectsPods(o.peer.GetSelector().GetMatchLabels(), podLabels):
			peers = append(peers, o)
		case o.policy != nil && o.policy.GetAction() == securityv1beta1.AuthorizationPolicy_ALLOW &&
			selectsPods(o.policy.GetSelector().GetMatchLabels(), podLabels):
			allows = append(allows, o)
		}
	}

	// mTLS: STRICT on the gRPC port, so the principal a rule names is a certificate's.
	if len(peers) != 1 {
		bad("want one PeerAuthentication for Floodgate's pods in namespace %s, have %d", ns, len(peers))
	}
	for _, o := range peers {
		mode := o.peer.GetMtls().GetMode()
		if pl, ok := o.peer.GetPortLevelMtls()[uint32(grpcPort.ContainerPort)]; ok {
			mode = pl.GetMode()
		}
		if mode != securityv1beta1.PeerAuthentication_MutualTLS_STRICT {
			bad("PeerAuthentication %s: the gRPC port %s is %v, want STRICT: without mTLS a caller's principal is not known and a plaintext pod may call", o.Name, grpc, mode)
		}
	}

	// ALLOW: Checks from named principals only; the admin port for GET /metrics only.
	if len(allows) == 0 {
		bad("no ALLOW AuthorizationPolicy for Floodgate's pods in namespace %s: every workload of the mesh may send Checks", ns)
	}
	var principals []string
	for _, o := range allows {
		for i, r := range o.policy.GetRules() {
			at := fmt.Sprintf("AuthorizationPolicy %s rules[%d]", o.Name, i)
			var ports []string
			paths := map[string]bool{}
			for _, to := range r.GetTo() {
				op := to.GetOperation()
				ports = append(ports, op.GetPorts()...)
				for _, pa := range op.GetPaths() {
					paths[pa] = true
				}
				if len(op.GetPaths()) == 0 {
					paths["*"] = true
				}
			}
			if len(r.GetTo()) == 0 || len(ports) == 0 {
				bad("%s applies to every port: name the port (%s for Checks, %s for metrics)", at, grpc, admin)
				continue
			}
			if slices.Contains(ports, grpc) {
				if len(r.GetFrom()) == 0 {
					bad("%s admits Checks from every source: name the callers' principals", at)
				}
				for _, f := range r.GetFrom() {
					s := f.GetSource()
					if len(s.GetPrincipals()) == 0 || len(s.GetNamespaces())+len(s.GetIpBlocks())+len(s.GetRemoteIpBlocks())+len(s.GetRequestPrincipals()) > 0 {
						bad("%s: admit Checks by principals only (TRUST_DOMAIN/ns/NS/sa/SA)", at)
					}
					for _, pr := range s.GetPrincipals() {
						if strings.Contains(pr, "*") {
							bad("%s: principal %q is a wildcard", at, pr)
						}
						principals = append(principals, pr)
					}
				}
			}
			if slices.Contains(ports, admin) && (len(paths) != 1 || !paths["/metrics"] || len(r.GetFrom()) > 0 && slices.Contains(ports, grpc)) {
				bad("%s: the admin port %s should admit GET /metrics only", at, admin)
			}
		}
	}
	for _, o := range customPolicies(b) {
		prefix := "/ns/" + o.Namespace + "/sa/"
		if !slices.ContainsFunc(principals, func(pr string) bool { return strings.Contains(pr, prefix) }) {
			bad("AuthorizationPolicy %s/%s makes its workload's sidecars send Checks with their own identity (…%s…), which no ALLOW rule for port %s admits: they would be refused, and fail open",
				o.Namespace, o.Name, prefix, grpc)
		}
	}
	return p
}

// TestIstioAccessBrokenCopiesAreRejected: the checks on Floodgate's own Istio policies can fail.
func TestIstioAccessBrokenCopiesAreRejected(t *testing.T) {
	const f = "istio/floodgate-access.yaml"
	caught(t, []mutation{
		{"unknown PeerAuthentication field", f, "mode: STRICT", "mod: STRICT", "mod"},
		{"unknown AuthorizationPolicy field", f, "principals: [", "principal: [", "principal"},
		{"permissive", f, "mode: STRICT", "mode: PERMISSIVE", "want STRICT"},
		{"gRPC port permissive", f, `    "9192":`, `    "9191":`, "want STRICT"},
		{"no port", f, "          ports: [\"9191\"]\n", "          methods: [\"POST\"]\n", "applies to every port"},
		{"from everyone", f, "    - from:\n        - source:\n            principals: [\"cluster.local/ns/demo/sa/httpbin\"]\n      to:", "    - to:", "admits Checks from every source"},
		{"by namespace", f, "principals: [\"cluster.local/ns/demo/sa/httpbin\"]", "namespaces: [\"demo\"]", "by principals only"},
		{"wildcard", f, `["cluster.local/ns/demo/sa/httpbin"]`, `["cluster.local/ns/*"]`, "wildcard"},
		{"protected workload left out", f, `["cluster.local/ns/demo/sa/httpbin"]`, `["cluster.local/ns/shop/sa/httpbin"]`, "fail open"},
		{"admin wide open", f, "            paths: [\"/metrics\"]\n", "", "GET /metrics only"},
		{"wrong namespace", f, "  name: floodgate-callers\n  namespace: floodgate", "  name: floodgate-callers\n  namespace: default", "every workload of the mesh may send Checks"},
	})
}
