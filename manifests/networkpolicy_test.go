package manifests

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The peers the admin port may admit: kube-prometheus-stack's Prometheus pods in namespace
// monitoring (manifests/network-policy.yaml, floodgate-admin). /metrics tells whoever reads it what
// the limits are and how full the buckets run.
const adminNamespace = "monitoring"

var adminPods = map[string]string{"app.kubernetes.io/name": "prometheus"}

// envoyGatewayNamespace is where Envoy Gateway runs a Gateway's Envoy pods by default (its
// controller namespace), labelled with proxy.EnvoyAppLabel and the owning Gateway's name and
// namespace (internal/infrastructure/kubernetes/proxy/resource.go, EnvoyAppLabel;
// internal/gatewayapi/translator.go, OwningGatewayNameLabel and OwningGatewayNamespaceLabel).
const envoyGatewayNamespace = "envoy-gateway-system"

func envoyGatewayPods(gw *gwapiv1.Gateway) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":                         "envoy",
		"app.kubernetes.io/component":                    "proxy",
		"app.kubernetes.io/managed-by":                   "envoy-gateway",
		"gateway.envoyproxy.io/owning-gateway-name":      gw.Name,
		"gateway.envoyproxy.io/owning-gateway-namespace": gw.Namespace,
	}
}

// rendered is what `kubectl apply -k manifests` sends: the root kustomization's resources, file by
// file in its order, with its namespace set on every namespaced object (kustomize's namespace
// transformer). Each object is a copy; the bundle is not changed.
func rendered(b *bundle) []metav1.Object {
	var root *kustomization
	for _, o := range b.files["kustomization.yaml"] {
		root, _ = o.(*kustomization)
	}
	if root == nil {
		return nil
	}
	var out []metav1.Object
	for _, r := range root.Resources {
		for _, o := range b.files[path.Clean(r)] {
			var c metav1.Object
			switch t := o.(type) {
			case *appsv1.Deployment:
				c = t.DeepCopy()
			case *corev1.Service:
				c = t.DeepCopy()
			case *networkingv1.NetworkPolicy:
				c = t.DeepCopy()
			default:
				continue // the checks below read Deployments, Services and NetworkPolicies only
			}
			if root.Namespace != "" {
				c.SetNamespace(root.Namespace)
			}
			out = append(out, c)
		}
	}
	return out
}

func ofType[T metav1.Object](objs []metav1.Object) []T {
	var out []T
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// peer is one source a NetworkPolicy rule admits to a port.
type peer struct {
	// namespace is the one namespace the peer names; "" when its namespaceSelector could match
	// any namespace (an empty one, or labels other than kubernetes.io/metadata.name).
	namespace string
	// pods selects the pods within it; nil for every pod.
	pods labels.Selector
	// what describes it for messages.
	what string
}

// named reports whether the peer is specific pods of one named namespace: what "not any pod"
// means here.
func (p peer) named() bool { return p.namespace != "" && p.pods != nil && !p.pods.Empty() }

// admits reports whether the peer admits pods with these labels in namespace ns.
func (p peer) admits(ns string, podLabels map[string]string) bool {
	return (p.namespace == "" || p.namespace == ns) && (p.pods == nil || p.pods.Matches(labels.Set(podLabels)))
}

// onlyAdmits reports whether every pod the peer admits is in namespace ns and carries want's
// labels: its selector requires each of them.
func (p peer) onlyAdmits(ns string, want map[string]string) bool {
	if !p.named() || p.namespace != ns {
		return false
	}
	reqs, _ := p.pods.Requirements()
	for k, v := range want {
		if !slices.ContainsFunc(reqs, func(r labels.Requirement) bool {
			return r.Key() == k && r.Values().Len() == 1 && r.Values().Has(v) && (r.Operator() == "=" || r.Operator() == "==" || r.Operator() == "in")
		}) {
			return false
		}
	}
	return true
}

// namespaceOf is the one namespace a namespaceSelector names, or "" when it could match others.
func namespaceOf(sel *metav1.LabelSelector) string {
	if len(sel.MatchExpressions) > 0 || len(sel.MatchLabels) != 1 {
		return ""
	}
	return sel.MatchLabels["kubernetes.io/metadata.name"]
}

// selectorOf converts a label selector; nil stays nil (every pod).
func selectorOf(sel *metav1.LabelSelector) (labels.Selector, error) {
	if sel == nil {
		return nil, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return nil, err
	}
	return s, nil
}

// portMatches reports whether a rule's ports cover the container port (by number, range or
// name; no ports: every port).
func portMatches(ports []networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != cp.Protocol && !(cp.Protocol == "" && proto == corev1.ProtocolTCP) {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.StrVal != "" && p.Port.StrVal == cp.Name:
			return true
		case p.Port.StrVal == "" && p.Port.IntVal == cp.ContainerPort:
			return true
		case p.Port.StrVal == "" && p.EndPort != nil && p.Port.IntVal <= cp.ContainerPort && cp.ContainerPort <= *p.EndPort:
			return true
		}
	}
	return false
}

