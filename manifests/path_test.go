package manifests

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/doors"
)

// The path of a request through every shipped recipe: from the proxy a control plane configures,
// read from that control plane's own objects as `kubectl apply -k` renders them, to a limit in
// Floodgate's configuration. A recipe whose files each decode can still leave traffic unlimited (a
// proxy the NetworkPolicy refuses, a timeout below Floodgate's own, a domain no file defines,
// descriptors that select nothing) or refuse it (a proxy that fails closed when the docs promise
// it fails open): each of those is a problem here.

// source is the repository files a recipe is made of, by path from the repository root:
// manifests/**.yaml, envoy/**.yaml and docs/**.md.
type source map[string][]byte

func readSources(t *testing.T) source {
	t.Helper()
	src := source{}
	for _, root := range []string{"../manifests", "../envoy", "../docs"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".md")) {
				return err
			}
			data, err := os.ReadFile(p)
			src[strings.TrimPrefix(filepath.ToSlash(p), "../")] = data
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// manifests is the manifests/ part of src, by path from manifests/ (what render reads).
func (src source) manifests() map[string][]byte {
	out := map[string][]byte{}
	for name, data := range src {
		if rest, ok := strings.CutPrefix(name, "manifests/"); ok && strings.HasSuffix(rest, ".yaml") {
			out[rest] = data
		}
	}
	return out
}

// floodgateSide is Floodgate as a recipe deploys it.
type floodgateSide struct {
	// service and namespace name its Service ("" off Kubernetes); port is the port the proxies
	// call (the Service's grpc port, or listen.grpc's).
	service, namespace string
	port               int32
	podLabels          map[string]string
	grpc               corev1.ContainerPort
	// cfg is its configuration, with the rate limit service's limits loaded as the pod sees
	// them.
	cfg *door.Config
}

// target is where a proxy sends its calls.
type target struct {
	service, namespace string
	port               int32
}

func (t target) String() string {
	if t.namespace == "" {
		return fmt.Sprintf("%s:%d", t.service, t.port)
	}
	return fmt.Sprintf("Service %s/%s port %d", t.namespace, t.service, t.port)
}

// proxyPath is the proxy side of one recipe, read from its objects.
type proxyPath struct {
	// rls: the proxy calls the rate limit service; otherwise it sends ext_authz Checks.
	rls bool
	// caller is the proxy's pods on Kubernetes (nil off Kubernetes), principal its Istio
	// identity (TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT; "" outside the mesh).
	caller    *caller
	principal string
	target    target
	// timeout is the call's timeout as the proxy applies it (its control plane's default when
	// the recipe sets none), timeoutFrom where it comes from.
	timeout     time.Duration
	timeoutFrom string
	// failOpen: a failed call lets the request pass; otherwise it is refused with statusOnError.
	failOpen      bool
	statusOnError int
	// domain is the rate limit domain the proxy asks for.
	domain string
	// samples are requests and what the proxy sends for each.
	samples []sample
}

// sample is one request and what the proxy sends Floodgate for it.
type sample struct {
	what        string
	descriptors [][]rls.Entry
	check       *checkSample
}

// checkSample is a Check as the proxy fills it.
type checkSample struct {
	method, path, host string
	headers            map[string]string
	peer, principal    string
	contextExtensions  map[string]string
}

// world is what a recipe applies: the rendered objects of its kustomizations and Floodgate.
type world struct {
	t    *testing.T
	src  source
	objs []metav1.Object
	fg   *floodgateSide
}

// recipe is one shipped way of putting Floodgate behind a proxy.
type recipe struct {
	id, name string
	// apply are the kustomizations `kubectl apply -k` applies, in order; none off Kubernetes.
	apply []string
	// page is the docs page that explains it; it holds the failure-mode table marked
	// <!-- failure-modes: ID --> and names each of notes.
	page  string
	notes []string
	// follow reads the proxy side from the world, and reports what is wrong on the way that the
	// generic checks of walk do not see.
	follow func(w *world) (*proxyPath, []string)
}

