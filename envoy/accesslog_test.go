package envoy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/replay"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// accessLogIndent is where the shipped files put the entries of the http_connection_manager's
// access_log list.
const accessLogIndent = "                  "

// printedAccessLog is what `floodgate replay --config envoy/FILE --print-log-format --print-log-to -`
// prints for ex's Floodgate configuration.
func printedAccessLog(ex example, e *extauthz.Engine) string {
	return replay.LogFormat(e, "envoy/"+ex.floodgate, "-")
}

// TestTheShippedAccessLogIsTheOneReplayPrints: each shipped Envoy file's access_log list is
// exactly the block `floodgate replay --print-log-format --print-log-to -` prints for the Floodgate
// configuration beside it: the same text (comments included) and, decoded with Envoy's schema, the
// same and only entry, so every line Envoy writes is one replay reads.
func TestTheShippedAccessLogIsTheOneReplayPrints(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			ec, cfg := readExample(t, ex)
			src, err := os.ReadFile(ex.envoy)
			if err != nil {
				t.Fatal(err)
			}
			printed := printedAccessLog(ex, cfg.Engine)
			var indented strings.Builder
			for _, l := range strings.SplitAfter(printed, "\n") {
				if l != "" {
					indented.WriteString(accessLogIndent + l)
				}
			}
			if !strings.Contains(string(src), "access_log:\n"+indented.String()) {
				t.Errorf("%s: the access_log block is not what `floodgate replay --config envoy/%s --print-log-format --print-log-to -` prints; paste it again, indented under access_log:\n%s",
					ex.envoy, ex.floodgate, printed)
			}
			want := decodeAccessLogs(t, printed)
			got := ec.hcm.GetAccessLog()
			if len(got) != len(want) {
				t.Fatalf("%s: %d access loggers, want only the one replay reads (lines in another format would be skipped as malformed)", ex.envoy, len(got))
			}
			for i := range want {
				if !proto.Equal(got[i], want[i]) {
					t.Errorf("%s: access_log[%d] differs from the printed block:\n got %v\nwant %v", ex.envoy, i, got[i], want[i])
				}
			}
		})
	}
}

func decodeAccessLogs(t *testing.T, block string) []*accesslogv3.AccessLog {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict([]byte(block))
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	var out []*accesslogv3.AccessLog
	for _, r := range raw {
		al := &accesslogv3.AccessLog{}
		if err := protojson.Unmarshal(r, al); err != nil {
			t.Fatalf("the printed block does not decode: %v", err)
		}
		out = append(out, al)
	}
	return out
}

// envoyRequest is one request through a shipped route, as both ext_authz and the access log see
// it.
type envoyRequest struct {
	at       time.Time
	method   string
	path     string
	headers  map[string]string // lower-case names, as Envoy has them after the connection manager
	source   string            // the downstream peer, "IP:PORT"
	route    routeAuthz
	metadata map[string]*structpb.Struct // dynamic metadata (jwt_authn's claims)
}

var commandRE = regexp.MustCompile(`^%([A-Z_]+)(?:\(([^)]*)\))?%$`)

