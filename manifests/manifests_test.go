// Package manifests holds the Kubernetes, Istio, Envoy Gateway, Contour and Emissary manifests users
// apply. Its tests decode every object strictly into the real API types (k8s.io/api, istio.io/api,
// sigs.k8s.io/gateway-api, github.com/envoyproxy/gateway/api, github.com/projectcontour/contour,
// github.com/emissary-ingress/emissary/v3), build every kustomization with kustomize, and check the
// few things those types cannot: that the objects fit each other and Floodgate's own configuration,
// and that a request follows each recipe to a limit (path_test.go).
package manifests

import (
	"encoding/json"
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

	emissaryv3 "github.com/emissary-ingress/emissary/v3/pkg/api/getambassador.io/v3alpha1"
	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	contourv1a1 "github.com/projectcontour/contour/apis/projectcontour/v1alpha1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1b1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/floodgatetest"
)

const (
	// configPath is where the image reads its configuration (cmd/floodgate-image, the Dockerfile).
	configPath = "/etc/floodgate/floodgate.yaml"
	dockerfile = "../cmd/floodgate/Dockerfile"
	makefile   = "../Makefile"
	// drainBound is how long Floodgate waits for in-flight Checks on SIGTERM (drainTimeout in
	// cmd/floodgate/serve.go).
	drainBound     = 10 * time.Second
	meshConfigFile = "istio/mesh-config.yaml"
	healthService  = "envoy.service.auth.v3.Authorization"
)

// dirs are the kustomizations; each lists every manifest file beside it.
var dirs = []string{".", "istio", "istio/ratelimit", "gateway", "gateway-mtls", "contour", "emissary"}

// kinds maps apiVersion and kind to the API type each document decodes into.
var kinds = map[string]func() metav1.Object{
	"v1 Namespace":                                        func() metav1.Object { return &corev1.Namespace{} },
	"v1 ConfigMap":                                        func() metav1.Object { return &corev1.ConfigMap{} },
	"v1 Service":                                          func() metav1.Object { return &corev1.Service{} },
	"apps/v1 Deployment":                                  func() metav1.Object { return &appsv1.Deployment{} },
	"policy/v1 PodDisruptionBudget":                       func() metav1.Object { return &policyv1.PodDisruptionBudget{} },
	"security.istio.io/v1 AuthorizationPolicy":            func() metav1.Object { return &istioObject{} },
	"security.istio.io/v1 PeerAuthentication":             func() metav1.Object { return &istioObject{} },
	"networking.k8s.io/v1 NetworkPolicy":                  func() metav1.Object { return &networkingv1.NetworkPolicy{} },
	"kustomize.config.k8s.io/v1beta1 Kustomization":       func() metav1.Object { return &kustomization{} },
	"gateway.networking.k8s.io/v1 Gateway":                func() metav1.Object { return &gwapiv1.Gateway{} },
	"gateway.networking.k8s.io/v1 HTTPRoute":              func() metav1.Object { return &gwapiv1.HTTPRoute{} },
	"gateway.networking.k8s.io/v1beta1 ReferenceGrant":    func() metav1.Object { return &gwapiv1b1.ReferenceGrant{} },
	"gateway.envoyproxy.io/v1alpha1 SecurityPolicy":       func() metav1.Object { return &egv1a1.SecurityPolicy{} },
	"gateway.envoyproxy.io/v1alpha1 EnvoyProxy":           func() metav1.Object { return &egv1a1.EnvoyProxy{} },
	"gateway.envoyproxy.io/v1alpha1 BackendTrafficPolicy": func() metav1.Object { return &egv1a1.BackendTrafficPolicy{} },
	"gateway.networking.k8s.io/v1 BackendTLSPolicy":       func() metav1.Object { return &gwapiv1.BackendTLSPolicy{} },
	"gateway.envoyproxy.io/v1alpha1 ClientTrafficPolicy": func() metav1.Object {
		return &egv1a1.ClientTrafficPolicy{}
	},
	"networking.istio.io/v1alpha3 EnvoyFilter":    func() metav1.Object { return &istioObject{} },
	"projectcontour.io/v1 HTTPProxy":              func() metav1.Object { return &contourv1.HTTPProxy{} },
	"projectcontour.io/v1alpha1 ExtensionService": func() metav1.Object { return &contourv1a1.ExtensionService{} },
	"getambassador.io/v3alpha1 Mapping":           func() metav1.Object { return &emissaryv3.Mapping{} },
	"getambassador.io/v3alpha1 RateLimitService":  func() metav1.Object { return &emissaryv3.RateLimitService{} },
}