var recipes = []recipe{
	{id: "istio-custom", name: "Istio CUSTOM (ext_authz)", apply: []string{".", "istio"},
		page: "docs/controlplanes/istio.md", notes: []string{"numTrustedProxies", "client_ip.trusted_hops"}, follow: followIstioCustom},
	{id: "istio-ratelimit", name: "Istio global rate limiting", apply: []string{".", "istio", "istio/ratelimit"},
		page: "docs/controlplanes/istio.md", notes: []string{"numTrustedProxies", "PILOT_FILTER_GATEWAY_CLUSTER_CONFIG", "vh_rate_limits"}, follow: followIstioRateLimit},
	{id: "envoy-gateway", name: "Envoy Gateway SecurityPolicy", apply: []string{".", "gateway"},
		page: "docs/controlplanes/envoy-gateway.md", notes: []string{"numTrustedHops"}, follow: followEnvoyGateway(false)},
	{id: "envoy-gateway-mtls", name: "Envoy Gateway SecurityPolicy over mutual TLS", apply: []string{".", "gateway-mtls"},
		page: "docs/controlplanes/envoy-gateway.md", notes: []string{"parametersRef"}, follow: followEnvoyGateway(true)},
	{id: "contour", name: "Contour", apply: []string{".", "contour"},
		page: "docs/controlplanes/contour.md", notes: []string{"num-trusted-hops", "vh_rate_limits", "rls.on_failure"}, follow: followContour},
	{id: "emissary", name: "Emissary", apply: []string{".", "emissary"},
		page: "docs/controlplanes/emissary.md", notes: []string{"xff_num_trusted_hops"}, follow: followEmissary},
	{id: "envoy-ext-authz", name: "plain Envoy, ext_authz", page: "docs/controlplanes/envoy.md",
		notes: []string{"xff_num_trusted_hops"}, follow: followEnvoyExtAuthz},
	{id: "envoy-ratelimit", name: "plain Envoy, rate limit service", page: "docs/controlplanes/envoy.md",
		notes: []string{"xff_num_trusted_hops", "vh_rate_limits"}, follow: followEnvoyRateLimit},
}

