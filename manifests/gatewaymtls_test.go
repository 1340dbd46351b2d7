package manifests

import (
	"fmt"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// gatewayMTLSProblems checks gateway-mtls/ against the Service and the Envoy Gateway example: the
// BackendTLSPolicy targets the Service and port the SecurityPolicy's extAuth sends Checks to (Envoy
// Gateway applies a Service's BackendTLSPolicy to extAuth backendRefs:
// internal/gatewayapi/ext_service.go, processExtServiceDestination), lives in the Service's
// namespace with its CA (cross-namespace references are refused: backendtlspolicy.go,
// backendTLSTargetMatched and getCaCertsFromCARefs), and names the Service's host; the EnvoyProxy
// presents a client certificate from its own namespace (backendtlspolicy.go,
// processClientTLSSettings) and sits in the Gateway's namespace, where Gateway
// infrastructure.parametersRef finds it.
func gatewayMTLSProblems(b *bundle, fs *corev1.Service, grpcSvc corev1.ServicePort) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	btps := all[*gwapiv1.BackendTLSPolicy](b)
	if len(btps) != 1 {
		return []string{fmt.Sprintf("gateway-mtls: want one BackendTLSPolicy, have %d", len(btps))}
	}
	btp := btps[0]
	at := "BackendTLSPolicy " + btp.Name
	if btp.Namespace != fs.Namespace {
		bad("%s is in namespace %s: it must be in the Service's, %s", at, btp.Namespace, fs.Namespace)
	}
	targeted := false
	for _, r := range btp.Spec.TargetRefs {
		if r.Group == "" && r.Kind == "Service" && string(r.Name) == fs.Name && (r.SectionName == nil || string(*r.SectionName) == grpcSvc.Name) {
			targeted = true
		}
	}
	if !targeted {
		bad("%s does not target Service %s (port %s): the Checks would stay plaintext", at, fs.Name, grpcSvc.Name)
	}
	v := btp.Spec.Validation
	if len(v.CACertificateRefs) == 0 || v.WellKnownCACertificates != nil {
		bad("%s: validate Floodgate's certificate against your CA (caCertificateRefs), not the system's", at)
	}
	if host := fs.Name + "." + fs.Namespace + ".svc.cluster.local"; string(v.Hostname) != host {
		bad("%s: hostname %q, want the Service's %s (the SAN Floodgate's certificate names)", at, v.Hostname, host)
	}
	for _, sp := range all[*egv1a1.SecurityPolicy](b) {
		if ea := sp.Spec.ExtAuth; ea != nil && ea.GRPC != nil {
			for _, ref := range ea.GRPC.BackendRefs {
				if string(ref.Name) != fs.Name {
					bad("SecurityPolicy %s sends Checks to %s, which %s does not cover", sp.Name, ref.Name, at)
				}
			}
		}
	}

	eps := all[*egv1a1.EnvoyProxy](b)
	if len(eps) != 1 {
		return append(p, fmt.Sprintf("gateway-mtls: want one EnvoyProxy, have %d", len(eps)))
	}
	ep := eps[0]
	var ref *gwapiv1.SecretObjectReference
	if ep.Spec.BackendTLS != nil {
		ref = ep.Spec.BackendTLS.ClientCertificateRef
	}
	switch {
	case ref == nil:
		bad("EnvoyProxy %s presents no client certificate (backendTLS.clientCertificateRef)", ep.Name)
	case ref.Namespace != nil && string(*ref.Namespace) != ep.Namespace:
		bad("EnvoyProxy %s: the client certificate Secret must be in its own namespace %s", ep.Name, ep.Namespace)
	case ref.Kind != nil && *ref.Kind != "Secret":
		bad("EnvoyProxy %s: clientCertificateRef kind %s, want Secret", ep.Name, *ref.Kind)
	}
	for _, gw := range all[*gwapiv1.Gateway](b) {
		if gw.Namespace != ep.Namespace {
			bad("EnvoyProxy %s is in namespace %s, Gateway %s in %s: a Gateway's parametersRef names an EnvoyProxy of its own namespace", ep.Name, ep.Namespace, gw.Name, gw.Namespace)
		}
	}
	return p
}

// TestGatewayMTLSBrokenCopiesAreRejected: the Envoy Gateway mTLS checks can fail.
func TestGatewayMTLSBrokenCopiesAreRejected(t *testing.T) {
	const btp, ep = "gateway-mtls/backend-tls-policy.yaml", "gateway-mtls/envoy-proxy.yaml"
	caught(t, []mutation{
		{"unknown BackendTLSPolicy field", btp, "caCertificateRefs:", "caCertificateRef:", "caCertificateRef"},
		{"unknown EnvoyProxy field", ep, "clientCertificateRef:", "clientCertRef:", "clientCertRef"},
		{"wrong Service", btp, "      name: floodgate\n      sectionName", "      name: floodgat\n      sectionName", "does not target Service floodgate"},
		{"wrong port", btp, "sectionName: grpc", "sectionName: http-admin", "does not target Service floodgate"},
		{"other namespace", btp, "  namespace: floodgate", "  namespace: demo", "must be in the Service's"},
		{"system CAs", btp, "    caCertificateRefs:\n      - group: \"\"\n        kind: ConfigMap\n        name: floodgate-ca\n", "    wellKnownCACertificates: System\n", "not the system's"},
		{"hostname", btp, "hostname: floodgate.floodgate.svc.cluster.local", "hostname: floodgate", "want the Service's"},
		{"no client certificate", ep, "  backendTLS:\n    clientCertificateRef:\n      kind: Secret\n      name: edge-floodgate-client\n", "  backendTLS: {}\n", "presents no client certificate"},
		{"certificate elsewhere", ep, "      name: edge-floodgate-client\n", "      name: edge-floodgate-client\n      namespace: floodgate\n", "in its own namespace"},
		{"proxy elsewhere", ep, "  namespace: demo", "  namespace: envoy-gateway-system", "parametersRef names an EnvoyProxy of its own namespace"},
		{"unlisted file", "gateway-mtls/kustomization.yaml", "  - envoy-proxy.yaml\n", "", "does not list envoy-proxy.yaml"},
	})
}