// policyFiles are not Kubernetes objects: Floodgate policy lists (istio_test.go checks them) and
// Contour's own configuration (path_test.go parses it with Contour's parser).
var policyFiles = map[string]bool{istioPoliciesFile: true, contourConfigFile: true}

// kustomization is the part of kustomize's Kustomization these files use.
type kustomization struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Namespace         string   `json:"namespace"`
	Resources         []string `json:"resources"`
	// Patches are applied by kustomize itself (render_test.go renders them).
	Patches []struct {
		Patch string `json:"patch"`
	} `json:"patches"`
}

// istioObject is an Istio object: Kubernetes metadata, the spec decoded with protojson into policy
// (an AuthorizationPolicy), peer (a PeerAuthentication) or filter (an EnvoyFilter).
type istioObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              json.RawMessage `json:"spec"`
	policy            *securityv1beta1.AuthorizationPolicy
	peer              *securityv1beta1.PeerAuthentication
	filter            *networkingv1alpha3.EnvoyFilter
}

// bundle is every object of the manifests, decoded, by file.
type bundle struct {
	files map[string][]metav1.Object
	mesh  *meshv1alpha1.MeshConfig
}

// all returns the objects of type T, in file order.
func all[T metav1.Object](b *bundle) []T {
	var out []T
	names := make([]string, 0, len(b.files))
	for f := range b.files {
		names = append(names, f)
	}
	slices.Sort(names)
	for _, f := range names {
		for _, o := range b.files[f] {
			if t, ok := o.(T); ok {
				out = append(out, t)
			}
		}
	}
	return out
}

// named returns the object of type T called name (the zero T when there is none).
func named[T metav1.Object](b *bundle, name string) T {
	var zero T
	for _, o := range all[T](b) {
		if o.GetName() == name {
			return o
		}
	}
	return zero
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readFiles reads every YAML file of the kustomization directories.
func readFiles(t *testing.T) map[string][]byte { return readYAMLDirs(t, dirs...) }

// readYAMLDirs reads the YAML files of each of dirs, by slash path.
func readYAMLDirs(t *testing.T, dirs ...string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, dir := range dirs {
		matches, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, m := range matches {
			data, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			files[filepath.ToSlash(m)] = data
		}
	}
	if len(files) == 0 {
		t.Fatalf("no YAML files in %v", dirs)
	}
	return files
}

// load decodes every document of every file strictly, by apiVersion and kind.
func load(files map[string][]byte) (*bundle, error) {
	b := &bundle{files: map[string][]metav1.Object{}}
	for name, data := range files {
		if policyFiles[name] {
			continue
		}
		if name == meshConfigFile {
			if err := b.loadMesh(name, data); err != nil {
				return nil, err
			}
			continue
		}
		for i, doc := range docSeparator.Split(string(data), -1) {
			at := fmt.Sprintf("%s (document %d)", name, i+1)
			js, err := yaml.YAMLToJSONStrict([]byte(doc))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", at, err)
			}
			if string(js) == "null" { // only comments
				continue
			}
			obj, err := decodeObject(js, at)
			if err != nil {
				return nil, err
			}
			if _, ok := obj.(*kustomization); ok && path.Base(name) != "kustomization.yaml" {
				return nil, fmt.Errorf("%s: a Kustomization must be named kustomization.yaml", at)
			}
			b.files[name] = append(b.files[name], obj)
		}
	}
	return b, nil
}