// walk follows a request through one recipe and lists what is wrong on its way.
func walk(t *testing.T, r recipe, src source) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	w := &world{t: t, src: src}
	if len(r.apply) > 0 {
		objs, err := renderAll(src.manifests(), r.apply...)
		if err != nil {
			return []string{err.Error()}
		}
		w.objs = objs
		var problems []string
		w.fg, problems = kubeFloodgate(t, objs)
		if w.fg == nil {
			return problems
		}
		p = append(p, problems...)
	}
	pp, problems := r.follow(w)
	p = append(p, problems...)
	if pp == nil || w.fg == nil {
		return p
	}
	fg := w.fg
	consequence := "every request passes unlimited"
	if !pp.failOpen {
		consequence = fmt.Sprintf("every request is refused (%d)", pp.statusOnError)
	}

	// It reaches Floodgate.
	if want := (target{fg.service, fg.namespace, fg.port}); pp.target != want {
		bad("it sends to %v, not to Floodgate (%v): %s", pp.target, want, consequence)
	}
	if pp.caller != nil {
		nps := ofType[*networkingv1.NetworkPolicy](w.objs)
		peers, isolated, err := admitted(nps, fg.namespace, fg.podLabels, fg.grpc)
		switch {
		case err != nil:
			bad("%v", err)
		case isolated && !slices.ContainsFunc(peers, func(pr peer) bool { return pr.admits(pp.caller.namespace, pp.caller.pods) }):
			bad("the NetworkPolicies of namespace %s do not admit %s (namespace %s, pods %v) to port %s: every call fails, and %s",
				fg.namespace, pp.caller.what, pp.caller.namespace, pp.caller.pods, fg.grpc.Name, consequence)
		}
	}
	p = append(p, meshProblems(w, pp, consequence)...)

	// Floodgate's own answer comes first.
	if store := fg.cfg.Store.Redis.Timeout; pp.timeout < 2*store || pp.timeout > time.Second {
		bad("timeout %v (%s): want at least twice Floodgate's store.redis.timeout (%v), so that Floodgate's own failure mode answers a slow Redis before the proxy gives up, and at most 1s", pp.timeout, pp.timeoutFrom, store)
	}

	// Each failure ends as the docs say.
	p = append(p, failureProblems(r, src, pp, fg.cfg)...)

	// What it sends selects a limit.
	if pp.rls {
		if !slices.Contains(ratelimit.Limits(fg.cfg).Domains(), pp.domain) {
			bad("it asks for domain %q, which the limits Floodgate loads do not define (%v): nothing is limited", pp.domain, ratelimit.Limits(fg.cfg).Domains())
		}
	}
	if len(pp.samples) == 0 {
		bad("no request to follow")
	}
	for _, s := range pp.samples {
		if pp.rls {
			if len(s.descriptors) == 0 {
				bad("%s: it sends no descriptor, so the request is not limited", s.what)
			}
			for _, d := range s.descriptors {
				if ratelimit.Limits(fg.cfg).Select(pp.domain, d) == nil {
					bad("%s: descriptor %v selects no limit in domain %q", s.what, d, pp.domain)
				}
			}
			continue
		}
		c := s.check
		matched, keyed, err := decideCheck(fg.cfg, checkRequest(c.method, c.path, c.host, c.headers, c.peer, c.principal, c.contextExtensions))
		switch {
		case err != nil:
			bad("%s: %v", s.what, err)
		case !matched:
			bad("%s: no policy of Floodgate's configuration matches the Check, so the request is not limited", s.what)
		case !keyed:
			bad("%s: the policy that matches finds no identity in the Check: every such request shares one bucket", s.what)
		}
	}

	// The page explains what bites.
	page := string(src[r.page])
	for _, n := range r.notes {
		if !strings.Contains(page, n) {
			bad("%s does not explain %s", r.page, n)
		}
	}
	return p
}

