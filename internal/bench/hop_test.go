package bench

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// With Redis a hop away the latency table holds Floodgate on Redis to the
// hop's targets (added p50 ≤ 1.2 × and p99 ≤ 1.5 × (rt)'s), at concurrency
// 1 and 16 alike, and to none at other concurrencies. Pure arithmetic.
func TestHopLatencyTargets(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	mk := func(id string, conc, p50, p99 int) row {
		return row{sc: mustScenario(t, id), conc: conc, res: result{decisions: 1000, window: time.Second, p50: us(p50), p99: us(p99)}}
	}
	rows := []row{
		mk("a", 1, 100, 300), mk("b", 1, 1260, 2400), mk("rt", 1, 1000, 1500),
		mk("a", 16, 400, 1000), mk("c", 16, 1700, 3500), mk("rt", 16, 1000, 2000),
		mk("a", 64, 900, 3000), mk("b", 64, 2000, 6000), mk("rt", 64, 1500, 4000),
	}
	got := latencyRows(rows, 500*time.Microsecond)
	want := []string{
		"(b) Redis, distinct keys | 1 | 1.26ms | +1.16ms | +2.10ms | 1.00ms | 1.50ms | 1.16 | - | 1.40 | p50 ≤ 1.2, p99 ≤ 1.5 | yes",
		"(b) Redis, distinct keys | 64 | 2.00ms | +1.10ms | +3.00ms | 1.50ms | 4.00ms | 0.73 | - | 0.75 | - | -",
		"(c) Redis, one hot key | 16 | 1.70ms | +1.30ms | +2.50ms | 1.00ms | 2.00ms | 1.30 | - | 1.25 | p50 ≤ 1.2, p99 ≤ 1.5 | no",
	}
	if len(got) != len(want)+1 {
		t.Fatalf("rows %q, want the header and %d", got, len(want))
	}
	for i, w := range want {
		if g := strings.Join(got[i+1], " | "); g != w {
			t.Errorf("row %d:\n got %s\nwant %s", i, g, w)
		}
	}
}

// openLoopRows sets each open-loop cell against its baseline and (rt) at
// the same rate, never at another rate; a rate without (rt) has no ratio.
func TestOpenLoopRows(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	mk := func(id string, rate float64, p50, p99 int) row {
		return row{sc: mustScenario(t, id), conc: 16, rate: rate, res: result{decisions: 990, window: time.Second, p50: us(p50), p99: us(p99)}}
	}
	rows := []row{
		mk("a", 500, 100, 400), mk("b", 500, 1300, 2000), mk("rt", 500, 1000, 2000),
		mk("a", 2000, 200, 800), mk("b", 2000, 1800, 5000), mk("rt", 2000, 1200, 2400),
		mk("a'", 2000, 150, 500), mk("b-rls", 2000, 1500, 4100),
		mk("a", 9000, 300, 900), mk("c", 9000, 1000, 2000), // no (rt) at 9000
	}
	got := openLoopRows(rows, time.Millisecond)
	want := []string{
		"(b) Redis, distinct keys | 500 | 990 | 1.30ms | 2.00ms | +1.20ms | +1.60ms | 1.00ms | 2.00ms | 1.20 | 0.80 | p50 ≤ 1.2, p99 ≤ 1.5 | yes",
		"(b) Redis, distinct keys | 2000 | 990 | 1.80ms | 5.00ms | +1.60ms | +4.20ms | 1.20ms | 2.40ms | 1.33 | 1.75 | p50 ≤ 1.2, p99 ≤ 1.5 | no",
		"(c) Redis, one hot key | 9000 | 990 | 1.00ms | 2.00ms | +700µs | +1.10ms | - | - | - | - | - | -",
		"(b-rls) Floodgate rate limit service, Redis, distinct keys | 2000 | 990 | 1.50ms | 4.10ms | +1.35ms | +3.60ms | 1.20ms | 2.40ms | 1.12 | 1.50 | p50 ≤ 1.2, p99 ≤ 1.5 | yes",
	}
	if len(got) != len(want)+1 {
		t.Fatalf("rows %q, want the header and %d", got, len(want))
	}
	for i, w := range want {
		if g := strings.Join(got[i+1], " | "); g != w {
			t.Errorf("row %d:\n got %s\nwant %s", i, g, w)
		}
	}
	if openLoopRows(nil, 0) != nil {
		t.Error("an open-loop table without open-loop cells")
	}
}

// TestHopSmoke runs the orchestrator with Redis behind the delaying proxy,
// briefly: every row answered, closed- and open-loop; every call of (rt)
// and of (b) waits at least the hop (its p50 is above the round trip
// added); and the tables say the hop.
func TestHopSmoke(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: the benchmark needs Redis >= 7.0 (apt-get install redis-server)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const rtt = time.Millisecond
	var out, log bytes.Buffer
	err := Run(ctx, Options{
		Floodgate: bins.floodgate, Self: bins.floodbench, RedisServer: "redis-server",
		Scenarios: []string{"b", "b-rls", "rt"}, Conc: []int{1, 4}, Cell: 200 * time.Millisecond, Rounds: 1, Warmup: 50 * time.Millisecond,
		MaxCount: 100_000, Keys: 1000, Conns: 1, RedisRTT: rtt, Rates: []float64{200},
	}, &out, &log)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, log.String())
	}
	t.Logf("\n%s", out.String())
	if !strings.Contains(out.String(), "\nRedis a hop away: behind floodbench's delaying proxy on 127.0.0.1, 1ms added") {
		t.Errorf("the table does not say Redis was a hop away:\n%s", out.String())
	}
	tables := strings.Split(out.String(), "\nopen-loop (")
	if len(tables) != 2 {
		t.Fatalf("no open-loop table:\n%s", out.String())
	}
	for label, r := range parseTable(t, tables[0]) {
		if r["errors"] != "" && r["errors"] != "0" {
			t.Errorf("%s, conc %s: errors %q", label, r["conc"], r["errors"])
		}
		if strings.HasPrefix(label, "(rt)") || strings.HasPrefix(label, "(b) ") {
			if p50, err := time.ParseDuration(r["p50"]); err != nil || p50 < rtt {
				t.Errorf("%s, conc %s: p50 %q, want at least the %v each call waits in the proxy", label, r["conc"], r["p50"], rtt)
			}
		}
	}
	open := parseTable(t, tables[1])
	for _, label := range []string{"(b) Redis, distinct keys", "(b-rls) Floodgate rate limit service, Redis, distinct keys"} {
		r, ok := open[label]
		if !ok {
			t.Errorf("no open-loop row %s:\n%s", label, tables[1])
			continue
		}
		if r["offered/s"] != "200" || r["target (÷ rt)"] != "p50 ≤ 1.2, p99 ≤ 1.5" {
			t.Errorf("open-loop %s: offered %q, target %q", label, r["offered/s"], r["target (÷ rt)"])
		}
		if p50, err := time.ParseDuration(r["(rt) p50"]); err != nil || p50 < rtt {
			t.Errorf("open-loop %s: (rt) p50 %q, want at least %v", label, r["(rt) p50"], rtt)
		}
	}
	if err := Run(ctx, Options{Floodgate: bins.floodgate, Self: bins.floodbench, RedisServer: "redis-server",
		Scenarios: []string{"g"}, Conc: []int{1}, Cell: time.Second, Rounds: 1, Keys: 10, Conns: 1, MaxCount: 1, RedisRTT: rtt}, &out, &log); err == nil || !strings.Contains(err.Error(), "announce") {
		t.Errorf("(g) with a hop: %v, want it refused", err)
	}
}
