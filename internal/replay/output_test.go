package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/internal/doors"
)

func modelResult(t *testing.T) *Result {
	t.Helper()
	cfg, err := doors.Parse("model.yaml", []byte(modelConfig))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 11))
	var log strings.Builder
	for _, l := range shuffle(rng, generate(rng, 2000), 5*time.Second) {
		log.WriteString(l.text + "\n")
	}
	res, err := Run(context.Background(), strings.NewReader(log.String()), Options{Workers: 2, MaxLineBytes: DefaultMaxLineBytes, Engine: cfg.Engine, MaxBuckets: cfg.Store.Memory.MaxBuckets, ReorderWindow: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return res.Report(ReportOptions{Top: 3})
}

// TestTheHTMLReportIsWellFormedWithOneChartPerPolicy parses the report as
// XML (it is XHTML) and checks it holds one SVG chart per policy, each with
// the configured capacity marked, and nothing that loads or runs anything.
func TestTheHTMLReportIsWellFormedWithOneChartPerPolicy(t *testing.T) {
	res := modelResult(t)
	var buf bytes.Buffer
	if err := WriteHTML(&buf, "model.yaml", []Labeled{{Result: res}}); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.Strict = true
	dec.Entity = xml.HTMLEntity
	var charts []string
	var capacityMarks int
	var inText bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the report is not well-formed: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "script", "img", "link", "iframe", "object", "embed":
				t.Errorf("the report has a <%s>: it must be self-contained and run nothing", el.Name.Local)
			case "svg":
				for _, a := range el.Attr {
					if a.Name.Local == "data-policy" {
						charts = append(charts, a.Value)
					}
				}
			case "text":
				inText = true
			}
			for _, a := range el.Attr {
				if strings.HasPrefix(a.Value, "http") && a.Name.Local != "xmlns" && a.Name.Space != "xmlns" {
					t.Errorf("<%s %s=%q> refers to the network", el.Name.Local, a.Name.Local, a.Value)
				}
			}
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText && strings.HasPrefix(string(el), "capacity ") {
				capacityMarks++
			}
		}
	}
	var want []string
	for _, p := range res.Policies {
		want = append(want, p.Name)
	}
	if !slices.Equal(charts, want) {
		t.Errorf("charts for %v, want one per policy %v", charts, want)
	}
	if capacityMarks != len(want) {
		t.Errorf("%d capacity marks, want one per chart (%d)", capacityMarks, len(want))
	}
}

// TestTheJSONHasTheFixedFieldNames holds --json to the field names
// docs/replay.md documents.
func TestTheJSONHasTheFixedFieldNames(t *testing.T) {
	res := modelResult(t)
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"lines", "decided", "skipped", "late", "from", "to", "policies"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("no %q in %s", k, buf.String()[:200])
		}
	}
	p := doc["policies"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "mode", "requests", "allowed", "denied", "callers", "callers_denied", "capacity_needed", "top_denied"} {
		if _, ok := p[k]; !ok {
			t.Errorf("policy has no %q", k)
		}
	}
	for _, k := range []string{"p50", "p90", "p99", "max"} {
		if _, ok := p["capacity_needed"].(map[string]any)[k]; !ok {
			t.Errorf("capacity_needed has no %q", k)
		}
	}
	top := p["top_denied"].([]any)
	if len(top) != 3 {
		t.Fatalf("top_denied has %d callers, want --top 3", len(top))
	}
	for _, k := range []string{"caller", "requests", "denied"} {
		if _, ok := top[0].(map[string]any)[k]; !ok {
			t.Errorf("top_denied[0] has no %q", k)
		}
	}
}