// kubeFloodgate is Floodgate as the rendered objects deploy it: its Deployment, Service, config,
// and the limits the kubelet lays out in rls.config's directory.
func kubeFloodgate(t *testing.T, objs []metav1.Object) (*floodgateSide, []string) {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	find := func(kind, name string) metav1.Object {
		for _, o := range objs {
			if o.GetName() == name && strings.HasSuffix(fmt.Sprintf("%T", o), "."+kind) {
				return o
			}
		}
		return nil
	}
	fd, _ := find("Deployment", "floodgate").(*appsv1.Deployment)
	fs, _ := find("Service", "floodgate").(*corev1.Service)
	if fd == nil || fs == nil {
		return nil, []string{"no Deployment or Service floodgate rendered"}
	}
	fc := &fd.Spec.Template.Spec.Containers[0]
	grpc, _ := containerPort(fc, intstr.FromString("grpc"))
	fg := &floodgateSide{service: fs.Name, namespace: fs.Namespace, podLabels: fd.Spec.Template.Labels, grpc: grpc}
	for _, sp := range fs.Spec.Ports {
		if sp.Name == "grpc" {
			fg.port = sp.Port
		}
	}
	vol := func(dir string) *corev1.Volume {
		for _, vm := range fc.VolumeMounts {
			if vm.MountPath == dir {
				for i := range fd.Spec.Template.Spec.Volumes {
					if v := &fd.Spec.Template.Spec.Volumes[i]; v.Name == vm.Name {
						return v
					}
				}
			}
		}
		return nil
	}
	cv := vol(path.Dir(configPath))
	if cv == nil || cv.ConfigMap == nil {
		return nil, []string{"Floodgate mounts no ConfigMap at " + path.Dir(configPath)}
	}
	cm, _ := find("ConfigMap", cv.ConfigMap.Name).(*corev1.ConfigMap)
	if cm == nil {
		return nil, []string{"no ConfigMap " + cv.ConfigMap.Name}
	}
	floodgateYAML := cm.Data[path.Base(configPath)]
	cfg, _, err := floodgateConfig(floodgateYAML)
	if err != nil {
		return nil, []string{err.Error()}
	}
	// The limits: every key of every ConfigMap the rls.config volume projects, a file in one
	// directory, reached as the kubelet lays it out (through ..data).
	dir := t.TempDir()
	data := filepath.Join(dir, "..data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if cfg.RLS.Config != "" {
		var sources []string
		switch rv := vol(cfg.RLS.Config); {
		case rv == nil:
			bad("rls.config is %s, but Floodgate mounts nothing there", cfg.RLS.Config)
		case rv.ConfigMap != nil:
			sources = append(sources, rv.ConfigMap.Name)
		case rv.Projected != nil:
			for _, s := range rv.Projected.Sources {
				if s.ConfigMap != nil {
					sources = append(sources, s.ConfigMap.Name)
				}
			}
		}
		for _, name := range sources {
			lm, _ := find("ConfigMap", name).(*corev1.ConfigMap)
			if lm == nil || lm.Namespace != fd.Namespace {
				continue // not applied by this recipe (the sources are optional)
			}
			for key, content := range lm.Data {
				if _, err := os.Stat(filepath.Join(data, key)); err == nil {
					bad("ConfigMap %s: file %s is also another projected ConfigMap's: one hides the other", name, key)
				}
				os.WriteFile(filepath.Join(data, key), []byte(content), 0o644)
				os.Symlink(filepath.Join("..data", key), filepath.Join(dir, key))
			}
		}
		cfg, _, err = floodgateConfig(strings.ReplaceAll(floodgateYAML, cfg.RLS.Config, dir))
		if err == nil {
			err = doors.ReadFiles(cfg)
		}
		if err != nil {
			return nil, append(p, "the limits in rls.config: "+err.Error())
		}
	}
	fg.cfg = cfg
	return fg, p
}

// meshProblems checks what Istio's mTLS and authorization make of the proxy's calls: with
// Floodgate's gRPC port STRICT, a caller outside the mesh is refused; with ALLOW policies for
// Floodgate's pods, the caller's principal must be admitted to the port (Istio refuses a request no
// ALLOW rule matches: pilot/pkg/security/authz/builder, the RBAC filter it builds).
func meshProblems(w *world, pp *proxyPath, consequence string) []string {
	var p []string
	fg := w.fg
	port := strconv.Itoa(int(fg.grpc.ContainerPort))
	var allows []*istioObject
	for _, o := range ofType[*istioObject](w.objs) {
		if o.Namespace != fg.namespace {
			continue
		}
		if o.peer != nil && selectsPods(o.peer.GetSelector().GetMatchLabels(), fg.podLabels) && pp.principal == "" && pp.caller != nil {
			mode := o.peer.GetMtls().GetMode()
			if pl, ok := o.peer.GetPortLevelMtls()[uint32(fg.grpc.ContainerPort)]; ok {
				mode = pl.GetMode()
			}
			if mode == securityv1beta1.PeerAuthentication_MutualTLS_STRICT {
				p = append(p, fmt.Sprintf("PeerAuthentication %s requires Istio mTLS on port %s, which %s (outside the mesh) cannot speak: %s", o.Name, port, pp.caller.what, consequence))
			}
		}
		if o.policy != nil && o.policy.GetAction() == securityv1beta1.AuthorizationPolicy_ALLOW && selectsPods(o.policy.GetSelector().GetMatchLabels(), fg.podLabels) {
			allows = append(allows, o)
		}
	}
	if pp.principal == "" || len(allows) == 0 {
		return p
	}
	for _, o := range allows {
		for _, r := range o.policy.GetRules() {
			ports := []string{}
			for _, to := range r.GetTo() {
				ports = append(ports, to.GetOperation().GetPorts()...)
			}
			if len(ports) > 0 && !slices.Contains(ports, port) {
				continue
			}
			for _, f := range r.GetFrom() {
				if slices.ContainsFunc(f.GetSource().GetPrincipals(), func(pr string) bool {
					return pr == pp.principal || (strings.HasSuffix(pr, "*") && strings.HasPrefix(pp.principal, strings.TrimSuffix(pr, "*")))
				}) {
					return p
				}
			}
		}
	}
	return append(p, fmt.Sprintf("no ALLOW AuthorizationPolicy for Floodgate's pods admits %s (principal %s) to port %s: Istio refuses its calls, and %s", pp.caller.what, pp.principal, port, consequence))
}