// admitted lists the peers that the NetworkPolicies of namespace ns admit to a container port of
// pods with podLabels. isolated is false when no policy selects those pods for ingress: then every
// pod may connect.
func admitted(nps []*networkingv1.NetworkPolicy, ns string, podLabels map[string]string, cp corev1.ContainerPort) (peers []peer, isolated bool, err error) {
	for _, np := range nps {
		if np.Namespace != ns {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			return nil, false, fmt.Errorf("NetworkPolicy %s: %w", np.Name, err)
		}
		// No policyTypes: Ingress is implied (networking/v1 NetworkPolicySpec.PolicyTypes).
		ingress := len(np.Spec.PolicyTypes) == 0 || slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
		if !ingress || !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		isolated = true
		for i, rule := range np.Spec.Ingress {
			if !portMatches(rule.Ports, cp) {
				continue
			}
			at := fmt.Sprintf("NetworkPolicy %s ingress[%d]", np.Name, i)
			if len(rule.From) == 0 {
				peers = append(peers, peer{what: at + " (no from: every source)"})
			}
			for j, f := range rule.From {
				at := fmt.Sprintf("%s from[%d]", at, j)
				if f.IPBlock != nil {
					peers = append(peers, peer{what: at + " (ipBlock " + f.IPBlock.CIDR + ")"})
					continue
				}
				pods, err := selectorOf(f.PodSelector)
				if err != nil {
					return nil, false, fmt.Errorf("%s: %w", at, err)
				}
				p := peer{namespace: np.Namespace, pods: pods, what: at}
				if f.NamespaceSelector != nil {
					p.namespace = namespaceOf(f.NamespaceSelector)
				}
				peers = append(peers, p)
			}
		}
	}
	return peers, isolated, nil
}

