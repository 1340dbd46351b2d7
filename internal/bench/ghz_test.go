package bench

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The protoset handed to ghz must stand alone: every import present, so that
// the Check method and its request type resolve from the set by itself.
func TestProtosetResolvesCheck(t *testing.T) {
	set := benchProtoset()
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("protoset does not stand alone: %v", err)
	}
	d, err := files.FindDescriptorByName("envoy.service.auth.v3.Authorization.Check")
	if err != nil {
		t.Fatalf("Check not in the protoset: %v", err)
	}
	m := d.(protoreflect.MethodDescriptor)
	if got := m.Input().FullName(); got != "envoy.service.auth.v3.CheckRequest" {
		t.Fatalf("Check's input is %s", got)
	}
	if _, err := files.FindDescriptorByName("envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit"); err != nil {
		t.Fatalf("ShouldRateLimit not in the protoset: %v", err)
	}
	for w, want := range map[*workload]string{
		{}:                  "envoy.service.auth.v3.Authorization.Check",
		{method: rlsMethod}: "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit",
	} {
		if got := ghzCall(*w); got != want {
			t.Errorf("ghz call %q, want %q", got, want)
		}
		if _, err := files.FindDescriptorByName(protoreflect.FullName(want)); err != nil {
			t.Errorf("%s: %v", want, err)
		}
	}
	// Dependencies first: each file's imports appear before it.
	seen := map[string]bool{}
	for _, f := range set.File {
		for _, dep := range f.Dependency {
			if !seen[dep] {
				t.Fatalf("%s comes before its import %s", f.GetName(), dep)
			}
		}
		seen[f.GetName()] = true
	}
}

// ghz reads several binary messages as varint-length-prefixed ones: the file
// must decode back to the same requests, in order.
func TestDelimitedRoundTrip(t *testing.T) {
	w := distinct("/b/", 50)
	r := bufio.NewReader(bytes.NewReader(delimited(w.reqs)))
	for i, want := range w.reqs {
		var got authv3.CheckRequest
		if err := (protodelim.UnmarshalOptions{MaxSize: -1}).UnmarshalFrom(r, &got); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var wantMsg authv3.CheckRequest
		if err := proto.Unmarshal(want, &wantMsg); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, &wantMsg) {
			t.Fatalf("request %d differs after the round trip", i)
		}
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("bytes left after the last request")
	}
}

// A ghz JSON report (its shape as ghz -O json writes it) becomes a result:
// OK calls are decisions with their latencies, anything else an RPC error.
func TestGhzResult(t *testing.T) {
	report := `{"date":"2026-11-29T21:00:00Z","count":4,"total":2000000000,"rps":2,
	"details":[
	 {"timestamp":"2026-11-29T21:00:00Z","latency":3000000,"error":"","status":"OK"},
	 {"timestamp":"2026-11-29T21:00:00Z","latency":1000000,"error":"","status":"OK"},
	 {"timestamp":"2026-11-29T21:00:01Z","latency":2000000,"error":"","status":"OK"},
	 {"timestamp":"2026-11-29T21:00:01Z","latency":9000000,"error":"rpc error: code = Unavailable desc = x","status":"Unavailable"}]}`
	r, err := ghzResult([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if r.decisions != 3 || r.rpcErrors != 1 || r.window != 2*time.Second {
		t.Fatalf("decisions %d, errors %d, window %v; want 3, 1, 2s", r.decisions, r.rpcErrors, r.window)
	}
	if r.p50 != 2*time.Millisecond || r.p99 != 3*time.Millisecond {
		t.Fatalf("p50 %v p99 %v; want 2ms 3ms (errors carry no latency)", r.p50, r.p99)
	}
	if r.firstErr == nil || !strings.Contains(r.firstErr.Error(), "Unavailable") {
		t.Fatalf("first error %v", r.firstErr)
	}
	if _, err := ghzResult([]byte(`{"count":2,"details":[]}`)); err == nil {
		t.Fatal("a report without its details was accepted")
	}
}

// make bench-tools installs the versions floodbench names.
func TestMakefilePinsTools(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"github.com/bojand/ghz/cmd/ghz@" + ghzVersion,
		"github.com/envoyproxy/ratelimit/src/service_cmd@" + ratelimitVersion,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Makefile does not install %s", want)
		}
	}
}

