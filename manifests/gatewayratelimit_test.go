package manifests

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/door/ratelimit/peerenv"
	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/internal/peertest"
)

const (
	gatewayRLDir = "gateway-ratelimit"
	// egConfigFile holds Envoy Gateway's own configuration, as the
	// envoy-gateway-config ConfigMap its Helm chart installs (key
	// envoy-gateway.yaml), which the envoy-gateway Deployment reads.
	egConfigFile = gatewayRLDir + "/envoy-gateway-config.yaml"
)

// readGatewayRL reads the files of manifests/gateway-ratelimit.
func readGatewayRL(t *testing.T) map[string][]byte { return readYAMLDirs(t, gatewayRLDir) }

// loadGatewayRL decodes the directory strictly, and the EnvoyGateway the
// ConfigMap holds strictly into Envoy Gateway's own type.
func loadGatewayRL(files map[string][]byte) (*bundle, *egv1a1.EnvoyGateway, error) {
	b, err := load(files)
	if err != nil {
		return nil, nil, err
	}
	cm := named[*corev1.ConfigMap](b, "envoy-gateway-config")
	if cm == nil {
		return b, nil, fmt.Errorf("%s: no ConfigMap envoy-gateway-config", egConfigFile)
	}
	data, ok := cm.Data["envoy-gateway.yaml"]
	if !ok {
		return b, nil, fmt.Errorf("%s: the ConfigMap has no envoy-gateway.yaml, the key Envoy Gateway reads", egConfigFile)
	}
	js, err := yaml.YAMLToJSONStrict([]byte(data))
	if err != nil {
		return b, nil, fmt.Errorf("%s: envoy-gateway.yaml: %w", egConfigFile, err)
	}
	eg := &egv1a1.EnvoyGateway{}
	if err := floodgatetest.StrictJSON(js, eg); err != nil {
		return b, nil, fmt.Errorf("%s: envoy-gateway.yaml: EnvoyGateway: %w", egConfigFile, err)
	}
	return b, eg, nil
}