// decodeObject decodes one object, given as JSON, strictly into the API type of its apiVersion
// and kind; an Istio spec with protojson into Istio's type.
func decodeObject(js []byte, at string) (metav1.Object, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fmt.Errorf("%s: %w", at, err)
	}
	newObj, ok := kinds[tm.APIVersion+" "+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("%s: unexpected apiVersion/kind %q %q", at, tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := floodgatetest.StrictJSON(js, obj); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", at, tm.Kind, err)
	}
	if o, ok := obj.(*istioObject); ok {
		var spec proto.Message
		switch tm.Kind {
		case "PeerAuthentication":
			o.peer = &securityv1beta1.PeerAuthentication{}
			spec = o.peer
		case "EnvoyFilter":
			o.filter = &networkingv1alpha3.EnvoyFilter{}
			spec = o.filter
		default:
			o.policy = &securityv1beta1.AuthorizationPolicy{}
			spec = o.policy
		}
		if err := protojson.Unmarshal(o.Spec, spec); err != nil {
			return nil, fmt.Errorf("%s: %s spec: %w", at, tm.Kind, err)
		}
	}
	if _, isK := obj.(*kustomization); !isK && obj.GetName() == "" {
		return nil, fmt.Errorf("%s: %s without metadata.name", at, tm.Kind)
	}
	return obj, nil
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
	if err := floodgatetest.StrictJSON(js, &values); err != nil {
		return fmt.Errorf("%s: want only a meshConfig key: %w", name, err)
	}
	b.mesh = &meshv1alpha1.MeshConfig{}
	if err := protojson.Unmarshal(values.MeshConfig, b.mesh); err != nil {
		return fmt.Errorf("%s: meshConfig: %w", name, err)
	}
	return nil
}

// selects reports whether a selector (equality map) matches labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// containerPort resolves a port (by name or number) on a container.
func containerPort(c *corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	i := slices.IndexFunc(c.Ports, func(cp corev1.ContainerPort) bool {
		return (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal)
	})
	if i < 0 {
		return corev1.ContainerPort{}, false
	}
	return c.Ports[i], true
}

func portOf(hostport string) int32 {
	_, p, _ := net.SplitHostPort(hostport)
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return int32(n)
}

// floodgateConfig parses the floodgate.yaml of a ConfigMap with Floodgate's own parser; its
// identity.hash_secret_file (a Secret the cluster holds) is read from a stand-in file instead.
func floodgateConfig(data string) (*door.Config, string, error) {
	var id struct {
		Identity struct {
			HashSecretFile string `json:"hash_secret_file"`
		} `json:"identity"`
	}
	_ = yaml.Unmarshal([]byte(data), &id)
	secretPath := id.Identity.HashSecretFile
	if secretPath != "" {
		dir, err := os.MkdirTemp("", "floodgate-secret")
		if err != nil {
			return nil, "", err
		}
		defer os.RemoveAll(dir)
		standIn := filepath.Join(dir, "secret")
		if err := os.WriteFile(standIn, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
			return nil, "", err
		}
		data = strings.ReplaceAll(data, secretPath, standIn)
	}
	cfg, err := doors.Parse("configmap.yaml:floodgate.yaml", []byte(data))
	return cfg, secretPath, err
}