// TestThePrintedLogFormatIsAValidEnvoyAccessLog reads the printed block with
// Envoy's own v3 schema (unknown fields are errors, the typed_config
// resolves and validates) and checks it logs exactly what the policies read.
func TestThePrintedLogFormatIsAValidEnvoyAccessLog(t *testing.T) {
	cfg, err := doors.Parse("model.yaml", []byte(modelConfig+`
  - name: by-claim
    match: {context: {route: search}, headers: [{name: x-tier, value: gold}]}
    key: ["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub", fingerprint]
    fingerprint_headers: [user-agent]
    capacity: 5
    refill_per_second: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	out := LogFormat(cfg.Engine, "model.yaml", DefaultLogPath)
	if !strings.Contains(out, "x-api-key") || !strings.Contains(out, "credentials") {
		t.Errorf("the block should warn that it logs x-api-key:\n%s", out)
	}
	js, err := yaml.YAMLToJSON([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(js, &list); err != nil || len(list) != 1 {
		t.Fatalf("want a list of one access log, got %s (%v)", js, err)
	}
	var al accesslogv3.AccessLog
	if err := protojson.Unmarshal(list[0], &al); err != nil {
		t.Fatalf("Envoy's schema refuses the block: %v\n%s", err, out)
	}
	if err := al.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	var block struct {
		TypedConfig struct {
			LogFormat struct {
				JSONFormat map[string]any `json:"json_format"`
			} `json:"log_format"`
		} `json:"typed_config"`
	}
	if err := json.Unmarshal(list[0], &block); err != nil {
		t.Fatal(err)
	}
	f := block.TypedConfig.LogFormat.JSONFormat
	hs := f["request_headers"].(map[string]any)
	var names []string
	for k, v := range hs {
		names = append(names, k)
		if v != "%REQ("+strings.ToUpper(k)+")%" {
			t.Errorf("request_headers.%s = %v", k, v)
		}
	}
	slices.Sort(names)
	if want := []string{"user-agent", "x-api-key", "x-cost", "x-forwarded-for", "x-tier"}; !slices.Equal(names, want) {
		t.Errorf("request_headers logs %v, want %v", names, want)
	}
	if f["start_time"] != "%START_TIME%" || f["downstream_remote_address"] != "%DOWNSTREAM_REMOTE_ADDRESS%" {
		t.Errorf("fixed fields wrong: %v", f)
	}
	// Only the claim the key reads, not the whole token's claims.
	want := map[string]any{"envoy.filters.http.jwt_authn": map[string]any{"jwt_payload": map[string]any{
		"sub": "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:jwt_payload:sub)%"}}}
	if md := f["metadata"]; !reflect.DeepEqual(md, want) {
		t.Errorf("metadata = %v, want %v", md, want)
	}
	if ctx := f["context_extensions"].(map[string]any); len(ctx) != 1 || ctx["route"] == nil {
		t.Errorf("context_extensions = %v", ctx)
	}
}

// TestTheLogFormatLogsOnlyTheMetadataPathsRead: paths in one namespace nest
// together, a path that is a prefix of another is logged whole, a step the
// operator cannot carry logs its namespace whole; a file path YAML would
// misread is quoted.
func TestTheLogFormatLogsOnlyTheMetadataPathsRead(t *testing.T) {
	cfg, err := doors.Parse("md.yaml", []byte(`store: {backend: memory}
policies:
  - {name: a, key: ["metadata:ns.one:claims.sub", "metadata:ns.one:claims.org.id", "metadata:ns.one:tenant"], capacity: 1, refill_per_second: 1}
  - {name: b, key: ["metadata:ns.one:claims.org", "metadata:ns.two:x%y"], capacity: 1, refill_per_second: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	const path = "/var/log/envoy/replay: #1.log"
	js, err := yaml.YAMLToJSON([]byte(LogFormat(cfg.Engine, "md.yaml", path)))
	if err != nil {
		t.Fatal(err)
	}
	var list []struct {
		TypedConfig struct {
			Path      string `json:"path"`
			LogFormat struct {
				JSONFormat map[string]any `json:"json_format"`
			} `json:"log_format"`
		} `json:"typed_config"`
	}
	if err := json.Unmarshal(js, &list); err != nil || len(list) != 1 {
		t.Fatalf("%s: %v", js, err)
	}
	if list[0].TypedConfig.Path != path {
		t.Errorf("path reads back as %q, want %q", list[0].TypedConfig.Path, path)
	}
	want := map[string]any{
		"ns.one": map[string]any{
			"claims": map[string]any{
				"sub": "%DYNAMIC_METADATA(ns.one:claims:sub)%",
				"org": "%DYNAMIC_METADATA(ns.one:claims:org)%",
			},
			"tenant": "%DYNAMIC_METADATA(ns.one:tenant)%",
		},
		"ns.two": "%DYNAMIC_METADATA(ns.two)%",
	}
	if got := list[0].TypedConfig.LogFormat.JSONFormat["metadata"]; !reflect.DeepEqual(got, want) {
		t.Errorf("metadata = %v\nwant %v", got, want)
	}
}

// TestTheHTMLChartsHaveNumericAxes: each chart labels its count axes with
// numbers (0, half and the tallest bar's count), its time axis with clock
// times and its capacity axis with tokens from 0; the callers' tables give
// each caller's capacity needed.
func TestTheHTMLChartsHaveNumericAxes(t *testing.T) {
	res := modelResult(t)
	var buf bytes.Buffer
	if err := WriteHTML(&buf, "model.yaml", []Labeled{{Result: res}}); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	charts := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(page, -1)
	if len(charts) != len(res.Policies) {
		t.Fatalf("%d charts for %d policies", len(charts), len(res.Policies))
	}
	ticks := func(svg, class string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`<text class="`+class+`"[^>]*>([^<]*)</text>`).FindAllStringSubmatch(svg, -1) {
			out = append(out, m[1])
		}
		return out
	}
	for i, p := range res.Policies {
		var top int64
		for _, n := range p.series.requests {
			top = max(top, n)
		}
		y := ticks(charts[i], "y-tick")
		if len(y) < 5 || !slices.Equal(y[:3], []string{"0", strconv.FormatInt(top/2, 10), strconv.FormatInt(top, 10)}) || y[3] != "0" {
			t.Errorf("%s: y ticks %v, want 0, %d, %d on the time panel, then the callers' counts from 0", p.Name, y, top/2, top)
		}
		x := ticks(charts[i], "x-tick")
		if len(x) != 6 || x[0] != clock(p.series.origin) || x[3] != "0" {
			t.Errorf("%s: x ticks %v, want three times from %s and three capacities from 0", p.Name, x, clock(p.series.origin))
		}
		if hi, err := strconv.ParseInt(x[5], 10, 64); err != nil || hi < p.CapacityNeeded.Max || hi < p.Capacity {
			t.Errorf("%s: the capacity axis ends at %q, before the capacity %d or the largest need %d", p.Name, x[5], p.Capacity, p.CapacityNeeded.Max)
		}
		for _, c := range p.TopDenied {
			row := fmt.Sprintf("<td>%d</td><td>%d</td><td>%d</td></tr>", c.Requests, c.Denied, c.CapacityNeeded)
			if !strings.Contains(page, row) {
				t.Errorf("%s: no row for %s with its capacity needed (%s)", p.Name, c.Caller, row)
			}
		}
	}
	if n := strings.Count(page, "<th>capacity needed</th>"); n < len(res.Policies) {
		t.Errorf("%d callers' tables have a capacity needed column, want one per policy at least", n)
	}
}

// TestTheComparisonHasEveryColumnOfTheTable: --compare prints the columns
// a single run prints (by other, callers, the denied share), and its set.
func TestTheComparisonHasEveryColumnOfTheTable(t *testing.T) {
	res := modelResult(t)
	var single, compared bytes.Buffer
	if err := res.WriteTable(&single); err != nil {
		t.Fatal(err)
	}
	if err := WriteComparison(&compared, []Labeled{{Result: res}, {Label: "api.capacity=9", Result: res}}, false); err != nil {
		t.Fatal(err)
	}
	fields := func(s string, n int) []string {
		return strings.Fields(strings.ReplaceAll(strings.Split(s, "\n")[n], "by other", "by-other"))
	}
	head, chead := fields(single.String(), 2), fields(compared.String(), 2)
	if want := slices.Insert(slices.Clone(head), 1, "set"); !slices.Equal(chead, want) {
		t.Errorf("comparison columns %v, want the table's with set: %v", chead, want)
	}
	for i, p := range res.Policies {
		row := fields(single.String(), 3+i)
		for j, label := range []string{"(configuration)", "api.capacity=9"} {
			want := slices.Insert(slices.Clone(row), 1, label)
			if got := fields(compared.String(), 3+2*i+j); !slices.Equal(got, want) {
				t.Errorf("%s, %s:\n got  %v\n want %v", p.Name, label, got, want)
			}
		}
		if p.Denied > 0 && !strings.Contains(strings.Join(row, " "), "%)") {
			t.Errorf("%s: no denied share in %v", p.Name, row)
		}
	}
}
