package main

import (
	"bufio"
	"bytes"
	"os"
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
	err := bench(t.Context(), benchOptions{floodgate: "/nonexistent", redisServer: "redis-server",
		scenarios: []string{"a", "r"}, conc: []int{1}, cell: time.Second, rounds: 1, maxCount: 1, keys: 1, conns: 1}, &log, &log)
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
		sc, ok := scenarioByID(id)
		if !ok {
			t.Fatalf("no scenario %s", id)
		}
		return row{sc: sc, conc: 8, res: res(n)}
	}
	var out bytes.Buffer
	printTable(&out, benchOptions{}, "m", nil, []row{mk("a", 1000), mk("b", 500), mk("a'", 2000), mk("r", 500)})
	for label, want := range map[string]string{"(b) Redis, distinct keys": "0.50", "(r) envoyproxy/ratelimit": "0.25"} {
		var line string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "| "+label) {
				line = l
			}
		}
		cols := strings.Split(line, "|")
		if len(cols) < 8 || strings.TrimSpace(cols[6]) != want || strings.TrimSpace(cols[7]) != want {
			t.Errorf("%s: rate and p99 ratios in %q, want %s", label, line, want)
		}
	}
}