// problems lists everything wrong with a decoded bundle; empty means it fits together.
func problems(b *bundle) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }

	// Kustomizations list exactly the manifest files beside them; the root one sets the namespace
	// of every object in its directory.
	kustomizations := map[string]*kustomization{}
	for f, objs := range b.files {
		for _, o := range objs {
			if k, ok := o.(*kustomization); ok {
				kustomizations[path.Dir(f)] = k
			}
		}
	}
	for _, dir := range dirs {
		k := kustomizations[dir]
		if k == nil {
			bad("%s: no kustomization.yaml", dir)
			continue
		}
		for _, r := range k.Resources {
			_, ok := b.files[path.Join(dir, r)]
			if !ok && !slices.Contains(dirs, path.Join(dir, r)) {
				bad("%s/kustomization.yaml lists %s, which holds no object and is no kustomization", dir, r)
			}
		}
		for f := range b.files {
			if path.Dir(f) == dir && path.Base(f) != "kustomization.yaml" && !slices.Contains(k.Resources, path.Base(f)) {
				bad("%s/kustomization.yaml does not list %s", dir, path.Base(f))
			}
		}
	}
	ns := ""
	if k := kustomizations["."]; k != nil {
		ns = k.Namespace
	}
	if nss := all[*corev1.Namespace](b); ns == "" || len(nss) != 1 || nss[0].Name != ns {
		bad("want a kustomization namespace and one Namespace object of that name")
	}
	for f, objs := range b.files {
		for _, o := range objs {
			if _, cluster := o.(*corev1.Namespace); path.Dir(f) == "." && !cluster && o.GetName() != "" && o.GetNamespace() != ns {
				bad("%s is in namespace %q, want %q (the kustomization's namespace)", o.GetName(), o.GetNamespace(), ns)
			}
		}
	}

	// Every Deployment: selector, hardening, resources, an exact image, probes on its ports.
	for _, d := range all[*appsv1.Deployment](b) {
		pod := &d.Spec.Template
		if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, pod.Labels) {
			bad("Deployment %s: selector does not match its pod labels", d.Name)
		}
		psc := pod.Spec.SecurityContext
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			bad("Deployment %s: the pod must set runAsNonRoot and the RuntimeDefault seccomp profile", d.Name)
		}
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			at := fmt.Sprintf("Deployment %s container %s", d.Name, c.Name)
			sc := c.SecurityContext
			switch {
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
			if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(path.Base(c.Image), ":") {
				bad("%s: image %q must name an exact tag", at, c.Image)
			}
			for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				var port intstr.IntOrString
				switch {
				case pr == nil:
					bad("%s: no %s probe", at, name)
					continue
				case pr.GRPC != nil:
					port = intstr.FromInt32(pr.GRPC.Port)
				case pr.TCPSocket != nil:
					port = pr.TCPSocket.Port
				default:
					continue
				}
				if _, ok := containerPort(c, port); !ok {
					bad("%s: %s probe port %s is not a container port", at, name, port.String())
				}
			}
		}
	}

	// Floodgate's Deployment: replicas, gRPC probes, drain timing, its config and hash secret.
	fd := named[*appsv1.Deployment](b, "floodgate")
	if fd == nil {
		return append(p, "no Deployment floodgate")
	}
	if fd.Spec.Replicas == nil || *fd.Spec.Replicas < 2 {
		bad("Deployment floodgate: want 2 or more replicas")
	}
	spec := &fd.Spec.Template.Spec
	fc := &spec.Containers[0]
	grpcPort, okG := containerPort(fc, intstr.FromString("grpc"))
	adminPort, okA := containerPort(fc, intstr.FromString("admin"))
	if !okG || !okA {
		bad("floodgate container needs ports named grpc and admin")
	}
	for name, pr := range map[string]*corev1.Probe{"readiness": fc.ReadinessProbe, "liveness": fc.LivenessProbe} {
		if pr == nil || pr.GRPC == nil || pr.GRPC.Port != grpcPort.ContainerPort {
			bad("floodgate %s probe must be a native gRPC probe on the grpc port %d", name, grpcPort.ContainerPort)
		}
	}
	if pr := fc.ReadinessProbe; pr != nil && pr.GRPC != nil && (pr.GRPC.Service == nil || *pr.GRPC.Service != healthService) {
		bad("floodgate readiness probe should ask for service %s (NOT_SERVING while draining)", healthService)
	}
	preStop := time.Duration(0)
	if lc := fc.Lifecycle; lc != nil && lc.PreStop != nil && lc.PreStop.Sleep != nil {
		preStop = time.Duration(lc.PreStop.Sleep.Seconds) * time.Second
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= preStop+drainBound {
		bad("floodgate terminationGracePeriodSeconds must exceed preStop (%v) + the drain bound (%v)", preStop, drainBound)
	}
	// mounted returns the volume mounted at dir (nil when none), refusing subPath mounts, which
	// the kubelet never updates.
	mounted := func(dir string) *corev1.Volume {
		for _, vm := range fc.VolumeMounts {
			if vm.MountPath != dir {
				continue
			}
			if vm.SubPath != "" || vm.SubPathExpr != "" {
				bad("floodgate mounts %s with subPath: the kubelet never updates such a mount", dir)
			}
			if i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }); i >= 0 {
				return &spec.Volumes[i]
			}
		}
		return nil
	}
	v := mounted(path.Dir(configPath))
	if v == nil || v.ConfigMap == nil || len(v.ConfigMap.Items) > 0 {
		return append(p, fmt.Sprintf("floodgate must mount a whole ConfigMap at %s", path.Dir(configPath)))
	}
	cm := named[*corev1.ConfigMap](b, v.ConfigMap.Name)
	if cm == nil || cm.Data[path.Base(configPath)] == "" {
		return append(p, fmt.Sprintf("floodgate mounts ConfigMap %s, which does not define %s", v.ConfigMap.Name, path.Base(configPath)))
	}
	cfg, secretPath, err := floodgateConfig(cm.Data[path.Base(configPath)])
	if err != nil {
		return append(p, fmt.Sprintf("ConfigMap %s: %v", cm.Name, err))
	}
	// After SIGTERM Floodgate serves for listen.drain_delay, then drains: the kubelet must not kill it sooner.
	if g := spec.TerminationGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second <= preStop+cfg.Listen.DrainDelay.Duration+drainBound {
		bad("floodgate terminationGracePeriodSeconds (%ds) must exceed preStop (%v) + listen.drain_delay (%v) + the drain bound (%v)", *g, preStop, cfg.Listen.DrainDelay.Duration, drainBound)
	}
	if portOf(cfg.Listen.GRPC) != grpcPort.ContainerPort || portOf(cfg.Listen.Admin) != adminPort.ContainerPort {
		bad("floodgate.yaml listens on %s / %s, but the container ports are grpc %d / admin %d", cfg.Listen.GRPC, cfg.Listen.Admin, grpcPort.ContainerPort, adminPort.ContainerPort)
	}
	if h, _, _ := net.SplitHostPort(cfg.Listen.GRPC); h != "0.0.0.0" && h != "::" && h != "" {
		bad("floodgate.yaml listen.grpc %s: listen on all interfaces in a pod", cfg.Listen.GRPC)
	}
	// The hash secret: a file of a required Secret, the same on every replica.
	if secretPath == "" {
		bad("floodgate.yaml sets no identity.hash_secret_file: identities would be hashed with the public default")
	} else if sv := mounted(path.Dir(secretPath)); sv == nil || sv.Secret == nil {
		bad("identity.hash_secret_file %s: no Secret is mounted at %s", secretPath, path.Dir(secretPath))
	} else if sv.Secret.Optional != nil && *sv.Secret.Optional {
		bad("the hash Secret %s is optional: a missing Secret must stop the rollout", sv.Secret.SecretName)
	} else if len(sv.Secret.Items) > 0 || spec.SecurityContext.FSGroup == nil || sv.Secret.DefaultMode == nil || *sv.Secret.DefaultMode&0o040 == 0 {
		bad("the hash Secret %s: mount it whole, group-readable, with the pod's fsGroup (the user is not root)", sv.Secret.SecretName)
	}

	// Services select one Deployment's pods and target its ports; floodgate's carries gRPC.
	for _, s := range all[*corev1.Service](b) {
		var targets []*appsv1.Deployment
		for _, d := range all[*appsv1.Deployment](b) {
			if selects(s.Spec.Selector, d.Spec.Template.Labels) {
				targets = append(targets, d)
			}
		}
		if len(targets) != 1 {
			bad("Service %s selects %d Deployments' pods, want one", s.Name, len(targets))
			continue
		}
		for _, sp := range s.Spec.Ports {
			if _, ok := containerPort(&targets[0].Spec.Template.Spec.Containers[0], sp.TargetPort); !ok {
				bad("Service %s port %s: targetPort %s is not a port of Deployment %s", s.Name, sp.Name, sp.TargetPort.String(), targets[0].Name)
			}
		}
	}
	fs := named[*corev1.Service](b, "floodgate")
	if fs == nil {
		return append(p, "no Service floodgate")
	}
	gi := slices.IndexFunc(fs.Spec.Ports, func(sp corev1.ServicePort) bool {
		cp, ok := containerPort(fc, sp.TargetPort)
		return sp.Name == "grpc" && sp.AppProtocol != nil && *sp.AppProtocol == "grpc" && ok && cp.ContainerPort == grpcPort.ContainerPort
	})
	if gi < 0 {
		return append(p, "Service floodgate needs a port named grpc, appProtocol grpc, on the container's grpc port")
	}
	grpcSvc := fs.Spec.Ports[gi]
	if !slices.ContainsFunc(fs.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.TargetPort.String() == "admin" }) {
		bad("Service floodgate exposes no admin (metrics) port")
	}

	// Redis: each address is a demo-only Service of this namespace, on one of its ports.
	for _, a := range cfg.Store.Redis.Addresses {
		host, port, _ := net.SplitHostPort(a)
		name := strings.TrimSuffix(strings.TrimSuffix(host, ".svc.cluster.local"), "."+ns)
		s := named[*corev1.Service](b, name)
		switch {
		case s == nil:
			bad("store.redis.addresses %s: no Service %s in the manifests", a, name)
		case !slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return strconv.Itoa(int(sp.Port)) == port }):
			bad("store.redis.addresses %s: Service %s has no port %s", a, name, port)
		case !strings.Contains(name, "demo") || s.Labels["app.kubernetes.io/component"] != "demo-only":
			bad("the bundled Redis must be marked demo-only in its name and labels")
		}
	}

	// The PDB covers Floodgate's pods and leaves room to evict one.
	pdbs := all[*policyv1.PodDisruptionBudget](b)
	if len(pdbs) == 0 {
		bad("no PodDisruptionBudget")
	}
	for _, pdb := range pdbs {
		ma := pdb.Spec.MinAvailable
		if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, fd.Spec.Template.Labels) ||
			ma == nil || ma.Type != intstr.Int || fd.Spec.Replicas == nil || ma.IntVal < 1 || ma.IntVal >= *fd.Spec.Replicas {
			bad("PodDisruptionBudget %s: select Floodgate's pods, minAvailable between 1 and replicas-1", pdb.Name)
		}
	}

	// Istio: the policy's provider is declared, and resolves to our Service and port.
	checkTimeout := func(what string, to time.Duration) {
		if to <= cfg.Store.Redis.Timeout || to > time.Second {
			bad("%s timeout %v: set it above Floodgate's store.redis.timeout (%v) and at most 1s", what, to, cfg.Store.Redis.Timeout)
		}
	}
	svcHost := fs.Name + "." + fs.Namespace + ".svc.cluster.local"
	// The policies that send Checks (CUSTOM, with a provider); istioaccess_test.go checks the
	// PeerAuthentication and ALLOW policy that guard Floodgate's own ports.
	aps := customPolicies(b)
	if b.mesh == nil || len(aps) == 0 {
		return append(p, "no "+meshConfigFile+" or no CUSTOM AuthorizationPolicy")
	}
	for _, o := range aps {
		ap := o.policy
		if ap.GetAction() != securityv1beta1.AuthorizationPolicy_CUSTOM {
			bad("AuthorizationPolicy %s: action %v, want CUSTOM", o.Name, ap.GetAction())
		}
		if (len(ap.GetSelector().GetMatchLabels()) == 0 && len(ap.GetTargetRefs()) == 0) || o.Namespace == "" {
			bad("AuthorizationPolicy %s: set the workload's namespace and selector (else it applies to the whole namespace)", o.Name)
		}
		if len(ap.GetRules()) == 0 {
			bad("AuthorizationPolicy %s has no rules: a CUSTOM policy without rules never calls the provider", o.Name)
		}
		name := ap.GetProvider().GetName()
		i := slices.IndexFunc(b.mesh.GetExtensionProviders(), func(ep *meshv1alpha1.MeshConfig_ExtensionProvider) bool {
			return ep.GetName() == name && ep.GetEnvoyExtAuthzGrpc() != nil
		})
		if i < 0 {
			bad("AuthorizationPolicy %s names provider %q, which meshConfig.extensionProviders does not declare (as envoyExtAuthzGrpc)", o.Name, name)
			continue
		}
		prov := b.mesh.GetExtensionProviders()[i].GetEnvoyExtAuthzGrpc()
		if prov.GetService() != svcHost {
			bad("provider %s service %q, want our Service %s", name, prov.GetService(), svcHost)
		}
		if prov.GetPort() != uint32(grpcSvc.Port) {
			bad("provider %s port %d, want the Service's grpc port %d", name, prov.GetPort(), grpcSvc.Port)
		}
		checkTimeout("provider "+name, prov.GetTimeout().AsDuration())
		if !prov.GetFailOpen() {
			bad("provider %s: failOpen should be true (a rate limiter outage must not fail the API)", name)
		}
	}

	p = append(p, gatewayProblems(b, cfg, fs, grpcSvc, checkTimeout)...)
	p = append(p, networkProblems(b)...)
	p = append(p, gatewayMTLSProblems(b, fs, grpcSvc)...)
	return append(p, meshAccessProblems(b, fc)...)
}