// (r)'s requests are what Envoy's rate-limit filter sends, one distinct API
// key each, and its answers are read from overall_code.
func TestRatelimitWorkload(t *testing.T) {
	w := distinctRLS(3)
	if w.rpc() != rlsMethod || !w.allow {
		t.Fatalf("method %q allow %v", w.rpc(), w.allow)
	}
	seen := map[string]bool{}
	for _, b := range w.reqs {
		var r rlsv3.RateLimitRequest
		if err := proto.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		e := r.GetDescriptors()[0].GetEntries()[0]
		if r.GetDomain() != "floodbench" || e.GetKey() != "api_key" || r.GetHitsAddend() != 1 || seen[e.GetValue()] {
			t.Fatalf("request %v", &r)
		}
		seen[e.GetValue()] = true
	}
	for code, want := range map[rlsv3.RateLimitResponse_Code]bool{rlsv3.RateLimitResponse_OK: true, rlsv3.RateLimitResponse_OVER_LIMIT: false} {
		b, _ := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: code, LimitRemaining: 5}}})
		got, err := w.answer(b)
		if err != nil || got != want {
			t.Errorf("%v: allowed %v err %v, want %v", code, got, err, want)
		}
	}
	if _, err := w.answer(nil); err == nil {
		t.Error("an answer without overall_code (UNKNOWN) was read as a decision")
	}
	// An ext_authz workload still reads CheckResponse.status.
	if ok, err := distinct("/b/", 1).answer(nil); err != nil || !ok {
		t.Errorf("empty CheckResponse: allowed %v err %v, want allowed", ok, err)
	}
}

// (r) needs envoyproxy/ratelimit's binary: without --ratelimit the run stops
// before it starts anything, saying what to install.
func TestRatelimitNeedsItsBinary(t *testing.T) {
	var log bytes.Buffer
	err := Run(t.Context(), Options{Floodgate: "/nonexistent", RedisServer: "redis-server",
		Scenarios: []string{"a", "r"}, Conc: []int{1}, Cell: time.Second, Rounds: 1, MaxCount: 1, Keys: 1, Conns: 1}, &log, &log)
	if err == nil || !strings.Contains(err.Error(), "--ratelimit") || !strings.Contains(err.Error(), ratelimitVersion) {
		t.Fatalf("err %v", err)
	}
}

// (r)'s ratios divide by (a'), the no-op server on the rate-limit API, the
// others' by (a).
func TestRatiosDivideByTheRowsBaseline(t *testing.T) {
	res := func(n int64) result {
		return result{decisions: n, window: time.Second, p99: time.Duration(n) * time.Microsecond}
	}
	mk := func(id string, n int64) row {
		return row{sc: mustScenario(t, id), conc: 8, res: res(n)}
	}
	var out bytes.Buffer
	printTable(&out, Options{}, "m", nil, []row{mk("a", 1000), mk("b", 500), mk("a'", 2000), mk("r", 500)})
	table := parseTable(t, out.String())
	for label, want := range map[string]string{"(b) Redis, distinct keys": "0.50", "(r) envoyproxy/ratelimit, Redis, distinct keys": "0.25"} {
		r := table[label]
		if r == nil {
			t.Fatalf("no row %q in\n%s", label, out.String())
		}
		if r["rate ×(a)"] != want || r["p99 ×(a)"] != want {
			t.Errorf("%s: rate and p99 ratios %q and %q, want %s", label, r["rate ×(a)"], r["p99 ×(a)"], want)
		}
	}
}

// parseTable reads the first Markdown table in out: label → column → cell.
func parseTable(t *testing.T, out string) map[string]map[string]string {
	t.Helper()
	var header []string
	rows := map[string]map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| ") {
			if header != nil && len(rows) > 0 {
				break
			}
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		if header == nil {
			header = cells
			continue
		}
		if strings.HasPrefix(cells[0], "-") {
			continue
		}
		if len(cells) != len(header) {
			t.Fatalf("row %q has %d cells, the header %d", line, len(cells), len(header))
		}
		r := map[string]string{}
		for i, c := range cells {
			r[header[i]] = c
		}
		rows[cells[0]+" @"+r["conc"]] = r
		rows[cells[0]] = r
	}
	return rows
}