// networkProblems renders the kustomization and checks who may reach each port of its Services:
// none may be reachable by any pod; the gRPC port admits the proxies of the shipped examples (a
// caller left out would fail open, unlimited); the admin port admits Prometheus alone; Redis
// admits Floodgate alone.
func networkProblems(b *bundle) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	objs := rendered(b)
	nps := ofType[*networkingv1.NetworkPolicy](objs)
	fd := named[*appsv1.Deployment](b, "floodgate")
	if fd == nil {
		return nil // problems() reports it
	}
	floodgatePods := fd.Spec.Template.Labels

	for _, s := range ofType[*corev1.Service](objs) {
		for _, d := range ofType[*appsv1.Deployment](objs) {
			if !selects(s.Spec.Selector, d.Spec.Template.Labels) {
				continue
			}
			for _, sp := range s.Spec.Ports {
				cp, ok := containerPort(&d.Spec.Template.Spec.Containers[0], sp.TargetPort)
				if !ok {
					continue // problems() reports it
				}
				at := fmt.Sprintf("Service %s port %s (%s %d)", s.Name, sp.Name, cp.Name, cp.ContainerPort)
				peers, isolated, err := admitted(nps, s.Namespace, d.Spec.Template.Labels, cp)
				if err != nil {
					bad("%s: %v", at, err)
					continue
				}
				if !isolated {
					bad("%s is reachable by any pod: no NetworkPolicy selects the pods of Deployment %s for ingress", at, d.Name)
					continue
				}
				for _, pr := range peers {
					if !pr.named() {
						bad("%s is reachable by any pod: %s admits more than named pods of one named namespace", at, pr.what)
					}
				}
				switch {
				case d.Name == fd.Name && cp.Name == "admin":
					for _, pr := range peers {
						if pr.named() && !pr.onlyAdmits(adminNamespace, adminPods) {
							bad("%s: the admin port is exposed beyond its peers (Prometheus in %s): %s admits namespace %s", at, adminNamespace, pr.what, pr.namespace)
						}
					}
					if !slices.ContainsFunc(peers, func(pr peer) bool { return pr.admits(adminNamespace, adminPods) }) {
						bad("%s: Prometheus (%v in namespace %s) cannot scrape it", at, adminPods, adminNamespace)
					}
				case d.Name == fd.Name && cp.Name == "grpc":
					for _, c := range shippedCallers(b) {
						if !slices.ContainsFunc(peers, func(pr peer) bool { return pr.admits(c.namespace, c.pods) }) {
							bad("%s: %s cannot send Checks (namespace %s, pods %v): list it in callers.yaml, or its requests fail open, unlimited", at, c.what, c.namespace, c.pods)
						}
					}
				case cp.Name == "redis" || sp.Port == 6379:
					for _, pr := range peers {
						if pr.named() && !pr.onlyAdmits(fd.Namespace, fd.Spec.Selector.MatchLabels) {
							bad("%s: Redis admits more than Floodgate's pods: %s", at, pr.what)
						}
					}
					if !slices.ContainsFunc(peers, func(pr peer) bool { return pr.admits(fd.Namespace, floodgatePods) }) {
						bad("%s: Floodgate's pods cannot reach Redis", at)
					}
				}
			}
		}
	}
	return p
}

// caller is a proxy a shipped example makes send Checks.
type caller struct {
	what, namespace string
	pods            map[string]string
}

// shippedCallers are the proxies the shipped examples make call Floodgate: the Envoy pods of each
// Envoy Gateway Gateway whose routes a SecurityPolicy sends to Floodgate, and the sidecars of each
// workload an Istio CUSTOM policy protects.
func shippedCallers(b *bundle) []caller {
	var out []caller
	if len(all[*egv1a1.SecurityPolicy](b)) > 0 {
		for _, gw := range all[*gwapiv1.Gateway](b) {
			out = append(out, caller{"Envoy Gateway's proxies of Gateway " + gw.Namespace + "/" + gw.Name, envoyGatewayNamespace, envoyGatewayPods(gw)})
		}
	}
	for _, o := range customPolicies(b) {
		out = append(out, caller{"the sidecars AuthorizationPolicy " + o.Namespace + "/" + o.Name + " protects", o.Namespace, maps.Clone(o.policy.GetSelector().GetMatchLabels())})
	}
	return out
}

