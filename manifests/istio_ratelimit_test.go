package manifests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
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

// rlsConfigMap is the ConfigMap of limits beside the EnvoyFilter, strictly decoded.
func rlsConfigMap(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	data, err := os.ReadFile(istioRLSConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatal(err)
	}
	return &cm
}

func configMapRLS(t *testing.T) *rls.Config {
	t.Helper()
	cm := rlsConfigMap(t)
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

// TestFloodgateReadsTheRateLimitConfigMap: applying manifests/istio/ratelimit/ after manifests/ is
// all it takes. Floodgate's Deployment mounts the ConfigMap of limits (by its name, in its
// namespace) whole, without subPath (the kubelet updates only whole mounts), optionally (the base
// runs without it), at the directory rls.config names in Floodgate's configuration; that
// configuration loads the ConfigMap's files as the kubelet lays them out (the domain the
// EnvoyFilter asks for, TestIstioGlobalRateLimitingPointsAtFloodgate), and loads the empty directory of a ConfigMap not created yet.
func TestFloodgateReadsTheRateLimitConfigMap(t *testing.T) {
	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	limits := rlsConfigMap(t)
	fd := named[*appsv1.Deployment](b, "floodgate")
	if fd == nil {
		t.Fatal("no Deployment floodgate")
	}
	if limits.Namespace != fd.Namespace {
		t.Errorf("%s: ConfigMap %s is in namespace %q, Floodgate's pods in %q: they cannot mount it", istioRLSConfig, limits.Name, limits.Namespace, fd.Namespace)
	}
	spec := &fd.Spec.Template.Spec
	fc := &spec.Containers[0]
	cfgVol := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.ConfigMap != nil && named[*corev1.ConfigMap](b, v.ConfigMap.Name) != nil && named[*corev1.ConfigMap](b, v.ConfigMap.Name).Data["floodgate.yaml"] != ""
	})
	if cfgVol < 0 {
		t.Fatal("Floodgate mounts no ConfigMap holding floodgate.yaml")
	}
	floodgateYAML := named[*corev1.ConfigMap](b, spec.Volumes[cfgVol].ConfigMap.Name).Data["floodgate.yaml"]
	cfg, _, err := floodgateConfig(floodgateYAML)
	if err != nil {
		t.Fatal(err)
	}
	dir := cfg.RLS.Config
	if dir == "" {
		t.Fatal("Floodgate's configuration sets no rls.config: the rate limit service serves no limits")
	}

	var mount *corev1.VolumeMount
	for i := range fc.VolumeMounts {
		if vm := &fc.VolumeMounts[i]; vm.MountPath == dir {
			mount = vm
		} else if strings.HasPrefix(dir, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			t.Errorf("rls.config %s lies inside the mount of %s at %s: a mount point inside a read-only volume", dir, vm.Name, vm.MountPath)
		}
	}
	if mount == nil {
		t.Fatalf("rls.config is %s, but the floodgate container mounts nothing there", dir)
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	switch v := &spec.Volumes[i]; {
	case i < 0 || v.ConfigMap == nil:
		t.Fatalf("%s is not a ConfigMap volume", dir)
	case v.ConfigMap.Name != limits.Name:
		t.Errorf("%s mounts ConfigMap %q, but %s is named %q", dir, v.ConfigMap.Name, istioRLSConfig, limits.Name)
	case len(v.ConfigMap.Items) > 0 || mount.SubPath != "" || mount.SubPathExpr != "":
		t.Errorf("%s mounts part of the ConfigMap: the kubelet updates only whole mounts", dir)
	case v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional:
		t.Errorf("the ConfigMap %s is required: Floodgate would not start without manifests/istio/ratelimit/", limits.Name)
	case !mount.ReadOnly:
		t.Errorf("%s is mounted writable", dir)
	}

	// The kubelet's layout: each key a file in the directory (through ..data), or nothing yet.
	for _, files := range []map[string]string{limits.Data, nil} {
		mounted := t.TempDir()
		data := filepath.Join(mounted, "..data")
		os.Mkdir(data, 0o755)
		for name, content := range files {
			os.WriteFile(filepath.Join(data, name), []byte(content), 0o644)
			os.Symlink(filepath.Join("..data", name), filepath.Join(mounted, name))
		}
		c, _, err := floodgateConfig(strings.ReplaceAll(floodgateYAML, dir, mounted))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ReadLimits(); err != nil {
			t.Fatalf("with %d files mounted: %v", len(files), err)
		}
		got := c.Limits.Domains()
		if files == nil && len(got) != 0 {
			t.Errorf("an empty directory serves domains %v", got)
		}
		if want := configMapRLS(t).Domains(); files != nil && (len(want) == 0 || !slices.Equal(got, want)) {
			t.Errorf("the mounted ConfigMap serves domains %v, want %v", got, want)
		}
	}
}