// formatLine writes the access-log line Envoy writes for r with the json_format f: each value
// is one command operator, a missing value is null, a struct stays an object.
//   - START_TIME: RFC 3339 in UTC with milliseconds (docs/root/configuration/observability/
//     access_log/usage.rst, the default format's example; source/common/formatter/
//     stream_info_formatter.cc).
//   - REQ(A?B): header A, else header B, else null (source/common/formatter/
//     http_specific_formatter.cc, HeaderFormatter).
//   - DOWNSTREAM_REMOTE_ADDRESS: the peer's address and port.
//   - METADATA(ROUTE:NS:K...): the matched route's metadata (source/extensions/formatter/metadata/
//     metadata.cc, RouteMetadataFormatter); DYNAMIC_METADATA(NS:K...): the request's dynamic
//     metadata (stream_info_formatter.cc, DynamicMetadataFormatter).
//   - DOWNSTREAM_PEER_URI_SAN: null (the examples take no client certificate).
//
// json_format keeps the operators' types and writes an absent value as null unless
// omit_empty_values is set (api/envoy/config/core/v3/substitution_format_string.proto).
func formatLine(t *testing.T, f *structpb.Struct, r envoyRequest) string {
	t.Helper()
	var value func(v *structpb.Value) any
	value = func(v *structpb.Value) any {
		if st := v.GetStructValue(); st != nil {
			m := map[string]any{}
			for k, x := range st.GetFields() {
				m[k] = value(x)
			}
			return m
		}
		m := commandRE.FindStringSubmatch(v.GetStringValue())
		if m == nil {
			t.Fatalf("json_format value %v is not one command operator: extend formatLine", v)
		}
		switch cmd, arg := m[1], m[2]; cmd {
		case "START_TIME":
			return r.at.UTC().Format("2006-01-02T15:04:05.000Z")
		case "REQ":
			for _, h := range strings.Split(arg, "?") {
				h = strings.ToLower(h)
				switch h {
				case ":method":
					return r.method
				case ":path":
					return r.path
				case ":authority":
					return "api.example.com"
				}
				if v, ok := r.headers[h]; ok {
					return v
				}
			}
			return nil
		case "DOWNSTREAM_REMOTE_ADDRESS":
			return r.source
		case "DOWNSTREAM_PEER_URI_SAN":
			return nil
		case "METADATA", "DYNAMIC_METADATA":
			parts := strings.Split(arg, ":")
			var md map[string]*structpb.Struct
			if cmd == "METADATA" {
				if parts[0] != "ROUTE" {
					t.Fatalf("%s: only ROUTE metadata is covered", v.GetStringValue())
				}
				parts = parts[1:]
				md = map[string]*structpb.Struct{}
				if r.route.metadata != nil {
					md["floodgate"] = r.route.metadata
				}
			} else {
				md = r.metadata
			}
			st := md[parts[0]]
			if st == nil {
				return nil
			}
			var cur any = st.AsMap()
			for _, p := range parts[1:] {
				obj, ok := cur.(map[string]any)
				if !ok {
					return nil
				}
				if cur, ok = obj[p]; !ok {
					return nil
				}
			}
			return cur
		}
		t.Fatalf("command %s is not covered by formatLine: extend it", m[0])
		return nil
	}
	out, err := json.Marshal(value(structpb.NewStructValue(f)))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestTheShippedAccessLogReplaysAsServed: requests through each shipped route (three callers
// behind one address, differing in what each policy keys on; limited and other methods; health
// checks on the route that skips Floodgate) are
// decided by floodgate's ext_authz server on an injected clock, and the lines Envoy would write
// for them with the shipped access log are replayed: replay must decide every request as serve
// did, and count the same allowed and denied per policy. A log that lacked a header, a claim or a
// route's policy selector would make replay merge callers, miss policies or decide nothing.
func TestTheShippedAccessLogReplaysAsServed(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			ec, cfg := readExample(t, ex)
			logger := ec.hcm.GetAccessLog()
			if len(logger) != 1 {
				t.Fatalf("%d access loggers, want 1", len(logger))
			}
			stdout := &streamv3.StdoutAccessLog{}
			if err := logger[0].GetTypedConfig().UnmarshalTo(stdout); err != nil {
				t.Fatalf("the access logger is not the stdout one: %v", err)
			}
			format := stdout.GetLogFormat().GetJsonFormat()
			routes, err := routesOf(ec)
			if err != nil {
				t.Fatal(err)
			}

			start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			var reqs []envoyRequest
			for _, r := range routes {
				if r.disabled {
					// Envoy never asks Floodgate here, but logs the request: replay must charge
					// it to no policy.
					for range 3 {
						reqs = append(reqs, envoyRequest{at: start.Add(time.Duration(len(reqs)) * 10 * time.Millisecond),
							method: "GET", path: r.path, route: r, source: "203.0.113.7:51544",
							headers: map[string]string{"x-forwarded-for": "203.0.113.7", "user-agent": "kube-probe/1.31"}})
					}
					continue
				}
				method, minCap := "GET", int64(1<<62)
				for _, pol := range cfg.Policies {
					if len(pol.Match.Context) > 0 && subset(pol.Match.Context, r.context) {
						if len(pol.Match.Methods) > 0 {
							method = pol.Match.Methods[0]
						}
						minCap = min(minCap, pol.Capacity)
					}
				}
				path := r.path
				if strings.HasSuffix(path, "/") {
					path += "items?page=2"
				}
				n := 3*int(minCap) + 6
				for i := range n {
					c := i % 3
					m := method
					if i%5 == 4 && method != "GET" {
						m = "GET" // a method the route's policy does not limit
					}
					claims, err := structpb.NewStruct(map[string]any{"jwt_payload": map[string]any{
						"iss": "https://issuer.floodgate.example", "sub": fmt.Sprintf("user-%d", c), "email": fmt.Sprintf("user-%d@example.com", c)}})
					if err != nil {
						t.Fatal(err)
					}
					reqs = append(reqs, envoyRequest{
						at:     start.Add(time.Duration(len(reqs)) * 10 * time.Millisecond),
						method: m, path: path, route: r, source: "203.0.113.7:51544",
						// The edge appends the peer to X-Forwarded-For (use_remote_address) before ext_authz.
						headers: map[string]string{"x-forwarded-for": "203.0.113.7", "x-api-key": fmt.Sprintf("key-%d", c),
							"user-agent": fmt.Sprintf("agent/%d", c), "x-ja4": fmt.Sprintf("t13d1516h2_%012d_02713d6af862", c)},
						metadata: map[string]*structpb.Struct{jwtFilter: claims},
					})
				}
			}

			clock := limiter.NewManualClock(start)
			srv := extauthz.NewServer(cfg.Engine, storetest.Memory(clock), extauthz.ServerOptions{})
			served := make([]bool, len(reqs))
			var log strings.Builder
			for i, r := range reqs {
				clock.Advance(r.at.Sub(clock.Now()))
				log.WriteString(formatLine(t, format, r) + "\n")
				if r.route.disabled {
					served[i] = true // ext_authz is off on this route
					continue
				}
				md := map[string]*structpb.Struct{}
				for _, ns := range ec.extAuthz.GetMetadataContextNamespaces() {
					if st, ok := r.metadata[ns]; ok {
						md[ns] = st
					}
				}
				req := checkRequest(r.method, r.path, r.route.context, r.headers, md)
				resp, err := srv.Check(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				served[i] = resp.GetStatus().GetCode() == 0
			}
			if !slices.Contains(served, false) {
				t.Fatal("serve denied nothing: the comparison needs denials")
			}

			replayed := map[int64]bool{}
			res, err := replay.Run(context.Background(), strings.NewReader(log.String()), replay.Options{Workers: 2, MaxLineBytes: replay.DefaultMaxLineBytes, Engine: cfg.Engine, MaxBuckets: cfg.Store.Memory.MaxBuckets,
				ReorderWindow: time.Minute, OnDecision: func(line int64, allowed bool) { replayed[line] = allowed }})
			if err != nil {
				t.Fatal(err)
			}
			if res.Decided != int64(len(reqs)) || res.Skipped != 0 {
				t.Fatalf("replay decided %d of %d lines, skipped %d:\n%s", res.Decided, len(reqs), res.Skipped, log.String())
			}
			for i, r := range reqs {
				if got, ok := replayed[int64(i+1)]; !ok || got != served[i] {
					t.Errorf("line %d (%s %s, route %s): replay allowed = %v (decided %v), serve %v\n%s",
						i+1, r.method, r.path, r.route.name, got, ok, served[i], strings.Split(log.String(), "\n")[i])
				}
			}
			res.Report(replay.ReportOptions{Top: 10})
			for _, p := range res.Policies {
				count := func(result string) int64 {
					return int64(testutil.ToFloat64(srv.Metrics().Decisions.WithLabelValues(p.Name, result)))
				}
				if a, d := count("allowed"), count("denied"); a != p.Allowed || d != p.Denied || a+d == 0 {
					t.Errorf("policy %s: serve allowed %d, denied %d; replay %d, %d", p.Name, a, d, p.Allowed, p.Denied)
				}
			}
		})
	}
}
