package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/limiter/redistest"
)

const (
	rulesFile     = "observability/prometheus-rules.yaml"
	dashboardFile = "observability/grafana-dashboard.json"
	monitorFile   = "observability/service-monitor.yaml"
	obsReadme     = "observability/README.md"
)

// decodeYAML decodes one YAML object strictly (see strictJSON).
func decodeYAML(t *testing.T, file string, into any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if err := floodgatetest.StrictJSON(js, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func loadRules(t *testing.T) *monitoringv1.PrometheusRule {
	t.Helper()
	r := &monitoringv1.PrometheusRule{}
	decodeYAML(t, rulesFile, r)
	if r.APIVersion != "monitoring.coreos.com/v1" || r.Kind != "PrometheusRule" {
		t.Fatalf("%s: %s %s, want monitoring.coreos.com/v1 PrometheusRule", rulesFile, r.APIVersion, r.Kind)
	}
	return r
}

// dashboard is the part of Grafana's dashboard JSON the tests read.
type dashboard struct {
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title      string         `json:"title"`
		Datasource map[string]any `json:"datasource"`
		Targets    []struct {
			Expr       string         `json:"expr"`
			Datasource map[string]any `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	d := &dashboard{}
	if err := json.Unmarshal(data, d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// expressions are every PromQL expression of the rules and the dashboard, by where they are.
// Grafana replaces $__rate_interval before it queries; so does this, with a valid range.
func expressions(t *testing.T) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	for _, g := range loadRules(t).Spec.Groups {
		for _, r := range g.Rules {
			exprs[fmt.Sprintf("%s: %s %s%s", rulesFile, g.Name, r.Record, r.Alert)] = r.Expr.String()
		}
	}
	for _, p := range loadDashboard(t).Panels {
		for i, tg := range p.Targets {
			exprs[fmt.Sprintf("%s: panel %q target %d", dashboardFile, p.Title, i)] = strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m")
		}
	}
	return exprs
}

var promql = parser.NewParser(parser.Options{})

// metricNames parses expr with Prometheus' parser and returns the metric names it selects.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, nil
}

// TestEveryPromQLExpressionParses: each rule and each dashboard query, by Prometheus' own parser.
func TestEveryPromQLExpressionParses(t *testing.T) {
	exprs := expressions(t)
	if len(exprs) < 20 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	for at, e := range exprs {
		names, err := metricNames(e)
		if err != nil {
			t.Errorf("%s: %v\n%s", at, err, e)
		} else if len(names) == 0 {
			t.Errorf("%s selects no metric: %s", at, e)
		}
	}
	if _, err := metricNames("sum(rate(floodgate_checks_total[5m])"); err == nil {
		t.Fatal("the parser accepted an unbalanced expression")
	}
}

// TestTheRulesAreComplete: recording rules and the alerts the runbooks describe, each with for,
// a severity, a summary, a description and a runbook_url whose anchor is a heading of the
// observability README.
func TestTheRulesAreComplete(t *testing.T) {
	readme, err := os.ReadFile(obsReadme)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ +(.+)$`).FindAllStringSubmatch(string(readme), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	var alerts []string
	records := 0
	for _, g := range loadRules(t).Spec.Groups {
		for _, r := range g.Rules {
			if (r.Record == "") == (r.Alert == "") {
				t.Errorf("group %s: a rule must be a record or an alert: %+v", g.Name, r)
				continue
			}
			if r.Record != "" {
				records++
				if !strings.HasPrefix(r.Record, "floodgate:") {
					t.Errorf("recording rule %s: name it level:metric:operations, starting floodgate:", r.Record)
				}
				continue
			}
			alerts = append(alerts, r.Alert)
			if r.For == nil || *r.For == "" {
				t.Errorf("alert %s has no for", r.Alert)
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no annotations.%s", r.Alert, a)
				}
			}
			url := r.Annotations["runbook_url"]
			_, anchor, _ := strings.Cut(url, "#")
			if !strings.HasSuffix(strings.TrimSuffix(url, "#"+anchor), "/manifests/observability/README.md") || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %s is not a heading of %s", r.Alert, url, obsReadme)
			}
		}
	}
	for _, want := range []string{"FloodgateBreakerOpen", "FloodgateDegradedDecisions", "FloodgateCheckLatencyNearTimeout",
		"FloodgateConfigReloadFailing", "FloodgateNoChecks", "FloodgateDenyRatioJump",
		"FloodgateRLSDegradedAnswers", "FloodgateRLSDenyRatioJump"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s", want)
		}
	}
	if records == 0 {
		t.Error("no recording rules")
	}
	checkLatencyThreshold(t)
	// Strict decoding: a misspelt field is an error, not a silently dropped setting.
	var probe monitoringv1.PrometheusRule
	if err := floodgatetest.StrictJSON([]byte(`{"spec":{"groups":[{"name":"g","rules":[{"alert":"A","expr":"up","fore":"1m"}]}]}}`), &probe); err == nil {
		t.Error("an unknown rule field was accepted")
	}
}