func TestManifests(t *testing.T) {
	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	got := []int{len(all[*appsv1.Deployment](b)), len(all[*corev1.Service](b)), len(all[*corev1.ConfigMap](b)),
		len(all[*policyv1.PodDisruptionBudget](b)), len(customPolicies(b)), len(all[*egv1a1.SecurityPolicy](b)),
		len(all[*networkingv1.NetworkPolicy](b)), len(all[*istioObject](b))}
	if want := []int{2, 2, 4, 1, 1, 1, 7, 4}; !slices.Equal(got, want) {
		t.Fatalf("decoded %v Deployments, Services, ConfigMaps, PDBs, CUSTOM AuthorizationPolicies, SecurityPolicies, NetworkPolicies and Istio objects; want %v", got, want)
	}
	for _, problem := range problems(b) {
		t.Error(problem)
	}
}

// TestOneImageReference: the image `make image` tags (Makefile IMAGE_REPO:IMAGE_TAG) is the one
// the manifests run, and the image runs `serve --config` on the path they mount.
func TestOneImageReference(t *testing.T) {
	mk, err := os.ReadFile(makefile)
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(IMAGE_REPO|IMAGE_TAG)\s*\?=\s*(\S+)`).FindAllStringSubmatch(string(mk), -1) {
		v[m[1]] = m[2]
	}
	want := v["IMAGE_REPO"] + ":" + v["IMAGE_TAG"]
	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, d := range all[*appsv1.Deployment](b) {
		for _, c := range d.Spec.Template.Spec.Containers {
			if strings.Contains(c.Image, "floodgate/floodgate") {
				refs = append(refs, c.Image)
			}
		}
	}
	if len(refs) == 0 || slices.ContainsFunc(refs, func(r string) bool { return r != want }) {
		t.Errorf("the manifests run %v; make image builds %s", refs, want)
	}
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"serve", "--config", "`+configPath+`"`) {
		t.Errorf("%s does not start floodgate with serve --config %s", dockerfile, configPath)
	}
}

