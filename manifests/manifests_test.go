// Package manifests holds the Kubernetes and Istio manifests users apply. Its tests decode every
// object strictly into the real API types (k8s.io/api, istio.io/api) and check that the objects fit
// each other: selectors, ports, probes, the mounted configuration, the Istio provider.
package manifests

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	securityv1beta1 "istio.io/api/security/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/cmd/floodgate/config"
)

const (
	// configPath is where the image reads its configuration (cmd/floodgate/Dockerfile ENTRYPOINT).
	configPath = "/etc/floodgate/floodgate.yaml"
	dockerfile = "../cmd/floodgate/Dockerfile"
	// drainBound is how long Floodgate waits for in-flight Checks on SIGTERM (drainTimeout in
	// cmd/floodgate/serve.go).
	drainBound     = 10 * time.Second
	meshConfigFile = "istio/mesh-config.yaml"
	healthService  = "envoy.service.auth.v3.Authorization"
)

// dirs are the kustomizations; each lists every manifest file beside it.
var dirs = []string{".", "istio"}

// notResources are YAML files in those directories that are not Kubernetes objects.
var notResources = map[string]bool{meshConfigFile: true}

// policyFiles are Floodgate policy lists, not Kubernetes objects (istio_test.go checks them).
var policyFiles = map[string]bool{istioPoliciesFile: true}

// kustomization is the part of kustomize's Kustomization these files use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
}

// istioObject is a security.istio.io object: Kubernetes metadata, spec decoded with protojson.
type istioObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            json.RawMessage   `json:"spec"`
}

// bundle is every object of the manifests, decoded.
type bundle struct {
	kustomizations map[string]*kustomization // by directory
	namespaces     []*corev1.Namespace
	configMaps     []*corev1.ConfigMap
	deployments    []*appsv1.Deployment
	services       []*corev1.Service
	pdbs           []*policyv1.PodDisruptionBudget
	authzPolicies  map[string]*securityv1beta1.AuthorizationPolicy // by name
	authzMeta      map[string]metav1.ObjectMeta
	mesh           *meshv1alpha1.MeshConfig
	files          map[string][]string // file → "Kind/name" of its objects
}

// strictJSON decodes as the Kubernetes API server does: field names are case-sensitive, and an
// unknown or duplicate field is an error (sigs.k8s.io/json, which the API server uses).
func strictJSON(data []byte, into any) error {
	strict, err := kjson.UnmarshalStrict(data, into)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs splits a multi-document YAML file, dropping documents that hold only comments.
func splitDocs(data []byte) [][]byte {
	var out [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		hasContent := false
		for _, line := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				hasContent = true
			}
		}
		if hasContent {
			out = append(out, []byte(d))
		}
	}
	return out
}

// readFiles reads every YAML file of the kustomization directories.
func readFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, dir := range dirs {
		matches, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			data, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			files[filepath.ToSlash(m)] = data
		}
	}
	return files
}