// The headline is what a decision costs on the server side (the serving
// process and Redis) over the no-op server's CPU per Check at the same
// concurrency; it is the first ratio column, the serving process' own ratio
// and the rate ratio after it. Pure arithmetic on rows: no timing.
func TestHeadlineColumns(t *testing.T) {
	// decisions n over one second; server and Redis CPU in seconds.
	mk := func(id string, conc int, n int64, server, redis float64) row {
		return row{sc: mustScenario(t, id), conc: conc, res: result{decisions: n, window: time.Second, p99: time.Millisecond},
			serverCPU: server, redis: redisStats{cpu: redis, scripts: n / 10, reads: n / 12}}
	}
	rows := []row{
		// (a): 30 µs per Check at conc 64, 40 at conc 16.
		mk("a", 64, 30000, 0.9, 0.001), mk("a", 16, 20000, 0.8, 0),
		// (b): floodgate 36 µs, Redis 5 µs per decision at 64 → 41/30.
		mk("b", 64, 20000, 0.72, 0.1), mk("b", 16, 10000, 0.5, 0.08),
		// (e): no Redis work, 30 µs → 1.00.
		mk("e", 64, 30000, 0.9, 0),
		// (a') 20 µs, (r) 90 µs + Redis 15 µs → 105/20.
		mk("a'", 64, 40000, 0.8, 0), mk("r", 64, 10000, 0.9, 0.15),
	}
	cells := tableRows(rows)
	header := cells[0]
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	firstRatio := -1
	for i, h := range header {
		if strings.Contains(h, "×") {
			firstRatio = i
			break
		}
	}
	if firstRatio < 0 || header[firstRatio] != "server+Redis ×(a)" || header[firstRatio+1] != "server ×(a)" || header[firstRatio+2] != "rate ×(a)" {
		t.Fatalf("ratio columns %v: want server+Redis ×(a), server ×(a), rate ×(a) first", header)
	}
	get := func(label string, conc int) []string {
		for _, c := range cells[1:] {
			if strings.HasPrefix(c[0], label) && c[col["conc"]] == strconv.Itoa(conc) {
				return c
			}
		}
		t.Fatalf("no row %s at %d", label, conc)
		return nil
	}
	for _, tc := range []struct {
		label                                  string
		conc                                   int
		total, server, rate, perDec, redisPerD string
	}{
		{"(a)", 64, "1", "1", "1", "30.0", "0.0"},
		{"(a')", 64, "1", "1", "1", "20.0", "0.0"},
		{"(b)", 64, "1.37", "1.20", "0.67", "41.0", "5.0"},
		{"(b)", 16, "1.45", "1.25", "0.50", "58.0", "8.0"},
		{"(e)", 64, "1.00", "1.00", "1.00", "30.0", "0.0"},
		{"(r)", 64, "5.25", "4.50", "0.25", "105.0", "15.0"},
	} {
		c := get(tc.label, tc.conc)
		got := [5]string{c[col["server+Redis ×(a)"]], c[col["server ×(a)"]], c[col["rate ×(a)"]], c[col["server+Redis µs/dec"]], c[col["Redis µs/dec"]]}
		want := [5]string{tc.total, tc.server, tc.rate, tc.perDec, tc.redisPerD}
		if got != want {
			t.Errorf("%s at %d: headline, server, rate ratios, server+Redis and Redis µs/dec %v, want %v", tc.label, tc.conc, got, want)
		}
	}
	// Redis' counters unreadable: no headline, but the server's own ratio.
	b := mk("b", 64, 20000, 0.72, 0.1)
	b.rerr = errors.New("INFO failed")
	if q := rowRatios(b, rows[0]); q.total != "?" || q.server != "1.20" {
		t.Errorf("without Redis' counters: %+v, want total ? and server 1.20", q)
	}
	// No baseline measured: nothing divides.
	if q := rowRatios(rows[2], row{sc: scenario{id: "a"}}); q.total != "?" || q.server != "?" || q.rate != "?" {
		t.Errorf("without a baseline: %+v", q)
	}
}

