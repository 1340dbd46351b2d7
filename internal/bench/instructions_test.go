package bench

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/config"
)

// instructionRows divides each row by its baseline at the same
// concurrency ((a), and (a') for the rate limit API, itself a baseline),
// round against round for the spread, and adds Redis' instructions where
// the row decides there. Pure arithmetic.
func TestInstructionRows(t *testing.T) {
	mk := func(id string, conc int, server, redis []float64) instructionRow {
		r := instructionRow{sc: mustScenario(t, id), conc: conc, server: server, redis: redis}
		if redis != nil {
			r.scripts = 1
		}
		return r
	}
	rows := instructionRows([]instructionRow{
		mk("a", 1, []float64{100_000, 102_000}, nil),
		mk("b", 1, []float64{150_000, 149_940}, []float64{50_000, 52_000}),
		mk("e", 1, []float64{90_000, 93_000}, nil),
		mk("a'", 1, []float64{60_000, 60_000}, nil),
		mk("b-rls", 1, []float64{90_000, 96_000}, []float64{40_000, 40_000}),
		mk("b", 16, []float64{70_000}, []float64{10_000}), // no (a) at 16
	})
	want := []string{
		"(a) no-op ext_authz server | 1 | 101000 | 101000 | 1.000 | 1.000–1.000 | - | - | - | -",
		"(b) Redis, distinct keys | 1 | 149970 | 101000 | 1.485 | 1.470–1.500 | 51000 | 50000–52000 | 1.990 | 1.00",
		"(b) Redis, distinct keys | 16 | 70000 | ? | ? | - | 10000 | - | - | 1.00",
		"(e) in-memory store | 1 | 91500 | 101000 | 0.906 | 0.900–0.912 | - | - | - | -",
		"(a') no-op rate-limit service | 1 | 60000 | 60000 | 1.000 | 1.000–1.000 | - | - | - | -",
		"(b-rls) Floodgate rate limit service, Redis, distinct keys | 1 | 93000 | 60000 | 1.550 | 1.500–1.600 | 40000 | 40000–40000 | 2.217 | 1.00",
	}
	if len(rows) != len(want)+1 {
		t.Fatalf("rows %q, want the header and %d", rows, len(want))
	}
	for i, w := range want {
		if g := strings.Join(rows[i+1], " | "); g != w {
			t.Errorf("row %d:\n got %s\nwant %s", i, g, w)
		}
	}
}

// Floodgate's configurations for the count wait for a Redis valgrind slows
// down, and still parse.
func TestInstructionConfigWaitsForRedis(t *testing.T) {
	for _, server := range []string{"redis", "redis-rls", "memory"} {
		cfg, err := instructionConfig(server, "127.0.0.1:6379", 400, "/tmp/rl.yaml")
		if err != nil {
			t.Fatal(err)
		}
		c, err := config.Parse(server+".yaml", []byte(cfg))
		if err != nil {
			t.Fatalf("%s: %v\n%s", server, err, cfg)
		}
		if r := c.Store.Redis; strings.HasPrefix(server, "redis") && (r.Timeout != 10*time.Second || r.DialTimeout != 10*time.Second) {
			t.Errorf("%s: Redis timeouts %v and %v, want 10s:\n%s", server, r.Timeout, r.DialTimeout, cfg)
		}
	}
}

// TestInstructionsEndToEnd runs floodbench instructions' whole path,
// briefly: the no-op server, floodgate on Redis and in memory, and Redis,
// each under valgrind's callgrind, counted round by round. Counts are not
// asserted beyond what any machine gives: every row has them, a decision
// costs more than a thousand instructions, and on Redis each reached it.
func TestInstructionsEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Fatal("valgrind not found: install it (apt-get install valgrind; make test does when root) to run floodbench instructions")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: the benchmark needs Redis >= 7.0 (apt-get install redis-server)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	err := CountInstructions(ctx, InstructionOptions{
		Floodgate: bins.floodgate, Self: bins.floodbench, RedisServer: "redis-server", Valgrind: "valgrind",
		Scenarios: []string{"b", "e"}, Conc: []int{1}, Requests: 20, Warmup: 5, Rounds: 2, Keys: 100, GOGC: "off", GOMAXPROCS: 1,
	}, &out, &log)
	if err != nil {
		t.Fatalf("instructions: %v\n%s", err, log.String())
	}
	t.Logf("\n%s", out.String())
	if !strings.HasPrefix(out.String(), "machine: ") || !strings.Contains(out.String(), "valgrind-") || !strings.Contains(out.String(), "GOGC=off") {
		t.Errorf("the table does not say the machine, valgrind and the collector:\n%s", out.String())
	}
	rows := parseTable(t, out.String())
	for _, label := range []string{"(a) no-op ext_authz server", "(b) Redis, distinct keys", "(e) in-memory store"} {
		r, ok := rows[label]
		if !ok {
			t.Errorf("no row %s:\n%s", label, out.String())
			continue
		}
		if n, err := strconv.ParseFloat(r["server instr/dec"], 64); err != nil || n < 1000 {
			t.Errorf("%s: %q instructions per decision, want more than a thousand", label, r["server instr/dec"])
		}
		if q, err := strconv.ParseFloat(r["server ÷ baseline"], 64); err != nil || q <= 0 {
			t.Errorf("%s: ratio %q", label, r["server ÷ baseline"])
		}
		if !strings.Contains(r["by round"], "–") {
			t.Errorf("%s: by round %q, want the two rounds' spread", label, r["by round"])
		}
	}
	if r := rows["(b) Redis, distinct keys"]; r != nil {
		if n, err := strconv.ParseFloat(r["Redis instr/dec"], 64); err != nil || n < 1000 {
			t.Errorf("(b): Redis %q instructions per decision", r["Redis instr/dec"])
		}
		if r["scripts/dec"] != "1.00" {
			t.Errorf("(b): %s script calls per decision at concurrency 1, want 1.00: every decision in Redis", r["scripts/dec"])
		}
	}
	if r := rows["(e) in-memory store"]; r != nil && r["Redis instr/dec"] != "-" {
		t.Errorf("(e) counts Redis: %q", r["Redis instr/dec"])
	}
}