// gatewayRLProblems holds manifests/gateway-ratelimit to what Envoy Gateway
// does with it and what Floodgate needs: the ConfigMap is the one Envoy
// Gateway reads (envoy-gateway-config in envoy-gateway-system), its
// EnvoyGateway a Kubernetes provider whose rate limit Deployment runs the
// image make image tags, with a Redis backend and TLS to it; the
// environment Envoy Gateway then gives the container (its own golden
// redis-tls-settings.yaml Deployment's, with this url and this env merged
// in, as internal/infrastructure/kubernetes/ratelimit/resource.go,
// expectedRateLimitContainerEnv, merges rateLimitDeployment.container.env)
// is one Floodgate runs with; the BackendTrafficPolicy targets the demo
// HTTPRoute with a per-client rule and a rule with both costs.
func gatewayRLProblems(t *testing.T, b *bundle, eg *egv1a1.EnvoyGateway, base *bundle, files map[string][]byte, image string) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if cm := named[*corev1.ConfigMap](b, "envoy-gateway-config"); cm.Namespace != "envoy-gateway-system" {
		bad("ConfigMap envoy-gateway-config is in namespace %q: Envoy Gateway reads its own, in envoy-gateway-system", cm.Namespace)
	}
	if eg.Kind != "EnvoyGateway" || eg.APIVersion != "gateway.envoyproxy.io/v1alpha1" {
		bad("envoy-gateway.yaml: %s %s, want gateway.envoyproxy.io/v1alpha1 EnvoyGateway", eg.APIVersion, eg.Kind)
	}
	if eg.Gateway == nil || eg.Gateway.ControllerName != "gateway.envoyproxy.io/gatewayclass-controller" {
		bad("envoy-gateway.yaml: gateway.controllerName must stay Envoy Gateway's, or no GatewayClass is reconciled")
	}
	var container *egv1a1.KubernetesContainerSpec
	if pr := eg.Provider; pr == nil || pr.Type != egv1a1.ProviderTypeKubernetes || pr.Kubernetes == nil || pr.Kubernetes.RateLimitDeployment == nil || pr.Kubernetes.RateLimitDeployment.Container == nil {
		bad("envoy-gateway.yaml: want provider.kubernetes.rateLimitDeployment.container")
	} else {
		container = pr.Kubernetes.RateLimitDeployment.Container
		if container.Image == nil || *container.Image != image {
			bad("envoy-gateway.yaml: rateLimitDeployment.container.image %v, want the image make image tags, %s", container.Image, image)
		}
	}
	var url string
	if rl := eg.RateLimit; rl == nil || rl.Backend.Type != egv1a1.RedisBackendType || rl.Backend.Redis == nil || rl.Backend.Redis.URL == nil {
		bad("envoy-gateway.yaml: want rateLimit.backend.type Redis with its url")
	} else {
		url = *rl.Backend.Redis.URL
		if _, _, err := net.SplitHostPort(url); err != nil {
			bad("envoy-gateway.yaml: rateLimit.backend.redis.url %q: want host:port (REDIS_URL)", url)
		}
		if rl.Backend.Redis.TLS == nil || rl.Backend.Redis.TLS.CertificateRef == nil {
			bad("envoy-gateway.yaml: rateLimit.backend.redis.tls.certificateRef: the recipe shows TLS to Redis")
		}
	}
	if container != nil && url != "" {
		golden := filepath.Join(peertest.Module(t, peertest.Gateway), "internal", "infrastructure", "kubernetes", "ratelimit", "testdata", "deployments", "redis-tls-settings.yaml")
		env := peertest.GatewayEnv(t, golden)
		env["REDIS_URL"] = url
		delete(env, "REDIS_AUTH")
		for _, e := range container.Env {
			if !slices.Contains(peerenv.FloodgateVariables, e.Name) && !slices.Contains(peerenv.Variables, e.Name) {
				bad("rateLimitDeployment.container.env %s is neither one of Floodgate's variables (%v) nor envoyproxy/ratelimit's", e.Name, peerenv.FloodgateVariables)
			}
			env[e.Name] = e.Value
			if e.ValueFrom != nil {
				env[e.Name] = "0123456789abcdef0123456789abcdef"
			}
		}
		var list []string
		for k, v := range env {
			list = append(list, k+"="+v)
		}
		if _, err := peerenv.Build(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, list); err != nil {
			bad("Floodgate does not run with the environment Envoy Gateway would give it: %v", err)
		}
	}

	btps := all[*egv1a1.BackendTrafficPolicy](b)
	if len(btps) != 1 {
		return append(p, fmt.Sprintf("%s: want one BackendTrafficPolicy, have %d", gatewayRLDir, len(btps)))
	}
	btp := btps[0]
	at := "BackendTrafficPolicy " + btp.Name
	for _, ref := range btp.Spec.TargetRefs {
		r := named[*gwapiv1.HTTPRoute](base, string(ref.Name))
		if ref.Kind != "HTTPRoute" || r == nil || r.Namespace != btp.Namespace {
			bad("%s targets %s %s in %s: not an HTTPRoute of manifests/gateway in its namespace", at, ref.Kind, ref.Name, btp.Namespace)
		}
	}
	if len(btp.Spec.TargetRefs) == 0 {
		bad("%s targets nothing", at)
	}
	var costs bool
	if rl := btp.Spec.RateLimit; rl == nil || rl.Global == nil || len(rl.Global.Rules) == 0 {
		bad("%s: want rateLimit.global rules (Envoy Gateway's rate limit service answers global limits)", at)
	} else {
		for i, r := range rl.Global.Rules {
			perClient := false
			for _, cs := range r.ClientSelectors {
				for _, h := range cs.Headers {
					perClient = perClient || (h.Type != nil && *h.Type == egv1a1.HeaderMatchDistinct)
				}
			}
			if !perClient {
				bad("%s: rule %d is not per-client (a header selector of type Distinct: one bucket per caller)", at, i+1)
			}
			costs = costs || (r.Cost != nil && r.Cost.Request != nil && r.Cost.Response != nil)
		}
	}
	if !costs {
		bad("%s: no rule with both cost.request and cost.response", at)
	}
	k := string(files[gatewayRLDir+"/kustomization.yaml"])
	for name := range files {
		if base := filepath.Base(name); base != "kustomization.yaml" && !regexp.MustCompile(`(?m)^\s*-\s*`+regexp.QuoteMeta(base)+`\s*$`).MatchString(k) {
			bad("%s/kustomization.yaml does not list %s", gatewayRLDir, base)
		}
	}
	return p
}