// floodgate against envoyproxy/ratelimit: Redis CPU per decision and the
// server side's (the service plus Redis), each (b) over (r), at every
// concurrency where both ran; no table without (r).
func TestPeerRows(t *testing.T) {
	mk := func(id string, conc int, n int64, server, redis float64) row {
		return row{sc: mustScenario(t, id), conc: conc, res: result{decisions: n, window: time.Second}, serverCPU: server, redis: redisStats{cpu: redis}}
	}
	if p := peerRows([]row{mk("a", 50, 1000, 0.05, 0), mk("b", 50, 1000, 0.05, 0.016)}); p != nil {
		t.Fatalf("a peer table without (r): %v", p)
	}
	p := peerRows([]row{
		mk("a", 50, 7000, 0.32, 0), mk("b", 50, 5000, 0.27, 0.06), mk("e", 50, 6000, 0.3, 0),
		mk("a'", 50, 10000, 0.36, 0), mk("r", 50, 5000, 0.5, 0.075),
		mk("b", 64, 5000, 0.2, 0.05), // no (r) at 64: no row
	})
	if len(p) != 2 {
		t.Fatalf("peer rows %v, want the header and one row (conc 50)", p)
	}
	want := []string{"50", "12.0", "15.0", "0.80", "66.0", "115.0", "0.57"}
	if strings.Join(p[1], " ") != strings.Join(want, " ") {
		t.Errorf("conc 50: %v, want %v", p[1], want)
	}
	var out bytes.Buffer
	printTable(&out, Options{}, "m", nil, []row{mk("a", 50, 7000, 0.32, 0), mk("b", 50, 5000, 0.27, 0.06), mk("a'", 50, 10000, 0.36, 0), mk("r", 50, 5000, 0.5, 0.075)})
	if !strings.Contains(out.String(), "floodgate (b) against envoyproxy/ratelimit (r)") || !strings.Contains(out.String(), " 0.57 |") {
		t.Errorf("the printed table lacks the peer comparison:\n%s", out.String())
	}
}

// floodgate's rate limit service against its Check path and against
// envoyproxy/ratelimit: server+Redis CPU per decision, the two ratios and
// whether each meets its target; "-" where the other did not run; no table
// without (b-rls). Pure arithmetic on rows.
func TestRLSRows(t *testing.T) {
	mk := func(id string, conc int, n int64, server, redis float64) row {
		return row{sc: mustScenario(t, id), conc: conc, res: result{decisions: n, window: time.Second}, serverCPU: server, redis: redisStats{cpu: redis}}
	}
	if p := rlsRows([]row{mk("b", 64, 1000, 0.05, 0.01), mk("r", 64, 1000, 0.1, 0.02)}); p != nil {
		t.Fatalf("a rate limit service table without (b-rls): %v", p)
	}
	p := rlsRows([]row{
		// conc 64: (b) 40 µs, (b-rls) 42 µs (1.05, met), (r) 100 µs (0.42, met).
		mk("a", 64, 10000, 0.2, 0), mk("b", 64, 10000, 0.3, 0.1), mk("a'", 64, 10000, 0.2, 0),
		mk("r", 64, 10000, 0.8, 0.2), mk("b-rls", 64, 10000, 0.32, 0.1),
		// conc 16: (b) 40 µs, (b-rls) 60 µs (1.50, missed), no (r).
		mk("b", 16, 10000, 0.3, 0.1), mk("b-rls", 16, 10000, 0.5, 0.1),
	})
	want := [][]string{
		{"64", "42.0", "40.0", "1.05", "yes", "100.0", "0.42", "yes"},
		{"16", "60.0", "40.0", "1.50", "no", "-", "-", "-"},
	}
	if len(p) != 3 {
		t.Fatalf("rows %v, want the header and two", p)
	}
	for i, w := range want {
		if strings.Join(p[i+1], " ") != strings.Join(w, " ") {
			t.Errorf("row %d: %v, want %v", i, p[i+1], w)
		}
	}
	// Over half of (r)'s cost misses that target.
	p = rlsRows([]row{mk("r", 64, 10000, 0.6, 0.2), mk("b-rls", 64, 10000, 0.32, 0.1)})
	if got := strings.Join(p[1], " "); got != "64 42.0 - - - 80.0 0.53 no" {
		t.Errorf("against (r) alone: %s", got)
	}
	var out bytes.Buffer
	printTable(&out, Options{}, "m", nil, []row{mk("a", 64, 10000, 0.2, 0), mk("b", 64, 10000, 0.3, 0.1), mk("a'", 64, 10000, 0.2, 0), mk("b-rls", 64, 10000, 0.32, 0.1)})
	if !strings.Contains(out.String(), "floodgate's rate limit service (b-rls) against its Check path (b)") || !strings.Contains(out.String(), " 1.05 |") {
		t.Errorf("the printed table lacks the rate limit service comparison:\n%s", out.String())
	}
	// (b-rls)'s ratios divide by (a'), like (r)'s.
	if r := parseTable(t, out.String())["(b-rls) Floodgate rate limit service, Redis, distinct keys"]; r == nil || r["server ×(a)"] != "1.60" {
		t.Errorf("(b-rls)'s server ratio %v, want 1.60 (32 µs over (a')'s 20)", r)
	}
}