// The outcomes a failure-mode table may promise, as written in the docs (bold and code marks
// aside).
const (
	passUnlimited = "pass unlimited"
	passDegraded  = "pass, marked x-ratelimit-degraded: true"
	passOK        = "pass, floodgate answers ok"
	perReplica    = "limited per replica"
	refusedPrefix = "refused with "
)

var outcomePhrases = []string{passUnlimited, passDegraded, passOK, perReplica, refusedPrefix}

// failureRows are the rows every failure-mode table has.
var failureRows = []string{"redis down", "floodgate down", "a timeout"}

// expectedOutcomes are what requests get in each failure, from the proxy's failure mode and
// Floodgate's: a call that fails (Floodgate unreachable, or slower than the timeout) is the
// proxy's to decide; a Redis outage is Floodgate's (store.on_failure), unless the rate limit
// service answers it with an error (rls.on_failure: error, internal/door/ratelimit/rls/service.go, Service.failed),
// which the proxy then decides too.
func expectedOutcomes(pp *proxyPath, cfg *door.Config) map[string]string {
	proxy := passUnlimited
	if !pp.failOpen {
		proxy = fmt.Sprintf("%s%d", refusedPrefix, pp.statusOnError)
	}
	var redis string
	switch {
	case pp.rls && cfg.RLS.OnFailure == "error":
		redis = proxy
	case cfg.Store.OnFailure == "deny":
		redis = refusedPrefix + "429"
	case cfg.Store.OnFailure == "local":
		redis = perReplica
	case pp.rls:
		redis = passOK
	default:
		redis = passDegraded
	}
	return map[string]string{failureRows[0]: redis, failureRows[1]: proxy, failureRows[2]: proxy}
}

var tableMarks = strings.NewReplacer("*", "", "`", "")

// failureTable reads the table a page marks with <!-- failure-modes: ID -->: the first cell of each
// row (the failure, lower case) to the second (what requests get, lower case, marks removed).
func failureTable(page []byte, id string) (map[string]string, error) {
	marker := []byte("<!-- failure-modes: " + id + " -->")
	i := bytes.Index(page, marker)
	if i < 0 {
		return nil, fmt.Errorf("no %s", marker)
	}
	rows := map[string]string{}
	lines := strings.Split(string(page[i+len(marker):]), "\n")
	started := false
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		norm := func(s string) string {
			return strings.ToLower(strings.Join(strings.Fields(tableMarks.Replace(s)), " "))
		}
		rows[norm(cells[0])] = norm(cells[1])
	}
	return rows, nil
}

