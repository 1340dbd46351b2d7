package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/door/ratelimit/xdsfeed"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/floodgatetest"
)

// bins are the floodgate and floodbench binaries, built once for the tests.
var bins struct{ floodgate, floodbench string }

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "floodbench-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bins.floodbench = filepath.Join(dir, "floodbench")
		if out, err := exec.Command(floodgatetest.Go(), "build", "-o", bins.floodbench, "github.com/floodgate/floodgate/cmd/floodbench").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building floodbench: %v\n%s", err, out)
			return 1
		}
		if bins.floodgate, err = (floodgatetest.Build{}).Path(); err != nil {
			fmt.Fprintln(os.Stderr, "building floodgate:", err)
			return 1
		}
		return floodgatetest.Main(m)
	}())
}

// TestSmoke runs the whole orchestrator with tiny cells: real redis-server,
// real floodgate and no-op server processes, real gRPC on loopback. It checks
// the table's shape and what the rows must say whatever the machine: every
// cell answered, (b) at most one script call per decision, (d) none.
func TestSmoke(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: the benchmark needs Redis >= 7.0 (apt-get install redis-server)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	err := Run(ctx, Options{
		Floodgate: bins.floodgate, Self: bins.floodbench, RedisServer: "redis-server",
		Scenarios: []string{"b", "d", "g", "b-rls", "b-xds", "b-http", "rt", "naive"}, Conc: []int{2}, Cell: 200 * time.Millisecond, Rounds: 2, Warmup: 100 * time.Millisecond,
		MaxCount: 100_000, Keys: 1000, Conns: 1, TraceDir: t.TempDir(),
	}, &out, &log)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, log.String())
	}
	t.Logf("\n%s", out.String())
	if !regexp.MustCompile(`\n\| \(b\) Redis, distinct keys +\| +2 \| +[1-9][0-9]* \| +[0-9.]+ \|`).MatchString(out.String()) {
		t.Errorf("no row of what (b)'s decisions wake, traced over its last round:\n%s", out.String())
	}
	if !strings.HasPrefix(out.String(), "machine: ") || !strings.Contains(out.String(), "CPUs (nproc)") {
		t.Errorf("the table does not start with the machine:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "\ncollector: floodgate and the no-op server both at GOGC=") {
		t.Errorf("the table does not say the servers' collector setting:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "\nsteadiness: a fixed CPU task (hashing 2 MiB) took ") || !strings.Contains(out.String(), "before each of the 2 rounds") {
		t.Errorf("no steadiness line for the run's 2 rounds:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "\nby round: ") || !strings.Contains(out.String(), "(b) Redis, distinct keys, conc 2, 2 rounds: server+Redis ×(a) ") {
		t.Errorf("no by-round line for (b)'s 2 rounds:\n%s", out.String())
	}
	rows := map[string]map[string]string{} // "(b)" → column → cell
	for label, r := range parseTable(t, out.String()) {
		if strings.HasPrefix(label, "(") && !strings.Contains(label, " @") {
			rows[label[:strings.IndexByte(label, ')')+1]] = r
		}
	}
	for _, id := range []string{"(a)", "(b)", "(d)", "(g)", "(a')", "(b-rls)", "(b-xds)", "(a-http)", "(b-http)"} {
		r, ok := rows[id]
		if !ok {
			t.Errorf("no row for %s:\n%s", id, out.String())
			continue
		}
		if rate, err := strconv.ParseFloat(r["decisions/s"], 64); err != nil || rate <= 0 {
			t.Errorf("%s: decisions/s %q, want a positive rate", id, r["decisions/s"])
		}
		if r["errors"] != "0" {
			t.Errorf("%s: errors %q, want 0", id, r["errors"])
		}
		for _, col := range []string{"server+Redis ×(a)", "server ×(a)", "rate ×(a)", "p99 ×(a)", "Redis µs/dec", "server µs/dec", "server+Redis µs/dec", "client µs/dec"} {
			if n, err := strconv.ParseFloat(r[col], 64); err != nil || n < 0 {
				t.Errorf("%s: %s is %q, want a number", id, col, r[col])
			}
		}
	}
	// The counters are read around the window, so a call in flight at either
	// edge may be counted on one side only: allow a little slack.
	// Concurrent decisions may share a script call, so (b) makes at most one
	// per decision, and some.
	if r := rows["(b)"]; r != nil {
		if n, err := strconv.ParseFloat(r["scripts/dec"], 64); err != nil || n <= 0 || n > 1.1 {
			t.Errorf("(b): %s script calls per decision, want more than 0 and at most 1", r["scripts/dec"])
		}
	}
	// (g) decides on the cluster: its script calls and reads are counted
	// on the masters, and the table sets its Redis CPU against (b)'s.
	if r := rows["(g)"]; r != nil {
		if n, err := strconv.ParseFloat(r["scripts/dec"], 64); err != nil || n <= 0 || n > 1.1 {
			t.Errorf("(g): %s script calls per decision on the cluster's masters, want more than 0 and at most 1", r["scripts/dec"])
		}
	}
	if !strings.Contains(out.String(), "\nRedis Cluster (g) against one server (b)") || !strings.Contains(out.String(), "\n  conc 2: ") {
		t.Errorf("no cluster line:\n%s", out.String())
	}
	// (b-rls) decides in Redis like (b): every answer OK (errors 0 above),
	// and at most one script call per decision; (b-xds) too, on the limits
	// pushed over xDS (without them its answers would be OK and touch no
	// Redis).
	for _, id := range []string{"(b-rls)", "(b-xds)"} {
		if r := rows[id]; r != nil {
			if n, err := strconv.ParseFloat(r["scripts/dec"], 64); err != nil || n <= 0 || n > 1.1 {
				t.Errorf("%s: %s script calls per decision, want more than 0 and at most 1", id, r["scripts/dec"])
			}
		}
	}
	// (b-http) decides (b)'s callers through the HTTP door: every answer a
	// 200 (errors 0 above), at most one script call per decision, and a
	// line against (a-http) and (b); (a-http) touches no Redis.
	if r := rows["(b-http)"]; r != nil {
		if n, err := strconv.ParseFloat(r["scripts/dec"], 64); err != nil || n <= 0 || n > 1.1 {
			t.Errorf("(b-http): %s script calls per decision, want more than 0 and at most 1", r["scripts/dec"])
		}
	}
	if r := rows["(a-http)"]; r != nil && r["scripts/dec"] != "0.00" {
		t.Errorf("(a-http): %s script calls per request, want none", r["scripts/dec"])
	}
	if !strings.Contains(out.String(), "\nfloodgate's HTTP authorization door (b-http) against the no-op HTTP server (a-http) and against Check (b)") {
		t.Errorf("no HTTP door comparison:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "\nfloodgate's rate limit service (b-rls) against its Check path (b)") {
		t.Errorf("no rate limit service comparison:\n%s", out.String())
	}
	// (rt) and (naive) are the load generator's own script calls: exactly
	// one per call, no server process, answered as expected.
	for _, id := range []string{"(rt)", "(naive)"} {
		r, ok := rows[id]
		if !ok {
			t.Errorf("no row for %s:\n%s", id, out.String())
			continue
		}
		if r["errors"] != "0" || r["server µs/dec"] != "-" {
			t.Errorf("%s: errors %q, server µs/dec %q; want 0 and -", id, r["errors"], r["server µs/dec"])
		}
		if n, err := strconv.ParseFloat(r["scripts/dec"], 64); err != nil || n < 0.9 || n > 1.1 {
			t.Errorf("%s: %s script calls per call, want 1", id, r["scripts/dec"])
		}
	}
	if _, l, ok := strings.Cut(out.String(), "\nlatency added over the baseline"); !ok || !strings.Contains(l, "\n| (b) Redis, distinct keys ") {
		t.Errorf("no added-latency table with (b):\n%s", out.String())
	}
	if !strings.Contains(out.String(), "\nRedis CPU per decision of (b) and (c) against the naive script's") {
		t.Errorf("no comparison with the naive script:\n%s", out.String())
	}
	if r := rows["(d)"]; r != nil {
		if n, err := strconv.ParseFloat(r["scripts/dec"], 64); err != nil || n > 0.05 {
			t.Errorf("(d): %s script calls per decision, want 0 (the over-limit cache answers)", r["scripts/dec"])
		}
	}
}

func TestStatusCodeReadsTheWireForm(t *testing.T) {
	for _, code := range []int32{0, 7, 8, 16} {
		b, err := proto.Marshal(&authv3.CheckResponse{Status: &rpcstatus.Status{Code: code, Message: "m"},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Body: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := statusCode(b); err != nil || got != code {
			t.Errorf("code %d read as %d, %v", code, got, err)
		}
	}
	if got, err := statusCode(nil); err != nil || got != 0 {
		t.Errorf("empty response read as %d, %v; want 0 (OK)", got, err)
	}
	if _, err := statusCode([]byte{0x0a, 0x05, 0x08}); err == nil {
		t.Error("a truncated response parsed without error")
	}
}

func TestOnlyLoopbackTargets(t *testing.T) {
	for _, target := range []string{"10.0.0.1:9191", "example.com:9191", "192.168.1.1:1"} {
		if c, err := dial(target, 1, ClientLean); err == nil {
			c.close()
			t.Errorf("dial(%s) accepted a non-loopback target", target)
		}
	}
}

// TestFloodgateConfigsParse: every floodgate instance the bench starts has
// a configuration floodgate accepts, with the store settings its rows claim.
func TestFloodgateConfigsParse(t *testing.T) {
	one, three := []string{"127.0.0.1:6379"}, []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}
	for _, tc := range []struct {
		server   string
		addrs    []string
		backend  string
		pipeline bool
		flushers int
	}{
		{"redis", one, "redis", true, config.DefaultPipelineFlushers},
		{"redis-nopipe", one, "redis", false, config.DefaultPipelineFlushers},
		{"redis-2flushers", one, "redis", true, 2},
		{"redis-cluster", three, "redis", true, config.DefaultPipelineFlushers},
		{"memory", nil, "memory", true, config.DefaultPipelineFlushers},
		{"redis-http", one, "redis", true, config.DefaultPipelineFlushers},
	} {
		y, err := floodgateConfig(tc.server, tc.addrs, 250, "")
		if err != nil {
			t.Fatalf("%s: %v", tc.server, err)
		}
		c, err := doors.Parse(tc.server+".yaml", []byte(y))
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.server, err, y)
		}
		r := c.Store.Redis
		if c.Store.Backend != tc.backend || *r.Pipeline != tc.pipeline || r.PipelineFlushers != tc.flushers {
			t.Errorf("%s: backend %s, pipeline %v, flushers %d; want %s, %v, %d", tc.server, c.Store.Backend, *r.Pipeline, r.PipelineFlushers, tc.backend, tc.pipeline, tc.flushers)
		}
		if tc.backend == "redis" && !slices.Equal(r.Addresses, tc.addrs) {
			t.Errorf("%s: addresses %v, want %v (several make a Cluster)", tc.server, r.Addresses, tc.addrs)
		}
		// Only (b-http)'s instance opens the HTTP door, as envoy/http/floodgate.yaml does.
		if h := c.HTTPAuthz; (c.Listen.HTTP != "") != (tc.server == "redis-http") || (tc.server == "redis-http" && (h.PathPrefix != httpPathPrefix || *h.TrustedHops != 1)) {
			t.Errorf("%s: listen.http %q, http_authz %+v", tc.server, c.Listen.HTTP, h)
		}
		// The no-op server's collector setting: GOGC 250 (its --gogc), no memory limit.
		if c.Runtime.GOGC == nil || *c.Runtime.GOGC != 250 || c.Runtime.MemoryLimitRatio == nil || *c.Runtime.MemoryLimitRatio != 0 {
			t.Errorf("%s: runtime %+v, want gogc 250 and memory_limit_ratio 0", tc.server, c.Runtime)
		}
	}
	if _, err := floodgateConfig("nonsense", nil, 400, ""); err == nil {
		t.Error("an unknown instance got a configuration")
	}
}

// TestRLSInstanceServesTheRatelimitConfig: (b-rls)'s floodgate is (b)'s
// with rls.config naming (r)'s configuration, and every request (r) sends
// selects (r)'s limit in it, which it passes: the two scenarios decide the
// same requests against the same limit.
func TestRLSInstanceServesTheRatelimitConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimit.yaml")
	if err := os.WriteFile(path, []byte(ratelimitConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	one := []string{"127.0.0.1:6379"}
	y, err := floodgateConfig("redis-rls", one, 250, path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := doors.Parse("redis-rls.yaml", []byte(y))
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if c.RLS.Config != path || c.Store.Backend != "redis" || !*c.Store.Redis.Pipeline || !slices.Equal(c.Store.Redis.Addresses, one) {
		t.Fatalf("rls.config %q, store %s %v pipeline %v; want %q on redis %v with pipelining, as (b)", c.RLS.Config, c.Store.Backend, c.Store.Redis.Addresses, *c.Store.Redis.Pipeline, path, one)
	}
	if err := doors.ReadFiles(c); err != nil {
		t.Fatal(err)
	}
	w := distinctRLS(50)
	for _, b := range w.reqs {
		var r rlsv3.RateLimitRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		for _, d := range r.GetDescriptors() {
			var entries []rls.Entry
			for _, e := range d.GetEntries() {
				entries = append(entries, rls.Entry{Key: e.GetKey(), Value: e.GetValue()})
			}
			l := ratelimit.Limits(c).Select(r.GetDomain(), entries)
			if l == nil || l.RequestsPerUnit != 1_000_000 || l.Unit.Seconds != 1 || l.Unlimited {
				t.Fatalf("%v selects %+v, want (r)'s 1000000 a second", &r, l)
			}
		}
	}
	// Without its limits the instance has no configuration.
	if _, err := floodgateConfig("redis-rls", one, 250, ""); err == nil {
		t.Error("redis-rls got a configuration without rls.config")
	}
	// (b-xds)'s instance takes the same limits over xDS, and waits for them.
	y, err = floodgateConfig("redis-xds", one, 250, "127.0.0.1:18000")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := doors.Parse("redis-xds.yaml", []byte(y)); err != nil || c.RLS.XDS == nil || c.RLS.XDS.Server != "127.0.0.1:18000" || c.RLS.XDS.NodeID != xdsNode || !c.RLS.XDS.WaitForFirstPush || c.RLS.Config != "" {
		t.Errorf("(b-xds)'s instance: %v, rls %+v; want rls.xds from 127.0.0.1:18000 for node %s, waiting for the first push", err, c.RLS, xdsNode)
	}
	// (b)'s own instance serves no rate limit service.
	y, err = floodgateConfig("redis", one, 250, path)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := doors.Parse("redis.yaml", []byte(y)); err != nil || c.RLS.Config != "" {
		t.Errorf("(b)'s instance: rls.config %q, err %v; want none", c.RLS.Config, err)
	}
}

// (b-rls) sends (r)'s requests (the same workload, built once) to its own
// floodgate instance and divides by (a'), like (r).
func TestRLSScenarioMirrorsRatelimit(t *testing.T) {
	f, r := mustScenario(t, "b-rls"), mustScenario(t, "r")
	if f.server != "redis-rls" || f.baseID() != "a'" || f.cache(1000) != r.cache(1000) {
		t.Fatalf("b-rls: server %s, base %s, cache %s; want redis-rls, a', %s", f.server, f.baseID(), f.cache(1000), r.cache(1000))
	}
	fw, rw := f.work(3), r.work(3)
	if fw.rpc() != rlsMethod || len(fw.reqs) != len(rw.reqs) {
		t.Fatalf("b-rls: method %s, %d requests", fw.rpc(), len(fw.reqs))
	}
	for i := range fw.reqs {
		if !bytes.Equal(fw.reqs[i], rw.reqs[i]) {
			t.Errorf("request %d differs from (r)'s", i)
		}
	}
}

func TestSteadiness(t *testing.T) {
	ms := time.Millisecond
	if got := (steadiness{}).String(); got != "not measured" {
		t.Errorf("no probes: %q", got)
	}
	if s := (steadiness{ms}); s.spread() != 0 {
		t.Errorf("one probe: spread %v, want 0", s.spread())
	}
	s := steadiness{ms, 5 * ms / 4, ms}
	if got := s.spread(); got < 0.2499 || got > 0.2501 {
		t.Errorf("spread of 1, 1.25, 1 ms: %v, want 0.25", got)
	}
	if got := s.String(); !strings.Contains(got, "took 1ms–1.25ms before each of the 3 rounds, a spread of 25%") {
		t.Errorf("String: %q", got)
	}
	if d := probe(); d <= 0 || d > 10*time.Second {
		t.Errorf("probe took %v", d)
	}
}

// TestProtoClientDoesProtobufsWork: with a message attached, the codec
// decodes and marshals every request (a damaged one fails, where the lean
// client would send it as it is) and decodes every answer whole.
func TestProtoClientDoesProtobufsWork(t *testing.T) {
	w := distinct("/b/", 3)
	req, resp := w.newMessages()
	in := &rawMsg{b: w.reqs[1], msg: req}
	out, err := rawCodec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &authv3.CheckRequest{}
	if err := proto.Unmarshal(w.reqs[1], want); err != nil {
		t.Fatal(err)
	}
	got := &authv3.CheckRequest{}
	if err := proto.Unmarshal(out.Materialize(), got); err != nil || !proto.Equal(got, want) {
		t.Errorf("the marshalled request differs from the workload's (%v):\n%v\nwant %v", err, got, want)
	}
	damaged := []byte{0x0a, 0x05, 0x08}
	if _, err := (rawCodec{}).Marshal(&rawMsg{b: damaged, msg: req}); err == nil {
		t.Error("a damaged request was marshalled: the proto client did not decode it")
	}
	if _, err := (rawCodec{}).Marshal(&rawMsg{b: damaged}); err != nil {
		t.Errorf("the lean client decoded a request it should pass through: %v", err)
	}

	answer, err := proto.Marshal(&authv3.CheckResponse{Status: &rpcstatus.Status{Code: 8, Message: "over"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &rawMsg{msg: resp}
	if err := (rawCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(answer)}, r); err != nil {
		t.Fatal(err)
	}
	if code := r.msg.(*authv3.CheckResponse).GetStatus().GetCode(); code != 8 {
		t.Errorf("decoded answer's status code %d, want 8", code)
	}
	if ok, err := w.answer(r.b); err != nil || ok {
		t.Errorf("the answer's bytes read as allowed=%v (%v), want a denial", ok, err)
	}
}

// TestProtoClientDrivesAServer: the proto client over a real gRPC
// connection, to an in-process no-op server: every call answered as
// expected.
func TestProtoClientDrivesAServer(t *testing.T) {
	addr := extauthztest.Serve(t, noopServer{}).Target()
	c, err := dial(addr, 1, ClientProto)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	r := c.drive(context.Background(), distinct("/b/", 100), cell{conc: 4, window: 200 * time.Millisecond, maxCount: 2000, rpcTimeout: 5 * time.Second})
	if r.decisions == 0 || r.rpcErrors != 0 || r.unexpected != 0 {
		t.Errorf("%d decisions, %d RPC errors (first: %v), %d unexpected; want some, none, none", r.decisions, r.rpcErrors, r.firstErr, r.unexpected)
	}
	if _, err := dial(addr, 1, "fat"); err == nil {
		t.Error("dial accepted an unknown client kind")
	}
}

// TestXDSLimitsAreTheFilesLimits: what (b-xds)'s management server pushes
// is, rendered as floodgate renders a push (xdsfeed.Render), the YAML
// (b-rls) reads from its file, so the two rows decide against one limit
// (the unit's case aside: Render writes the enum's name, SECOND, which the
// rate limit files read as the peer does, in any case).
func TestXDSLimitsAreTheFilesLimits(t *testing.T) {
	pushed, notes := xdsfeed.Render(xdsLimits())
	if len(notes) > 0 {
		t.Fatalf("the push renders with notes: %v", notes)
	}
	var got, want any
	if err := yaml.Unmarshal(bytes.ToLower(pushed), &got); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(ratelimitConfig), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pushed limits render as\n%s\nwant ratelimitConfig:\n%s", pushed, ratelimitConfig)
	}
}