// byRound: each round's ratio against the baseline's round of the same
// index at the same concurrency, lowest–highest (median); the headline
// only when every round read Redis' counters; no line for a baseline, a
// single round, or rounds the baseline does not match.
func TestByRound(t *testing.T) {
	sc := func(id string) scenario { return mustScenario(t, id) }
	// µs per decision: server, Redis.
	c := func(server, redis float64) costs { return costs{server: server, redis: redis, redisOK: true, n: 1000} }
	base := row{sc: sc("a"), conc: 64, rounds: []costs{c(30, 0), c(20, 0), c(40, 0)}}
	b := row{sc: sc("b"), conc: 64, rounds: []costs{c(36, 5), c(30, 4), c(44, 8)}}
	e := row{sc: sc("e"), conc: 64, rounds: []costs{c(30, 0), c(22, 0), c(40, 0)}}
	e.rounds[1].redisOK = false
	lone := row{sc: sc("f"), conc: 64, rounds: []costs{c(40, 9)}}
	other := row{sc: sc("b"), conc: 16, rounds: []costs{c(40, 9), c(40, 9)}}               // no (a) at 16
	basePeer := row{sc: sc("a'"), conc: 64, rounds: []costs{c(20, 0), c(20, 0), c(20, 0)}} // (a') is a baseline too: no line
	lines := byRound([]row{base, b, e, lone, other, basePeer})
	if len(lines) != 2 {
		t.Fatalf("lines %q, want one for (b) and one for (e) at 64", lines)
	}
	// (b): 41/30 = 1.37, 34/20 = 1.70, 52/40 = 1.30; server 1.20, 1.50, 1.10.
	if want := "(b) Redis, distinct keys, conc 64, 3 rounds: server+Redis ×(a) 1.30–1.70 (1.37); server ×(a) 1.10–1.50 (1.20)"; lines[0] != want {
		t.Errorf("(b):\n got %q\nwant %q", lines[0], want)
	}
	// (e): a round without Redis' counters leaves out the headline.
	if want := "(e) in-memory store, conc 64, 3 rounds: server ×(a) 1.00–1.10 (1.00)"; lines[1] != want {
		t.Errorf("(e):\n got %q\nwant %q", lines[1], want)
	}
	if got := spread([]float64{4, 1, 3, 2}); got != "1.00–4.00 (2.50)" {
		t.Errorf("spread of four: %q", got)
	}
}