// failureProblems holds the page's failure-mode table to what the recipe does.
func failureProblems(r recipe, src source, pp *proxyPath, cfg *door.Config) []string {
	table, err := failureTable(src[r.page], r.id)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", r.page, err)}
	}
	var p []string
	for row, want := range expectedOutcomes(pp, cfg) {
		var cell string
		found := false
		for k, v := range table {
			if strings.HasPrefix(k, row) {
				cell, found = v, true
			}
		}
		if !found {
			p = append(p, fmt.Sprintf("%s: the failure-mode table %s has no row %q", r.page, r.id, row))
			continue
		}
		ok := strings.Contains(cell, want)
		for _, other := range outcomePhrases {
			if !strings.HasPrefix(want, other) && strings.Contains(cell, other) {
				ok = false
			}
		}
		if !ok {
			p = append(p, fmt.Sprintf("%s: %s, %s: the table says %q, but as shipped requests %s (proxy fails open: %v; Floodgate store.on_failure %s, rls.on_failure %s)",
				r.page, r.id, row, cell, want, pp.failOpen, cfg.Store.OnFailure, cfg.RLS.OnFailure))
		}
	}
	return p
}

// TestEveryRecipeLimitsTraffic follows a request through every shipped recipe (walk).
func TestEveryRecipeLimitsTraffic(t *testing.T) {
	src := readSources(t)
	for _, r := range recipes {
		t.Run(r.id, func(t *testing.T) {
			for _, problem := range walk(t, r, src) {
				t.Error(problem)
			}
		})
	}
}

// edit is one change to one file of a broken copy; all replaces every occurrence.
type edit struct {
	file, old, new string
	all            bool
}

