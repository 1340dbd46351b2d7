package manifests

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/rls"
)

const (
	istioRLSFilter = "istio/ratelimit/envoyfilter.yaml"
	istioRLSConfig = "istio/ratelimit/ratelimit-config.yaml"
)

// TestIstioGlobalRateLimitingPointsAtFloodgate decodes the EnvoyFilter of
// Istio's documented global rate limiting strictly (Istio's EnvoyFilter,
// then each patch's value as the Envoy type it patches: an HttpFilter whose
// typed_config is the rate limit filter, and a VirtualHost's rate_limits),
// requires its rate limit service cluster to be Istio's outbound cluster of
// Floodgate's Service and gRPC port (istio pilot/pkg/model/service.go,
// BuildSubsetKey: "outbound|PORT||HOST"), and sends the descriptors its
// actions build through the limits in the ConfigMap beside it.
func TestIstioGlobalRateLimitingPointsAtFloodgate(t *testing.T) {
	data, err := os.ReadFile(istioRLSFilter)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec jsonRaw `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.APIVersion != "networking.istio.io/v1alpha3" || doc.Kind != "EnvoyFilter" {
		t.Fatalf("%s: %s %s, want networking.istio.io/v1alpha3 EnvoyFilter", istioRLSFilter, doc.APIVersion, doc.Kind)
	}
	ef := &networkingv1alpha3.EnvoyFilter{}
	if err := protojson.Unmarshal(doc.Spec, ef); err != nil {
		t.Fatalf("%s: spec: %v", istioRLSFilter, err)
	}
	if len(ef.GetConfigPatches()) != 2 {
		t.Fatalf("%s: %d patches, want the filter and the route actions", istioRLSFilter, len(ef.GetConfigPatches()))
	}
	var filter *ratelimitv3.RateLimit
	var vh *routev3.VirtualHost
	for i, p := range ef.GetConfigPatches() {
		js, err := protojson.Marshal(p.GetPatch().GetValue())
		if err != nil {
			t.Fatal(err)
		}
		switch p.GetApplyTo() {
		case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
			hf := &hcmv3.HttpFilter{}
			if err := protojson.Unmarshal(js, hf); err != nil {
				t.Fatalf("patch %d: not an Envoy HttpFilter: %v", i, err)
			}
			if err := hf.ValidateAll(); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			filter = &ratelimitv3.RateLimit{}
			if err := hf.GetTypedConfig().UnmarshalTo(filter); err != nil {
				t.Fatalf("patch %d: typed_config is not the rate limit filter: %v", i, err)
			}
			if err := filter.ValidateAll(); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			if p.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_INSERT_BEFORE ||
				p.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.router" {
				t.Errorf("patch %d: the rate limit filter must go before the router", i)
			}
		case networkingv1alpha3.EnvoyFilter_VIRTUAL_HOST:
			vh = &routev3.VirtualHost{}
			if err := (protojson.UnmarshalOptions{}).Unmarshal(js, vh); err != nil {
				t.Fatalf("patch %d: not an Envoy VirtualHost: %v", i, err)
			}
		default:
			t.Fatalf("patch %d applies to %v", i, p.GetApplyTo())
		}
	}
	if filter == nil || vh == nil {
		t.Fatal("want one HTTP_FILTER and one VIRTUAL_HOST patch")
	}

	svc := floodgateService(t)
	var port int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "grpc" {
			port = p.Port
		}
	}
	want := fmt.Sprintf("outbound|%d||%s.%s.svc.cluster.local", port, svc.Name, svc.Namespace)
	if got := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != want {
		t.Errorf("rate limit service cluster %q, want %q (Floodgate's Service, grpc port)", got, want)
	}
	if got := filter.GetTimeout().AsDuration().Milliseconds(); got < 100 {
		t.Errorf("timeout %dms: below twice Floodgate's Redis timeout, Envoy's failure mode would decide before Floodgate's", got)
	}

	cfg := configMapRLS(t)
	for _, rl := range vh.GetRateLimits() {
		var d []rls.Entry
		for _, a := range rl.GetActions() {
			switch {
			case a.GetRemoteAddress() != nil:
				d = append(d, rls.Entry{Key: "remote_address", Value: "203.0.113.7"})
			case a.GetRequestHeaders() != nil:
				d = append(d, rls.Entry{Key: a.GetRequestHeaders().GetDescriptorKey(), Value: "k-1"})
			default:
				t.Fatalf("an action this test does not model: %v", a)
			}
		}
		if cfg.Select(filter.GetDomain(), d) == nil {
			t.Errorf("descriptor %v selects no limit in domain %q of %s", d, filter.GetDomain(), istioRLSConfig)
		}
	}
}

// jsonRaw keeps a YAML subtree as JSON for protojson.
type jsonRaw []byte

func (j *jsonRaw) UnmarshalJSON(b []byte) error { *j = append((*j)[:0], b...); return nil }

func floodgateService(t *testing.T) *corev1.Service {
	t.Helper()
	data, err := os.ReadFile("service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range bytes.Split(data, []byte("\n---")) {
		var s corev1.Service
		if err := yaml.Unmarshal(d, &s); err == nil && s.Kind == "Service" && s.Name == "floodgate" {
			return &s
		}
	}
	t.Fatal("service.yaml has no Service floodgate")
	return nil
}

func configMapRLS(t *testing.T) *rls.Config {
	t.Helper()
	data, err := os.ReadFile(istioRLSConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatal(err)
	}
	var names []string
	sources := map[string][]byte{}
	for name, content := range cm.Data {
		if !strings.HasSuffix(name, ".yaml") {
			t.Errorf("%s: key %s: envoyproxy/ratelimit and Floodgate read only *.yaml files", istioRLSConfig, name)
		}
		names = append(names, name)
		sources[name] = []byte(content)
	}
	cfg, err := rls.Parse(names, sources)
	if err != nil {
		t.Fatalf("%s: %v", istioRLSConfig, err)
	}
	return cfg
}