// load decodes every file strictly, by apiVersion and kind.
func load(files map[string][]byte) (*bundle, error) {
	b := &bundle{kustomizations: map[string]*kustomization{}, files: map[string][]string{},
		authzPolicies: map[string]*securityv1beta1.AuthorizationPolicy{}, authzMeta: map[string]metav1.ObjectMeta{}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if policyFiles[name] {
			continue
		}
		if notResources[name] {
			if err := b.loadMesh(name, files[name]); err != nil {
				return nil, err
			}
			continue
		}
		for i, doc := range splitDocs(files[name]) {
			at := fmt.Sprintf("%s (document %d)", name, i+1)
			js, err := yaml.YAMLToJSONStrict(doc)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", at, err)
			}
			var tm metav1.TypeMeta
			if err := json.Unmarshal(js, &tm); err != nil {
				return nil, fmt.Errorf("%s: %w", at, err)
			}
			var obj any
			var meta func() metav1.ObjectMeta
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				o := &corev1.Namespace{}
				obj, meta = o, func() metav1.ObjectMeta { b.namespaces = append(b.namespaces, o); return o.ObjectMeta }
			case "v1 ConfigMap":
				o := &corev1.ConfigMap{}
				obj, meta = o, func() metav1.ObjectMeta { b.configMaps = append(b.configMaps, o); return o.ObjectMeta }
			case "v1 Service":
				o := &corev1.Service{}
				obj, meta = o, func() metav1.ObjectMeta { b.services = append(b.services, o); return o.ObjectMeta }
			case "apps/v1 Deployment":
				o := &appsv1.Deployment{}
				obj, meta = o, func() metav1.ObjectMeta { b.deployments = append(b.deployments, o); return o.ObjectMeta }
			case "policy/v1 PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				obj, meta = o, func() metav1.ObjectMeta { b.pdbs = append(b.pdbs, o); return o.ObjectMeta }
			case "security.istio.io/v1 AuthorizationPolicy":
				o := &istioObject{}
				obj, meta = o, func() metav1.ObjectMeta { return o.Metadata }
			case "kustomize.config.k8s.io/v1beta1 Kustomization":
				if path.Base(name) != "kustomization.yaml" {
					return nil, fmt.Errorf("%s: a Kustomization must be named kustomization.yaml", at)
				}
				o := &kustomization{}
				if err := strictJSON(js, o); err != nil {
					return nil, fmt.Errorf("%s: %w", at, err)
				}
				b.kustomizations[path.Dir(name)] = o
				continue
			default:
				return nil, fmt.Errorf("%s: unexpected apiVersion/kind %q %q", at, tm.APIVersion, tm.Kind)
			}
			if err := strictJSON(js, obj); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", at, tm.Kind, err)
			}
			if io, ok := obj.(*istioObject); ok {
				spec := &securityv1beta1.AuthorizationPolicy{}
				if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(io.Spec, spec); err != nil {
					return nil, fmt.Errorf("%s: AuthorizationPolicy spec: %w", at, err)
				}
				b.authzPolicies[io.Metadata.Name] = spec
				b.authzMeta[io.Metadata.Name] = io.Metadata
			}
			m := meta()
			if m.Name == "" {
				return nil, fmt.Errorf("%s: %s without metadata.name", at, tm.Kind)
			}
			b.files[name] = append(b.files[name], tm.Kind+"/"+m.Name)
		}
	}
	return b, nil
}