// TestNetworkPolicyBrokenCopiesAreRejected: the rendered policies are held to who may call.
func TestNetworkPolicyBrokenCopiesAreRejected(t *testing.T) {
	caught(t, []mutation{
		{"unknown NetworkPolicy field", "callers.yaml", "policyTypes: [Ingress]", "policyType: [Ingress]", "policyType"},
		{"a rule for everyone", "callers.yaml", "  ingress:\n    - ports:", "  ingress:\n    - {}\n    - ports:", "Service floodgate port grpc (grpc 9191) is reachable by any pod"},
		{"callers from any namespace", "callers.yaml", "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: demo\n", "        - namespaceSelector: {}\n", "is reachable by any pod"},
		{"every pod of a namespace", "callers.yaml", "          podSelector:\n            matchLabels:\n              app: httpbin\n", "", "is reachable by any pod"},
		{"an ipBlock", "callers.yaml", "      from:\n", "      from:\n        - ipBlock: {cidr: 10.0.0.0/8}\n", "ipBlock 10.0.0.0/8"},
		{"the gateway's proxies left out", "callers.yaml", "owning-gateway-name: edge", "owning-gateway-name: other", "Gateway demo/edge cannot send Checks"},
		{"the sidecars left out", "callers.yaml", "kubernetes.io/metadata.name: demo", "kubernetes.io/metadata.name: shop", "floodgate-ratelimit protects cannot send Checks"},
		{"callers reach the admin port", "callers.yaml", "    - ports:\n        - port: grpc\n          protocol: TCP\n      from:", "    - from:", "the admin port is exposed beyond its peers"},
		{"admin from another namespace", "network-policy.yaml", "kubernetes.io/metadata.name: monitoring", "kubernetes.io/metadata.name: demo", "the admin port is exposed beyond its peers"},
		{"admin from any namespace", "network-policy.yaml", "        - namespaceSelector:\n            matchLabels:\n              kubernetes.io/metadata.name: monitoring\n", "        - namespaceSelector: {}\n", "Service floodgate port http-admin (admin 9192) is reachable by any pod"},
		{"no default deny, no redis policy", "redis-demo.yaml", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: redis\n      app.kubernetes.io/component: demo-only\n  policyTypes: [Ingress]", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: redis\n      app.kubernetes.io/component: demo-only\n  policyTypes: [Egress]", "Floodgate's pods cannot reach Redis"},
		{"redis open to its namespace", "redis-demo.yaml", "        - podSelector:\n            matchLabels:\n              app.kubernetes.io/name: floodgate\n              app.kubernetes.io/component: ratelimiter\n", "        - podSelector: {}\n", "floodgate-redis-demo port tcp-redis (redis 6379) is reachable by any pod"},
		{"redis admits others", "redis-demo.yaml", "              app.kubernetes.io/name: floodgate\n              app.kubernetes.io/component: ratelimiter\n", "              app.kubernetes.io/component: ratelimiter\n", "Redis admits more than Floodgate's pods"},
		{"policy not listed", "kustomization.yaml", "  - callers.yaml\n", "", "callers.yaml"},
	})
}

// TestRenderedPoliciesIsolateEveryPod: without the default deny, a pod added to the namespace
// later would be open to all; every Deployment's pods are selected by an ingress policy as shipped.
func TestRenderedPoliciesIsolateEveryPod(t *testing.T) {
	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	objs := rendered(b)
	nps := ofType[*networkingv1.NetworkPolicy](objs)
	stranger := map[string]string{"app": "added-later"}
	if _, isolated, _ := admitted(nps, "floodgate", stranger, corev1.ContainerPort{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}); !isolated {
		t.Error("a pod added to namespace floodgate later would accept every connection: keep the default deny")
	}
	if n := len(ofType[*appsv1.Deployment](objs)); n != 2 {
		t.Fatalf("rendered %d Deployments, want 2", n)
	}
	for _, o := range objs {
		if o.GetNamespace() != "floodgate" {
			t.Errorf("%s rendered into namespace %q", o.GetName(), o.GetNamespace())
		}
	}
	var names []string
	for _, np := range nps {
		names = append(names, np.Name)
	}
	slices.Sort(names)
	if want := []string{"default-deny-ingress", "floodgate-admin", "floodgate-callers", "floodgate-redis-demo"}; !slices.Equal(names, want) {
		t.Errorf("rendered NetworkPolicies %v, want %v", names, want)
	}
}
