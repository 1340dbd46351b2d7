package manifests

import (
	"context"
	"os"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const istioPoliciesFile = "istio/floodgate-policies.yaml"

// istioCheck loads istio/floodgate-policies.yaml and returns a Check of a GET /api/orders shaped as an
// Istio sidecar sends it to a CUSTOM provider: the peer's principal in attributes.source.principal
// (pilot/pkg/security/authz/builder/extauthz.go builds the filter; the principal is the downstream
// peer certificate's URI SAN, CheckRequestUtils::setAttrContextPeer in Envoy's
// source/extensions/filters/common/ext_authz/check_request_utils.cc), no metadata_context, no
// context_extensions. It answers the policies that applied and whether the request passed.
func istioCheck(t *testing.T) (check func(principal, source, xff string) (policy string, allowed bool), srv *extauthz.Server) {
	t.Helper()
	example, err := os.ReadFile(istioPoliciesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(example), "source_principal") {
		t.Fatalf("%s no longer keys on source_principal", istioPoliciesFile)
	}
	cfg, err := doors.Parse(istioPoliciesFile, append([]byte("store: {backend: memory}\nclient_ip: {trusted_hops: 0}\n"), example...))
	if err != nil {
		t.Fatal(err)
	}
	srv = extauthz.NewServer(cfg.Engine, storetest.Memory(nil), extauthz.ServerOptions{})
	return func(principal, source, xff string) (policy string, allowed bool) {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Principal: principal, Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
				SocketAddress: &corev3.SocketAddress{Address: source, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: "GET", Path: "/api/orders", Host: "orders.shop.svc.cluster.local",
				Headers: map[string]string{":method": "GET", ":path": "/api/orders", ":authority": "orders.shop.svc.cluster.local", "x-forwarded-for": xff},
			}},
		}}
		resp, err := srv.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range append(resp.GetOkResponse().GetResponseHeadersToAdd(), resp.GetDeniedResponse().GetHeaders()...) {
			if h.GetHeader().GetKey() == "ratelimit-policy" {
				policy = h.GetHeader().GetValue()
			}
		}
		return policy, resp.GetStatus().GetCode() == 0
	}, srv
}

// TestIstioPoliciesKeyOnTheWorkloadIdentity: in-mesh callers get a bucket per calling workload.
func TestIstioPoliciesKeyOnTheWorkloadIdentity(t *testing.T) {
	checkXFF, srv := istioCheck(t)
	check := func(principal, source string) (string, bool) { return checkXFF(principal, source, "6.6.6.6") }
	cart, checkout := "spiffe://cluster.local/ns/shop/sa/cart", "spiffe://cluster.local/ns/shop/sa/checkout"
	capacity := 0
	for capacity < 1000 {
		p, ok := check(cart, "10.0.0.7")
		if !ok {
			break
		}
		if !strings.Contains(p, "per-workload") || strings.Contains(p, "outside") {
			t.Fatalf("policy %q answered, want per-workload alone", p)
		}
		capacity++
	}
	if capacity == 0 || capacity == 1000 {
		t.Fatalf("the cart workload passed %d requests", capacity)
	}
	// Another workload on the same pod address, and outside traffic, have buckets of their own.
	if _, ok := check(checkout, "10.0.0.7"); !ok {
		t.Error("the checkout workload shares the cart workload's bucket")
	}
	if _, ok := check("", "10.0.0.7"); !ok {
		t.Error("traffic without a principal shares the cart workload's bucket")
	}
	if n := testutil.ToFloat64(srv.Metrics().IdentityMissing.WithLabelValues("per-workload")); n != 0 {
		t.Errorf("identity_missing = %v; every request had a principal or an address", n)
	}
}

// TestIstioGatewayTrafficIsKeyedPerClient: requests forwarded by the ingress gateway all carry the
// gateway's principal (the downstream peer of the workload's sidecar is the gateway); the shipped
// policies key them per client address, not on that principal, and keep them apart from in-mesh
// callers.
func TestIstioGatewayTrafficIsKeyedPerClient(t *testing.T) {
	check, _ := istioCheck(t)
	const gateway = "spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"
	const gatewayPod = "10.0.0.2"
	capacity := 0
	for capacity < 1000 {
		p, ok := check(gateway, gatewayPod, "198.51.100.1")
		if !ok {
			break
		}
		if !strings.Contains(p, "outside-per-client") || strings.Contains(p, "per-workload") {
			t.Fatalf("policy %q answered gateway traffic, want outside-per-client alone", p)
		}
		capacity++
	}
	if capacity == 0 || capacity == 1000 {
		t.Fatalf("one outside client passed %d requests", capacity)
	}
	if _, ok := check(gateway, gatewayPod, "198.51.100.2"); !ok {
		t.Error("a second outside client shares the first one's bucket: outside traffic is keyed on the gateway's principal")
	}
	if _, ok := check("spiffe://cluster.local/ns/shop/sa/cart", gatewayPod, "198.51.100.1"); !ok {
		t.Error("an in-mesh workload shares an outside client's bucket")
	}
	// The other installer's service account name is the gateway too.
	if p, _ := check("spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway", gatewayPod, "198.51.100.3"); !strings.Contains(p, "outside-per-client") {
		t.Errorf("policy %q answered the gateway installed by Helm, want outside-per-client", p)
	}
}