// loadMesh decodes the meshConfig of Helm values strictly into Istio's MeshConfig.
func (b *bundle) loadMesh(name string, data []byte) error {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var values struct {
		MeshConfig json.RawMessage `json:"meshConfig"`
	}
	if err := strictJSON(js, &values); err != nil {
		return fmt.Errorf("%s: want only a meshConfig key: %w", name, err)
	}
	b.mesh = &meshv1alpha1.MeshConfig{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(values.MeshConfig, b.mesh); err != nil {
		return fmt.Errorf("%s: meshConfig: %w", name, err)
	}
	return nil
}

// selects reports whether a selector (equality map) matches labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// containerPort resolves a port (by name or number) on a container.
func containerPort(c *corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func portOf(hostport string) int32 {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return int32(n)
}

// problems lists everything wrong with a decoded bundle; empty means it fits together.
func problems(b *bundle) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	// Kustomizations list exactly the manifest files beside them.
	for _, dir := range dirs {
		k := b.kustomizations[dir]
		if k == nil {
			bad("%s: no kustomization.yaml", dir)
			continue
		}
		listed := map[string]bool{}
		for _, r := range k.Resources {
			f := path.Join(dir, r)
			listed[f] = true
			if _, ok := b.files[f]; !ok {
				bad("%s/kustomization.yaml lists %s, which holds no object", dir, r)
			}
		}
		for f := range b.files {
			if path.Dir(f) == dir && !listed[f] {
				bad("%s/kustomization.yaml does not list %s", dir, path.Base(f))
			}
		}
	}
	ns := b.kustomizations["."].Namespace
	if ns == "" {
		bad("kustomization.yaml sets no namespace")
	}
	if len(b.namespaces) != 1 || b.namespaces[0].Name != ns {
		bad("want one Namespace object named %q", ns)
	}
	var metas []metav1.ObjectMeta
	for _, o := range b.configMaps {
		metas = append(metas, o.ObjectMeta)
	}
	for _, o := range b.deployments {
		metas = append(metas, o.ObjectMeta)
	}
	for _, o := range b.services {
		metas = append(metas, o.ObjectMeta)
	}
	for _, o := range b.pdbs {
		metas = append(metas, o.ObjectMeta)
	}
	for _, m := range metas {
		if m.Namespace != ns {
			bad("%s is in namespace %q, want %q (the kustomization's namespace)", m.Name, m.Namespace, ns)
		}
	}

	byName := func(kind string) func(string) int {
		switch kind {
		case "Deployment":
			return func(n string) int {
				return slices.IndexFunc(b.deployments, func(d *appsv1.Deployment) bool { return d.Name == n })
			}
		case "Service":
			return func(n string) int {
				return slices.IndexFunc(b.services, func(s *corev1.Service) bool { return s.Name == n })
			}
		case "ConfigMap":
			return func(n string) int {
				return slices.IndexFunc(b.configMaps, func(c *corev1.ConfigMap) bool { return c.Name == n })
			}
		}
		return nil
	}

	// Every Deployment: hardened, probed on ports that exist, resources set.
	for _, d := range b.deployments {
		pod := &d.Spec.Template
		if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, pod.Labels) || len(d.Spec.Selector.MatchExpressions) > 0 {
			bad("Deployment %s: selector does not match its pod labels", d.Name)
		}
		psc := pod.Spec.SecurityContext
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			bad("Deployment %s: pod seccompProfile must be RuntimeDefault", d.Name)
		}
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			at := fmt.Sprintf("Deployment %s container %s", d.Name, c.Name)
			sc := c.SecurityContext
			nonRoot := (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot) || (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
			switch {
			case !nonRoot:
				bad("%s: runAsNonRoot must be true", at)
			case sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				bad("%s: allowPrivilegeEscalation must be false", at)
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				bad("%s: readOnlyRootFilesystem must be true", at)
			case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
				bad("%s: capabilities must drop ALL and add none", at)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				bad("%s: set cpu and memory requests and a memory limit", at)
			}
			if c.Image == "" || strings.HasSuffix(c.Image, ":latest") || !strings.Contains(path.Base(c.Image), ":") {
				bad("%s: image %q must name an exact tag", at, c.Image)
			}
			for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if pr == nil {
					bad("%s: no %s probe", at, name)
					continue
				}
				var port intstr.IntOrString
				switch {
				case pr.GRPC != nil:
					port = intstr.FromInt32(pr.GRPC.Port)
				case pr.HTTPGet != nil:
					port = pr.HTTPGet.Port
				case pr.TCPSocket != nil:
					port = pr.TCPSocket.Port
				case pr.Exec != nil:
					continue
				}
				if _, ok := containerPort(c, port); !ok {
					bad("%s: %s probe port %s is not a container port", at, name, port.String())
				}
			}
		}
	}

	// Floodgate's Deployment: replicas, gRPC probes on the health service, the config directory.
	i := byName("Deployment")("floodgate")
	if i < 0 {
		bad("no Deployment floodgate")
		return p
	}
	fd := b.deployments[i]
	if fd.Spec.Replicas == nil || *fd.Spec.Replicas < 2 {
		bad("Deployment floodgate: want 2 or more replicas")
	}
	fc := &fd.Spec.Template.Spec.Containers[0]
	grpcPort, ok := containerPort(fc, intstr.FromString("grpc"))
	if !ok {
		bad("floodgate container has no port named grpc")
	}
	adminPort, ok := containerPort(fc, intstr.FromString("admin"))
	if !ok {
		bad("floodgate container has no port named admin")
	}
	for name, pr := range map[string]*corev1.Probe{"readiness": fc.ReadinessProbe, "liveness": fc.LivenessProbe} {
		if pr == nil || pr.GRPC == nil || pr.GRPC.Port != grpcPort.ContainerPort {
			bad("floodgate %s probe must be a native gRPC probe on the grpc port %d", name, grpcPort.ContainerPort)
		}
	}
	if pr := fc.ReadinessProbe; pr != nil && pr.GRPC != nil && (pr.GRPC.Service == nil || *pr.GRPC.Service != healthService) {
		bad("floodgate readiness probe should ask for service %s (NOT_SERVING while draining)", healthService)
	}
	preStop := int64(0)
	if lc := fc.Lifecycle; lc != nil && lc.PreStop != nil && lc.PreStop.Sleep != nil {
		preStop = lc.PreStop.Sleep.Seconds
	}
	if g := fd.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= time.Duration(preStop)*time.Second+drainBound {
		bad("floodgate terminationGracePeriodSeconds must exceed preStop (%ds) + the drain bound (%v)", preStop, drainBound)
	}
	var cmName, cmKey string
	for _, vm := range fc.VolumeMounts {
		if vm.MountPath != path.Dir(configPath) {
			continue
		}
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			bad("floodgate mounts its config with subPath: the kubelet never updates such a mount")
		}
		for _, v := range fd.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cmName = v.ConfigMap.Name
				if len(v.ConfigMap.Items) > 0 {
					bad("floodgate config volume selects items: mount the whole ConfigMap")
				}
			}
		}
	}
	if cmName == "" {
		bad("floodgate does not mount a ConfigMap at %s", path.Dir(configPath))
		return p
	}
	cmKey = path.Base(configPath)
	j := byName("ConfigMap")(cmName)
	if j < 0 {
		bad("floodgate mounts ConfigMap %s, which is not defined", cmName)
		return p
	}
	data, ok := b.configMaps[j].Data[cmKey]
	if !ok {
		bad("ConfigMap %s has no key %s (the image reads %s)", cmName, cmKey, configPath)
		return p
	}
	cfg, err := config.Parse("configmap.yaml:"+cmKey, []byte(data))
	if err != nil {
		bad("ConfigMap %s: %v", cmName, err)
		return p
	}
	// After SIGTERM Floodgate serves for listen.drain_delay, then drains: the kubelet must not kill it sooner.
	if g := fd.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second <= time.Duration(preStop)*time.Second+cfg.Listen.DrainDelay.Duration+drainBound {
		bad("floodgate terminationGracePeriodSeconds (%ds) must exceed preStop (%ds) + listen.drain_delay (%v) + the drain bound (%v)", *g, preStop, cfg.Listen.DrainDelay.Duration, drainBound)
	}
	if portOf(cfg.Listen.GRPC) != grpcPort.ContainerPort || portOf(cfg.Listen.Admin) != adminPort.ContainerPort {
		bad("floodgate.yaml listens on %s / %s, but the container ports are grpc %d / admin %d", cfg.Listen.GRPC, cfg.Listen.Admin, grpcPort.ContainerPort, adminPort.ContainerPort)
	}
	if h, _, _ := net.SplitHostPort(cfg.Listen.GRPC); h != "0.0.0.0" && h != "::" && h != "" {
		bad("floodgate.yaml listen.grpc %s: listen on all interfaces in a pod", cfg.Listen.GRPC)
	}

	// Services: selectors pick a Deployment's pods; target ports exist on its container.
	for _, s := range b.services {
		var target *appsv1.Deployment
		for _, d := range b.deployments {
			if selects(s.Spec.Selector, d.Spec.Template.Labels) {
				if target != nil {
					bad("Service %s selects the pods of several Deployments", s.Name)
				}
				target = d
			}
		}
		if target == nil {
			bad("Service %s selects no Deployment's pods", s.Name)
			continue
		}
		for _, sp := range s.Spec.Ports {
			tp := sp.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(sp.Port)
			}
			if _, ok := containerPort(&target.Spec.Template.Spec.Containers[0], tp); !ok {
				bad("Service %s port %s: targetPort %s is not a port of Deployment %s", s.Name, sp.Name, tp.String(), target.Name)
			}
		}
	}
	k := byName("Service")("floodgate")
	if k < 0 {
		bad("no Service floodgate")
		return p
	}
	fs := b.services[k]
	var grpcSvc *corev1.ServicePort
	for i := range fs.Spec.Ports {
		sp := &fs.Spec.Ports[i]
		if sp.Name == "grpc" {
			grpcSvc = sp
		}
	}
	if grpcSvc == nil || grpcSvc.AppProtocol == nil || *grpcSvc.AppProtocol != "grpc" {
		bad("Service floodgate needs a port named grpc with appProtocol grpc (Istio protocol selection)")
		return p
	}
	if cp, ok := containerPort(fc, grpcSvc.TargetPort); !ok || cp.ContainerPort != grpcPort.ContainerPort {
		bad("Service floodgate port grpc does not reach the container's grpc port")
	}
	if !slices.ContainsFunc(fs.Spec.Ports, func(sp corev1.ServicePort) bool {
		cp, ok := containerPort(fc, sp.TargetPort)
		return ok && cp.ContainerPort == adminPort.ContainerPort
	}) {
		bad("Service floodgate exposes no admin (metrics) port")
	}

	// Redis: each address resolves to a Service of this namespace.
	for _, a := range cfg.Store.Redis.Addresses {
		host, port, _ := net.SplitHostPort(a)
		name := strings.TrimSuffix(strings.TrimSuffix(host, ".svc.cluster.local"), "."+ns)
		n := byName("Service")(name)
		if n < 0 {
			bad("store.redis.addresses %s: no Service %s in the manifests", a, name)
			continue
		}
		if !slices.ContainsFunc(b.services[n].Spec.Ports, func(sp corev1.ServicePort) bool { return strconv.Itoa(int(sp.Port)) == port }) {
			bad("store.redis.addresses %s: Service %s has no port %s", a, name, port)
		}
		if !strings.Contains(name, "demo") || b.services[n].Labels["app.kubernetes.io/component"] != "demo-only" {
			bad("the bundled Redis must be marked demo-only in its name and labels")
		}
	}

	// The PDB covers Floodgate's pods and leaves room to evict one.
	for _, pdb := range b.pdbs {
		if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, fd.Spec.Template.Labels) {
			bad("PodDisruptionBudget %s does not select Floodgate's pods", pdb.Name)
		}
		if ma := pdb.Spec.MinAvailable; ma == nil || ma.Type != intstr.Int || fd.Spec.Replicas == nil || ma.IntVal >= *fd.Spec.Replicas || ma.IntVal < 1 {
			bad("PodDisruptionBudget %s: minAvailable must be a number between 1 and replicas-1", pdb.Name)
		}
	}
	if len(b.pdbs) == 0 {
		bad("no PodDisruptionBudget")
	}

	// Istio: the policy's provider is declared, and resolves to our Service and port.
	if b.mesh == nil {
		bad("no %s", meshConfigFile)
		return p
	}
	providers := map[string]*meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider{}
	for _, ep := range b.mesh.GetExtensionProviders() {
		if g := ep.GetEnvoyExtAuthzGrpc(); g != nil {
			providers[ep.GetName()] = g
		}
	}
	if len(b.authzPolicies) == 0 {
		bad("no AuthorizationPolicy")
	}
	for name, ap := range b.authzPolicies {
		if ap.GetAction() != securityv1beta1.AuthorizationPolicy_CUSTOM {
			bad("AuthorizationPolicy %s: action %v, want CUSTOM", name, ap.GetAction())
		}
		if len(ap.GetSelector().GetMatchLabels()) == 0 && len(ap.GetTargetRefs()) == 0 {
			bad("AuthorizationPolicy %s selects no workload (it would apply to the whole namespace)", name)
		}
		if len(ap.GetRules()) == 0 {
			bad("AuthorizationPolicy %s has no rules: a CUSTOM policy without rules never calls the provider", name)
		}
		if b.authzMeta[name].Namespace == "" {
			bad("AuthorizationPolicy %s: set the workload's namespace", name)
		}
		prov, ok := providers[ap.GetProvider().GetName()]
		if !ok {
			bad("AuthorizationPolicy %s names provider %q, which meshConfig.extensionProviders does not declare (as envoyExtAuthzGrpc)", name, ap.GetProvider().GetName())
			continue
		}
		if want := fs.Name + "." + fs.Namespace + ".svc.cluster.local"; prov.GetService() != want {
			bad("provider %s service %q, want our Service %s", ap.GetProvider().GetName(), prov.GetService(), want)
		}
		if prov.GetPort() != uint32(grpcSvc.Port) {
			bad("provider %s port %d, want the Service's grpc port %d", ap.GetProvider().GetName(), prov.GetPort(), grpcSvc.Port)
		}
		if to := prov.GetTimeout().AsDuration(); prov.GetTimeout() == nil || to <= cfg.Store.Redis.Timeout.Duration || to > time.Second {
			bad("provider %s timeout %v: set it above Floodgate's store.redis.timeout (%v) and at most 1s", ap.GetProvider().GetName(), to, cfg.Store.Redis.Timeout.Duration)
		}
		if !prov.GetFailOpen() {
			bad("provider %s: failOpen should be true (a rate limiter outage must not fail the API)", ap.GetProvider().GetName())
		}
	}
	return p
}

