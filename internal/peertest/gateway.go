package peertest

import (
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// GatewayDeployments are the rate limit Deployments of Envoy Gateway's own
// goldens (internal/infrastructure/kubernetes/ratelimit/testdata/deployments
// of its module): what its infrastructure provider gives the peer's image.
func GatewayDeployments(t testing.TB) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(Module(t, Gateway), "internal", "infrastructure", "kubernetes", "ratelimit", "testdata", "deployments", "*.yaml"))
	if len(files) < 10 {
		t.Fatalf("%d golden Deployments in Envoy Gateway's module", len(files))
	}
	return files
}

// GatewayEnv is the environment of the envoy-ratelimit container of a
// Deployment file (one of GatewayDeployments), which must run
// /bin/ratelimit. A value taken from a Secret stands in as
// redis.from-secret:6379 (the one Envoy Gateway takes so is REDIS_URL), one
// from the pod as envoy-ratelimit-pod.
func GatewayEnv(t testing.TB, file string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &dep); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	env := map[string]string{}
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name != "envoy-ratelimit" {
			continue
		}
		if len(c.Command) != 1 || c.Command[0] != "/bin/ratelimit" {
			t.Fatalf("%s: command %v, want /bin/ratelimit", file, c.Command)
		}
		for _, v := range c.Env {
			switch {
			case v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil:
				env[v.Name] = "redis.from-secret:6379"
			case v.ValueFrom != nil:
				env[v.Name] = "envoy-ratelimit-pod"
			default:
				env[v.Name] = v.Value
			}
		}
	}
	if len(env) == 0 {
		t.Fatalf("%s: no envoy-ratelimit container", file)
	}
	return env
}