// TestThePathCatchesEachFinding reintroduces, one at a time, the ways these recipes were once
// found to leave traffic unlimited or refused, and requires walk to report each.
func TestThePathCatchesEachFinding(t *testing.T) {
	const (
		istioAccess = "manifests/istio/floodgate-access.yaml"
		istioFilter = "manifests/istio/ratelimit/envoyfilter.yaml"
		extService  = "manifests/contour/extension-service.yaml"
		contourConf = "manifests/contour/contour.yaml"
		emissaryRLS = "manifests/emissary/ratelimit-service.yaml"
	)
	cases := []struct {
		name, recipe string
		edits        []edit
		want         string
	}{
		// 1. Istio global rate limiting cannot reach Floodgate.
		{"istio: the gateway's NetworkPolicy left out", "istio-ratelimit",
			[]edit{{file: "manifests/istio/ratelimit/kustomization.yaml", old: "  - callers.yaml\n", new: ""}},
			"do not admit Istio's ingress gateway"},
		{"istio: the gateway's principal left out", "istio-ratelimit",
			[]edit{{file: istioAccess, old: `["cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"]`, new: `["cluster.local/ns/istio-system/sa/other"]`}},
			"no ALLOW AuthorizationPolicy for Floodgate's pods admits Istio's ingress gateway"},
		// 2. kubectl apply -k manifests/istio does not render.
		{"istio: a number as a map key", "istio-custom",
			[]edit{{file: istioAccess, old: `"9192":`, new: "9192:"}},
			"unsupported type"},
		// 3. Contour answers 500s.
		{"contour: no response timeout", "contour",
			[]edit{{file: extService, old: "  timeoutPolicy:\n", new: "  # timeoutPolicy:\n"}, {file: extService, old: "    response: 250ms\n", new: ""}},
			"timeout 20ms"},
		{"contour: its Envoy not admitted", "contour",
			[]edit{{file: "manifests/contour/kustomization.yaml", old: "  - callers.yaml\n", new: ""}},
			"do not admit Contour's Envoy"},
		{"contour: the ExtensionService in Contour's namespace", "contour",
			[]edit{{file: extService, old: "  namespace: floodgate\n", new: "  namespace: projectcontour\n"}, {file: contourConf, old: "extensionService: floodgate/floodgate", new: "extensionService: projectcontour/floodgate"}},
			"it sends to Service projectcontour/floodgate port 9191, not to Floodgate"},
		{"contour: Floodgate answers OK when Redis is down", "contour",
			[]edit{{file: "manifests/configmap.yaml", old: "      on_failure: error\n", new: ""}},
			"redis down: the table says"},
		// 4. Emissary is silently unlimited.
		{"emissary: no domain", "emissary",
			[]edit{{file: emissaryRLS, old: "  domain: emissary\n", new: ""}},
			`domain "ambassador"`},
		{"emissary: no timeout", "emissary",
			[]edit{{file: emissaryRLS, old: "  timeout_ms: 250\n", new: ""}},
			"timeout 20ms"},
		{"emissary: its pods not admitted", "emissary",
			[]edit{{file: "manifests/emissary/kustomization.yaml", old: "  - callers.yaml\n", new: ""}},
			"do not admit Emissary"},
		// 5. Envoy Gateway's mutual TLS without the EnvoyProxy.
		{"envoy gateway: no parametersRef", "envoy-gateway-mtls",
			[]edit{{file: "manifests/gateway-mtls/kustomization.yaml", old: "patches:\n  - patch: |-\n      apiVersion: gateway.networking.k8s.io/v1\n      kind: Gateway\n      metadata:\n        name: edge\n        namespace: demo\n      spec:\n        infrastructure:\n          parametersRef:\n            group: gateway.envoyproxy.io\n            kind: EnvoyProxy\n            name: edge-proxy\n", new: ""}},
			"parametersRef"},
		// 6. What the rate limit recipes did not say.
		{"istio: no cluster under PILOT_FILTER_GATEWAY_CLUSTER_CONFIG", "istio-ratelimit",
			[]edit{{file: istioFilter, old: "    envoyfilter.istio.io/referenced-services: floodgate.floodgate.svc.cluster.local\n", new: ""}},
			"PILOT_FILTER_GATEWAY_CLUSTER_CONFIG"},
		{"istio: numTrustedProxies unexplained", "istio-ratelimit",
			[]edit{{file: "docs/controlplanes/istio.md", old: "numTrustedProxies", new: "trusted proxies", all: true}},
			"does not explain numTrustedProxies"},
		{"contour: vh_rate_limits unexplained", "contour",
			[]edit{{file: "docs/controlplanes/contour.md", old: "vh_rate_limits", new: "virtual host limits", all: true}},
			"does not explain vh_rate_limits"},
		{"contour: a route that overrides the virtual host's limits without its own", "contour",
			[]edit{{file: "manifests/contour/httpproxy.yaml", old: "                - genericKey:\n                    value: login\n", new: "                - genericKey:\n                    value: signin\n"}},
			"selects no limit"},
	}
	src := readSources(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			broken := source{}
			for k, v := range src {
				broken[k] = v
			}
			for _, e := range tc.edits {
				data, ok := broken[e.file]
				if !ok || !bytes.Contains(data, []byte(e.old)) {
					t.Fatalf("%s no longer contains %q: update this test", e.file, e.old)
				}
				n := 1
				if e.all {
					n = -1
				}
				broken[e.file] = []byte(strings.Replace(string(data), e.old, e.new, n))
			}
			i := slices.IndexFunc(recipes, func(r recipe) bool { return r.id == tc.recipe })
			got := walk(t, recipes[i], broken)
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Fatalf("not caught: %q (want %q)", got, tc.want)
			}
			t.Logf("caught: %s", got[slices.IndexFunc(got, func(s string) bool { return strings.Contains(s, tc.want) })])
		})
	}
}

var hostPort = regexp.MustCompile(`^([a-z0-9-]+)(?:\.([a-z0-9-]+))?(?:\.svc(?:\.cluster\.local)?)?(?::(\d+))?$`)

// serviceTarget reads NAME[.NAMESPACE[.svc[.cluster.local]]][:PORT] as Kubernetes DNS does, a
// bare name in namespace ns.
func serviceTarget(s, ns string, port int32) (target, error) {
	m := hostPort.FindStringSubmatch(s)
	if m == nil {
		return target{}, fmt.Errorf("%q is not a Service's name", s)
	}
	t := target{service: m[1], namespace: ns, port: port}
	if m[2] != "" {
		t.namespace = m[2]
	}
	if m[3] != "" {
		n, _ := strconv.Atoi(m[3])
		t.port = int32(n)
	}
	return t, nil
}