// clusterLines: (g)'s Redis CPU per decision (summed over the masters) over
// (b)'s at the same concurrency, over the cell and round by round; no line
// where (b) did not run, "?" where a figure is missing.
func TestClusterLines(t *testing.T) {
	sc := func(id string) scenario { return mustScenario(t, id) }
	c := func(redis float64) costs { return costs{server: 20, redis: redis, redisOK: true, n: 1000} }
	// Each round has 1000 decisions, so the cell's figure is the rounds' mean.
	mk := func(id string, conc int, rounds ...float64) row {
		r := row{sc: sc(id), conc: conc, res: result{decisions: int64(1000 * len(rounds)), window: time.Second}, serverCPU: 0.02 * float64(len(rounds))}
		var sum float64
		for _, x := range rounds {
			r.rounds = append(r.rounds, c(x))
			sum += x
		}
		r.redis = redisStats{cpu: sum * 1000 / 1e6}
		return r
	}
	lines := clusterLines([]row{
		mk("a", 64, 0, 0), mk("b", 64, 4, 5), mk("g", 64, 6, 6),
		mk("g", 16, 9, 9), // no (b) at 16: no line
	})
	if want := []string{"conc 64: 6.0 against 4.5 µs, 1.33 ×; by round 1.20–1.50 (1.35)"}; !slices.Equal(lines, want) {
		t.Errorf("lines %q, want %q", lines, want)
	}
	b := mk("b", 64, 4, 5)
	b.rerr = errors.New("INFO failed")
	if lines := clusterLines([]row{b, mk("g", 64, 6, 6)}); !slices.Equal(lines, []string{"conc 64: ?"}) {
		t.Errorf("without (b)'s Redis counters: %q", lines)
	}
	if lines := clusterLines([]row{mk("b", 64, 4, 5)}); lines != nil {
		t.Errorf("lines without (g): %q", lines)
	}
}

// mustScenario is the scenario id, which the test needs to exist.
func mustScenario(t *testing.T, id string) scenario {
	t.Helper()
	s, ok := scenarioByID(id)
	if !ok {
		t.Fatalf("no scenario %s", id)
	}
	return s
}

func TestHTTPRows(t *testing.T) {
	mk := func(id string, conc int, n int64, server, redis float64) row {
		return row{sc: mustScenario(t, id), conc: conc, res: result{decisions: n, window: time.Second}, serverCPU: server, redis: redisStats{cpu: redis}}
	}
	if p := httpRows([]row{mk("b", 64, 1000, 0.05, 0.01)}); p != nil {
		t.Fatalf("an HTTP door table without (b-http): %v", p)
	}
	p := httpRows([]row{
		// conc 64: (a-http) 20 µs, (b) 40 µs, (b-http) 50 µs: 2.50 and 1.25.
		mk("a", 64, 10000, 0.2, 0), mk("b", 64, 10000, 0.3, 0.1), mk("a-http", 64, 10000, 0.2, 0), mk("b-http", 64, 10000, 0.4, 0.1),
		// conc 16: no (b).
		mk("a-http", 16, 10000, 0.2, 0), mk("b-http", 16, 10000, 0.5, 0.1),
	})
	want := [][]string{{"64", "50.0", "20.0", "2.50", "40.0", "1.25"}, {"16", "60.0", "20.0", "3.00", "-", "-"}}
	if len(p) != 3 {
		t.Fatalf("rows %v, want the header and two", p)
	}
	for i, w := range want {
		if strings.Join(p[i+1], " ") != strings.Join(w, " ") {
			t.Errorf("row %d: %v, want %v", i, p[i+1], w)
		}
	}
	var out bytes.Buffer
	printTable(&out, Options{}, "m", nil, []row{mk("a", 64, 10000, 0.2, 0), mk("a-http", 64, 10000, 0.2, 0), mk("b-http", 64, 10000, 0.4, 0.1)})
	// (b-http)'s ratios divide by (a-http), the no-op HTTP server.
	if r := parseTable(t, out.String())["(b-http) Floodgate HTTP door, Redis, distinct keys"]; r == nil || r["server ×(a)"] != "2.00" || r["server+Redis ×(a)"] != "2.50" {
		t.Errorf("(b-http)'s ratios %v, want 2.00 and 2.50 over (a-http)", r)
	}
	if _, err := func() ([]scenario, error) {
		scs, _, err := selectScenarios(Options{Scenarios: []string{"b-http"}, Ghz: "bin/ghz"})
		return scs, err
	}(); err == nil || !strings.Contains(err.Error(), "speaks HTTP") {
		t.Errorf("b-http with --ghz: %v, want refused", err)
	}
}