func makeImage(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile(makefile)
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(IMAGE_REPO|IMAGE_TAG)\s*\?=\s*(\S+)`).FindAllStringSubmatch(string(mk), -1) {
		v[m[1]] = m[2]
	}
	return v["IMAGE_REPO"] + ":" + v["IMAGE_TAG"]
}

// TestGatewayRateLimitSwapsTheImage decodes manifests/gateway-ratelimit
// strictly with Envoy Gateway's own types and holds it to Envoy Gateway
// and Floodgate (gatewayRLProblems).
func TestGatewayRateLimitSwapsTheImage(t *testing.T) {
	base, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	files := readGatewayRL(t)
	b, eg, err := loadGatewayRL(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range gatewayRLProblems(t, b, eg, base, files, makeImage(t)) {
		t.Error(problem)
	}
}

// TestGatewayRateLimitBrokenCopiesAreCaught proves the checks can fail.
func TestGatewayRateLimitBrokenCopiesAreCaught(t *testing.T) {
	base, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	files := readGatewayRL(t)
	btp := gatewayRLDir + "/backend-traffic-policy.yaml"
	for _, tc := range []mutation{
		{"unknown EnvoyGateway field", egConfigFile, "rateLimitDeployment:", "rateLimitDeploy:", "rateLimitDeploy"},
		{"another image", egConfigFile, "image: ghcr.io/floodgate/floodgate:0.1.0", "image: envoyproxy/ratelimit:master", "want the image make image tags"},
		{"not Envoy Gateway's ConfigMap", egConfigFile, "namespace: envoy-gateway-system", "namespace: floodgate", "envoy-gateway-system"},
		{"no Redis", egConfigFile, "type: Redis", "type: Memcache", "Redis"},
		{"a variable Floodgate lacks", egConfigFile, "name: FLOODGATE_ON_FAILURE", "name: FLOODGATE_FAILURE_MODE", "neither one of Floodgate's variables"},
		{"a failure mode Floodgate refuses", egConfigFile, "value: allow", "value: open", "does not run with the environment"},
		{"unknown policy field", btp, "clientSelectors:", "clientSelector:", "clientSelector"},
		{"no per-client rule", btp, "type: Distinct\n          limit:\n            requests: 100", "type: Exact\n                  value: k\n          limit:\n            requests: 100", "rule 1 is not per-client"},
		{"no response cost", btp, "            response:\n              from: Number\n              number: 10\n", "", "no rule with both cost.request and cost.response"},
		{"another route", btp, "kind: HTTPRoute\n      name: httpbin", "kind: HTTPRoute\n      name: api", "not an HTTPRoute of manifests/gateway"},
		{"unlisted file", gatewayRLDir + "/kustomization.yaml", "  - backend-traffic-policy.yaml\n", "", "does not list backend-traffic-policy.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, ok := files[tc.file]
			if !ok || !strings.Contains(string(src), tc.old) {
				t.Fatalf("%s no longer contains %q: update this test", tc.file, tc.old)
			}
			broken := map[string][]byte{}
			for k, v := range files {
				broken[k] = v
			}
			broken[tc.file] = []byte(strings.Replace(string(src), tc.old, tc.new, 1))
			b, eg, err := loadGatewayRL(broken)
			got := []string{fmt.Sprint(err)}
			if err == nil {
				got = gatewayRLProblems(t, b, eg, base, broken, makeImage(t))
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("not caught: %v (want %q)", got, tc.want)
			}
		})
	}
}