// mutation is a broken copy of one file and what its problem report must say.
type mutation struct{ name, file, old, new, want string }

// caught applies each mutation to the shipped files and requires the report to say want.
func caught(t *testing.T, cases []mutation) {
	files := readFiles(t)
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
			got := []string{fmt.Sprint(err)}
			if err == nil {
				got = problems(b)
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("not caught: %v (want %q)", got, tc.want)
			}
		})
	}
}

// TestBrokenCopiesAreRejected proves the checks can fail: each broken copy must be caught.
func TestBrokenCopiesAreRejected(t *testing.T) {
	caught(t, []mutation{
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
		{"service selector", "service.yaml", "app.kubernetes.io/component: ratelimiter", "app.kubernetes.io/component: limiter", "selects 0 Deployments"},
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
		// The identity hash secret.
		{"no hash secret", "configmap.yaml", "hash_secret_file: /etc/floodgate-secret/hash-secret", "hash_secret_env: \"\"", "no identity.hash_secret_file"},
		{"secret not mounted", "deployment.yaml", "mountPath: /etc/floodgate-secret", "mountPath: /etc/secret", "no Secret is mounted"},
		{"optional secret", "deployment.yaml", "secretName: floodgate-hash-secret\n", "secretName: floodgate-hash-secret\n            optional: true\n", "is optional"},
		{"secret unreadable", "deployment.yaml", "defaultMode: 0440", "defaultMode: 0400", "group-readable"},
	})
}