// githubAnchor is the fragment GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestTheDashboard: the panels an on-call engineer needs, each with a query, all on the
// datasource template variable rather than a hard-coded data source.
func TestTheDashboard(t *testing.T) {
	d := loadDashboard(t)
	hasVar := slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query string `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	})
	if !hasVar {
		t.Error("no datasource template variable (type datasource, query prometheus)")
	}
	titles := map[string]bool{}
	for _, p := range d.Panels {
		titles[p.Title] = true
		if p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q: datasource %v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.Datasource["uid"] != "${datasource}" {
				t.Errorf("panel %q: a target without a query or on another datasource (%v)", p.Title, tg.Datasource)
			}
		}
	}
	for _, want := range []string{
		"Decisions per second by outcome", "Deny ratio by policy", "Check latency p50 / p99",
		"Circuit breaker state", "Circuit breaker transitions", "Redis decisions per script call",
		"Identity fall-backs to the shared bucket", "Config reloads and failures", "Replicas up", "Degraded ratio",
		"Rate limit service requests by outcome", "Rate limit service deny ratio by limit",
		"Rate limit service decisions by limit", "Rate limit service degraded ratio",
	} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}
	// The outcomes panel shows shadow-denied and the degraded outcomes (floodgate_checks_total by outcome).
	exprs := expressions(t)
	all := ""
	for _, e := range exprs {
		all += e + "\n"
	}
	for _, want := range []string{`result="shadow_denied"`, "sum by (outcome) (rate(floodgate_checks_total", "floodgate_identity_missing_total"} {
		if !strings.Contains(all, want) {
			t.Errorf("no query uses %s", want)
		}
	}
}

// TestTheServiceMonitorScrapesTheAdminPort: it selects Floodgate's Service (and only it) and
// scrapes the Service port that reaches the container's admin port.
func TestTheServiceMonitorScrapesTheAdminPort(t *testing.T) {
	sm := &monitoringv1.ServiceMonitor{}
	decodeYAML(t, monitorFile, sm)
	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	var selected []*corev1.Service
	for _, s := range all[*corev1.Service](b) {
		if selects(sm.Spec.Selector.MatchLabels, s.Labels) && slices.Contains(sm.Spec.NamespaceSelector.MatchNames, s.Namespace) {
			selected = append(selected, s)
		}
	}
	if len(selected) != 1 || selected[0].Name != "floodgate" {
		t.Fatalf("the ServiceMonitor selects %d Services, want only floodgate", len(selected))
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	i := slices.IndexFunc(selected[0].Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
	if i < 0 || selected[0].Spec.Ports[i].TargetPort.String() != "admin" || ep.Path != "/metrics" {
		t.Errorf("endpoint port %q path %q: want the Service port targeting admin, /metrics", ep.Port, ep.Path)
	}
}

// Prometheus writes `up` for every target it scrapes (documentation: "Jobs and instances",
// automatically generated series); Floodgate does not export it.
var synthesized = map[string]bool{"up": true}

// TestEveryMetricNamedIsExported runs `floodgate serve` on a real redis-server, drives allowed,
// denied, shadow, unmatched and keyless Checks, allowed, denied and shadow rate limit service
// requests (rls.config), a reload and a rejected reload through it, then kills Redis and drives
// degraded Checks until the breaker opens; every metric a rule or a panel names must then be on
// /metrics (histograms by their _bucket, _sum and _count series), or be recorded by a rule.
func TestEveryMetricNamedIsExported(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	cfgPath, rlsPath := filepath.Join(dir, "floodgate.yaml"), filepath.Join(dir, "ratelimit.yaml")
	if err := os.WriteFile(rlsPath, []byte(rlsLimits), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
rls: {config: %q}
store:
  backend: redis
  redis: {addresses: ["%s"], timeout: 50ms}
  on_failure: local
  breaker: {failures: 2, open_for: 1m}
reload: {watch: false}
policies:
  - name: per-key
    match: {path_prefix: /api/}
    key: [header:x-api-key]
    capacity: 2
    refill_per_second: 1/60
  - name: trial
    match: {path_prefix: /api/}
    key: [header:x-api-key]
    capacity: 1
    refill_per_second: 1/60
    mode: shadow
`, rlsPath, srv.Addr)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, cfgPath)

	key := map[string]string{"x-api-key": "k1"}
	for i := 0; i < 4; i++ {
		want := i < 2
		if got := p.allowed(t, "/api/items", key); got != want {
			t.Fatalf("Check %d: allowed %v, want %v", i+1, got, want)
		}
	}
	for i := 0; i < 3; i++ { // the rate limit service: 2 allowed, 1 denied, and a shadow limit's would-be denials
		want := i < 2
		if got := p.shouldRateLimit(t, "api_key", "k1"); got != want {
			t.Fatalf("ShouldRateLimit %d: allowed %v, want %v", i+1, got, want)
		}
	}
	p.allowed(t, "/api/items", nil)      // no x-api-key: the shared bucket
	p.allowed(t, "/elsewhere", key)      // no policy matches
	p.Cmd.Process.Signal(syscall.SIGHUP) // a reload of the same file
	p.waitMetric(t, "floodgate_config_reloads_total", 1)
	if err := os.WriteFile(cfgPath, []byte("policies: [oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Cmd.Process.Signal(syscall.SIGHUP) // rejected
	p.waitMetric(t, "floodgate_config_reload_failures_total", 1)

	srv.Kill()
	for i := 0; i < 10 && p.metric(t, "floodgate_breaker_state") != 2; i++ {
		p.allowed(t, "/api/items", map[string]string{"x-api-key": fmt.Sprintf("down-%d", i)})
	}
	families := p.scrape(t)
	for _, want := range []string{"floodgate_breaker_state", "floodgate_fallback_decisions_total"} {
		if value(families[want]) == 0 {
			t.Fatalf("%s is 0 after Redis went away: the degraded traffic did not happen\n%s", want, p.Output())
		}
	}

	recorded := map[string]bool{}
	for _, g := range loadRules(t).Spec.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	exported := func(name string) bool {
		if f, ok := families[name]; ok {
			return f.GetType() != dto.MetricType_HISTOGRAM
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if f, ok := families[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM {
					return true
				}
			}
		}
		return false
	}
	seen := map[string]bool{}
	for at, e := range expressions(t) {
		names, err := metricNames(e)
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		for _, n := range names {
			seen[n] = true
			if !exported(n) && !recorded[n] && !synthesized[n] {
				t.Errorf("%s names %s, which floodgate serve does not export", at, n)
			}
		}
	}
	// The check can fail: a misspelt name and a bare histogram name are not exported.
	if exported("floodgate_check_total") || exported("floodgate_check_duration_seconds") || !exported("floodgate_check_duration_seconds_bucket") {
		t.Fatal("exported() accepts a name that is not a series")
	}
	if !seen["floodgate_identity_missing_total"] || !seen["floodgate_breaker_state"] {
		t.Error("the dashboard or rules lost the identity fall-back or breaker metrics")
	}
	for _, m := range []string{"floodgate_rls_requests_total", "floodgate_rls_decisions_total", "floodgate_rls_store_errors_total"} {
		if !seen[m] {
			t.Errorf("the dashboard and rules name no %s", m)
		}
	}
	if v := families["floodgate_rls_decisions_total"]; value(v) != 6 {
		t.Errorf("floodgate_rls_decisions_total: %v, want 6 (3 requests of 2 limits)", v)
	}
}

func value(f *dto.MetricFamily) float64 {
	sum := 0.0
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// serveProc is a running `floodgate serve`.
type serveProc struct{ *floodgatetest.Process }

func (p *serveProc) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + p.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return fams
}

func (p *serveProc) metric(t *testing.T, name string) float64 {
	t.Helper()
	return value(p.scrape(t)[name])
}

// waitMetric polls /metrics (bounded) until name reaches want.
func (p *serveProc) waitMetric(t *testing.T, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.metric(t, name) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach %v within 10s\n%s", name, want, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// startServe runs `floodgate serve --config cfg` and waits (at most 15s) for its "serving" log
// line, which names the addresses it bound.
func startServe(t *testing.T, cfg string) *serveProc {
	t.Helper()
	bin := floodgatetest.Floodgate(t, floodgatetest.Build{})
	return &serveProc{floodgatetest.Start(t, bin, "serve", "--config", cfg, "--log-format", "json")}
}

// rlsLimits are the rate limit service's limits of TestEveryMetricNamedIsExported, in
// envoyproxy/ratelimit's format: an enforced limit and a shadow one.
const rlsLimits = `domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 2, name: per-key}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// shouldRateLimit sends one ShouldRateLimit in domain edge with one descriptor, as Envoy's rate
// limit filter sends it, and reports whether it was answered OK.
func (p *serveProc) shouldRateLimit(t *testing.T, key, val string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(p.Conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: val}}},
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "shadow", Value: val}}},
		}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.OverallCode == rlsv3.RateLimitResponse_OK
}

// allowed sends one HTTP Check, as Envoy sends it, and reports whether it was allowed.
func (p *serveProc) allowed(t *testing.T, path string, headers map[string]string) bool {
	t.Helper()
	h := map[string]string{":method": "GET", ":path": path, ":authority": "api.example.com"}
	for k, v := range headers {
		h[k] = v
	}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "203.0.113.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: path, Host: "api.example.com", Scheme: "http", Protocol: "HTTP/1.1", Headers: h,
		}},
	}}
	return p.Check(t, req).GetStatus().GetCode() == 0
}

// checkLatencyThreshold: FloodgateCheckLatencyNearTimeout fires below Envoy's ext_authz timeout
// in every shipped front end (gateway SecurityPolicy, Istio provider), and not far below it.
func checkLatencyThreshold(t *testing.T) {
	t.Helper()
	var threshold float64
	for _, g := range loadRules(t).Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "FloodgateCheckLatencyNearTimeout" {
				continue
			}
			e, err := promql.ParseExpr(r.Expr.String())
			if err != nil {
				t.Fatal(err)
			}
			parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
				if nl, ok := n.(*parser.NumberLiteral); ok {
					threshold = nl.Val
				}
				return nil
			})
		}
	}
	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	timeouts := map[string]time.Duration{}
	for _, sp := range all[*egv1a1.SecurityPolicy](b) {
		if sp.Spec.ExtAuth != nil && sp.Spec.ExtAuth.Timeout != nil {
			timeouts["SecurityPolicy "+sp.Name], _ = time.ParseDuration(string(*sp.Spec.ExtAuth.Timeout))
		}
	}
	for _, ep := range b.mesh.GetExtensionProviders() {
		if g := ep.GetEnvoyExtAuthzGrpc(); g != nil {
			timeouts["Istio provider "+ep.GetName()] = g.GetTimeout().AsDuration()
		}
	}
	if len(timeouts) < 2 {
		t.Fatalf("found the ext_authz timeouts of %v only", timeouts)
	}
	for at, to := range timeouts {
		if s := to.Seconds(); threshold >= s || threshold < s/2 {
			t.Errorf("FloodgateCheckLatencyNearTimeout fires at %vs; %s times out at %v: want a threshold in [timeout/2, timeout)", threshold, at, to)
		}
	}
}

// TestNoChecksWatchesEachAPIOnItsOwn: FloodgateNoChecks has, for each API
// (floodgate_checks_total, floodgate_rls_requests_total), a branch of its
// `or` that reads that API alone and labels the alert with it, so that one
// API stopping while the other goes on still fires; and one that fires
// when neither is called.
func TestNoChecksWatchesEachAPIOnItsOwn(t *testing.T) {
	var expr string
	for _, g := range loadRules(t).Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "FloodgateNoChecks" {
				expr = r.Expr.String()
			}
		}
	}
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Fatalf("FloodgateNoChecks: %v", err)
	}
	var branches []parser.Expr
	var split func(parser.Expr)
	split = func(e parser.Expr) {
		if p, ok := e.(*parser.ParenExpr); ok {
			split(p.Expr)
			return
		}
		if b, ok := e.(*parser.BinaryExpr); ok && b.Op == parser.LOR {
			split(b.LHS)
			split(b.RHS)
			return
		}
		branches = append(branches, e)
	}
	split(e)
	const checks, rls = "floodgate_checks_total", "floodgate_rls_requests_total"
	found := map[string]string{}
	for _, b := range branches {
		names, err := metricNames(b.String())
		if err != nil {
			t.Fatal(err)
		}
		api := ""
		if c, ok := b.(*parser.Call); ok && c.Func.Name == "label_replace" && len(c.Args) == 5 && c.Args[1].String() == `"api"` {
			api = strings.Trim(c.Args[2].String(), `"`)
		}
		switch {
		case slices.Contains(names, checks) && slices.Contains(names, rls):
			found["both"] = api
		case slices.Contains(names, checks):
			found[checks] = api
		case slices.Contains(names, rls):
			found[rls] = api
		}
	}
	for _, want := range []struct{ metric, api string }{{checks, "ext_authz"}, {rls, "ratelimit"}, {"both", "any"}} {
		if api, ok := found[want.metric]; !ok || api != want.api {
			t.Errorf("FloodgateNoChecks has no branch on %s alone labelled api=%q (branches: %v)", want.metric, want.api, branches)
		}
	}
}