func TestManifests(t *testing.T) {
	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.deployments) != 2 || len(b.services) != 2 || len(b.configMaps) != 1 || len(b.pdbs) != 1 || len(b.authzPolicies) != 1 {
		t.Fatalf("decoded %d Deployments, %d Services, %d ConfigMaps, %d PDBs, %d AuthorizationPolicies; want 2, 2, 1, 1, 1",
			len(b.deployments), len(b.services), len(b.configMaps), len(b.pdbs), len(b.authzPolicies))
	}
	for _, problem := range problems(b) {
		t.Error(problem)
	}
}

// TestConfigPathMatchesImage: the path the manifests mount is the one the image reads.
func TestConfigPathMatchesImage(t *testing.T) {
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"--config", "`+configPath+`"`) {
		t.Fatalf("%s does not start floodgate with --config %s", dockerfile, configPath)
	}
}

// TestBrokenCopiesAreRejected proves the checks can fail: each broken copy must be caught.
func TestBrokenCopiesAreRejected(t *testing.T) {
	files := readFiles(t)
	cases := []struct{ name, file, old, new, want string }{
		// Strict decoding into the API types.
		{"unknown Deployment field", "deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "readOnlyRootFileSystem"},
		{"unknown Service field", "service.yaml", "appProtocol: grpc", "appProtocols: grpc", "appProtocols"},
		{"unknown PDB field", "pdb.yaml", "minAvailable: 1", "minAvailble: 1", "minAvailble"},
		{"unknown meshConfig field", meshConfigFile, "failOpen: true", "failOpened: true", "failOpened"},
		{"unknown AuthorizationPolicy field", "istio/authorization-policy.yaml", "notPaths:", "notPath:", "notPath"},
		{"wrong apiVersion", "pdb.yaml", "policy/v1", "policy/v1beta1", "unexpected apiVersion"},
		{"invalid floodgate.yaml", "configmap.yaml", "capacity: 100", "capacity: lots", "capacity"},
		// Consistency between the objects.
		{"probe on a missing port", "deployment.yaml", "port: 9191\n              service:", "port: 9999\n              service:", "readiness probe"},
		{"service target port", "service.yaml", "targetPort: grpc", "targetPort: grcp", "targetPort grcp"},
		{"service selector", "service.yaml", "app.kubernetes.io/component: ratelimiter", "app.kubernetes.io/component: limiter", "selects no Deployment"},
		{"config subPath", "deployment.yaml", "mountPath: /etc/floodgate\n", "mountPath: /etc/floodgate\n              subPath: floodgate.yaml\n", "subPath"},
		{"listen port", "configmap.yaml", "grpc: 0.0.0.0:9191", "grpc: 0.0.0.0:9393", "listens on"},
		{"redis service name", "configmap.yaml", "floodgate-redis-demo:6379", "redis:6379", "no Service redis"},
		{"privilege escalation", "deployment.yaml", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "allowPrivilegeEscalation"},
		{"one replica", "deployment.yaml", "replicas: 2", "replicas: 1", "2 or more replicas"},
		{"drain delay beyond the grace period", "configmap.yaml", "admin: 0.0.0.0:9192", "admin: 0.0.0.0:9192\n      drain_delay: 20s", "listen.drain_delay"},
		{"provider name", "istio/authorization-policy.yaml", "provider:\n    name: floodgate", "provider:\n    name: floodgat", "does not declare"},
		{"provider port", meshConfigFile, "port: 9191", "port: 9192", "provider floodgate port"},
		{"provider service", meshConfigFile, "floodgate.floodgate.svc", "floodgate.default.svc", "want our Service"},
		{"unlisted file", "kustomization.yaml", "  - pdb.yaml\n", "", "does not list pdb.yaml"},
		{"not CUSTOM", "istio/authorization-policy.yaml", "action: CUSTOM", "action: DENY", "want CUSTOM"},
	}
	for _, tc := range cases {
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
			b, err := load(broken)
			var got []string
			if err != nil {
				got = []string{err.Error()}
			} else {
				got = problems(b)
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("not caught: %v (want %q)", got, tc.want)
			}
		})
	}
}
