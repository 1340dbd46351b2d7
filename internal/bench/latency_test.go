package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// latencyRows: each row's added p50 and p99 over its baseline at the same
// concurrency, in multiples of (rt)'s at the same concurrency, round by
// round for the p50, with the targets of Floodgate on Redis at concurrency
// 1 and 16. Pure arithmetic on rows: no timing.
func TestLatencyRows(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	mk := func(id string, conc, p50, p99 int, rounds ...int) row {
		r := row{sc: mustScenario(t, id), conc: conc, res: result{decisions: 1000, window: time.Second, p50: us(p50), p99: us(p99)}}
		for _, p := range rounds {
			r.rounds = append(r.rounds, costs{n: 300, p50: us(p)})
		}
		return r
	}
	rows := []row{
		mk("a", 1, 100, 300, 100, 90, 110), mk("b", 1, 200, 500, 200, 170, 230), mk("rt", 1, 50, 150, 50, 45, 60),
		mk("e", 1, 95, 320, 95, 90, 100), mk("naive", 1, 70, 200, 70, 65, 75),
		mk("a", 16, 400, 1000), mk("b", 16, 800, 2000), mk("rt", 16, 300, 900),
		mk("a", 64, 900, 3000), mk("c", 64, 1000, 3500), // no (rt) at 64
		mk("f", 32, 500, 900), // no (a) at 32: no line
	}
	got := latencyRows(rows, 0)
	want := []string{
		"(b) Redis, distinct keys | 1 | 200µs | +100µs | +200µs | 50µs | 150µs | 2.00 | 1.78–2.00 (2.00) | 1.33 | p50 ≤ 1.3, p99 ≤ 2.0 | no",
		"(b) Redis, distinct keys | 16 | 800µs | +400µs | +1.00ms | 300µs | 900µs | 1.33 | - | 1.11 | p50 ≤ 1.5 | yes",
		"(c) Redis, one hot key | 64 | 1.00ms | +100µs | +500µs | - | - | - | - | - | - | -",
		"(e) in-memory store | 1 | 95µs | -5µs | +20µs | 50µs | 150µs | -0.10 | -0.17–0.00 (-0.10) | 0.13 | - | -",
	}
	if len(got) != len(want)+1 {
		t.Fatalf("rows %q, want the header and %d", got, len(want))
	}
	for i, w := range want {
		if g := strings.Join(got[i+1], " | "); g != w {
			t.Errorf("row %d:\n got %s\nwant %s", i, g, w)
		}
	}
	// At concurrency 1 both ratios must hold: a p50 within target with a
	// p99 over it misses.
	got = latencyRows([]row{mk("a", 1, 100, 300), mk("b", 1, 160, 700), mk("rt", 1, 50, 150)}, 0)
	if g := strings.Join(got[1][7:], " "); g != "1.20 - 2.67 p50 ≤ 1.3, p99 ≤ 2.0 no" {
		t.Errorf("p50 met, p99 missed: %s", g)
	}
	got = latencyRows([]row{mk("a", 1, 100, 300), mk("b", 1, 160, 500), mk("rt", 1, 50, 150)}, 0)
	if g := got[1][len(got[1])-1]; g != "yes" {
		t.Errorf("both met: %q, want yes", g)
	}
	if l := latencyRows([]row{mk("a", 1, 100, 300), mk("rt", 1, 50, 150)}, 0); l != nil {
		t.Errorf("a latency table with only the baseline and (rt): %q", l)
	}
}

// naiveRows: Redis CPU per decision of (b) and (c) over (naive)'s per call
// at the same concurrency, against the targets, and round by round.
func TestNaiveRows(t *testing.T) {
	mk := func(id string, conc int, redisCPU float64, rounds ...float64) row {
		r := row{sc: mustScenario(t, id), conc: conc, res: result{decisions: 10000, window: time.Second}, redis: redisStats{cpu: redisCPU}}
		for _, x := range rounds {
			r.rounds = append(r.rounds, costs{n: 5000, redis: x, redisOK: true})
		}
		return r
	}
	if n := naiveRows([]row{mk("b", 64, 0.05), mk("c", 64, 0.04)}); n != nil {
		t.Fatalf("a naive table without (naive): %q", n)
	}
	broken := mk("naive", 1, 0.1)
	broken.rerr = errSentinel
	got := naiveRows([]row{
		// conc 64: (naive) 15 µs, (b) 5 (0.33, met), (c) 4 (0.27, missed).
		mk("naive", 64, 0.15, 15, 10), mk("b", 64, 0.05, 5, 4), mk("c", 64, 0.04),
		// conc 16: (naive) alone.
		mk("naive", 16, 0.2),
		// conc 1: Redis' counters unreadable.
		broken, mk("b", 1, 0.1),
	})
	want := []string{
		"64 15.0 5.0 0.33 yes 0.33–0.40 (0.37) 4.0 0.27 no -",
		"16 20.0 - - - - - - - -",
		"1 ? ? ? ? ? ? ? ? ?",
	}
	if len(got) != len(want)+1 {
		t.Fatalf("rows %q, want the header and %d", got, len(want))
	}
	for i, w := range want {
		if g := strings.Join(got[i+1], " "); g != w {
			t.Errorf("row %d: %s, want %s", i, g, w)
		}
	}
	// (c) at 0.2 × meets its target; (b) over 0.35 × misses.
	got = naiveRows([]row{mk("naive", 64, 0.1), mk("b", 64, 0.036), mk("c", 64, 0.02)})
	if g := strings.Join(got[1], " "); g != "64 10.0 3.6 0.36 no - 2.0 0.20 yes -" {
		t.Errorf("at the edges: %s", g)
	}
}

// The reference rows have no server process: the main table prints no
// server CPU for them, and both new tables are printed.
func TestPrintTableReferenceRows(t *testing.T) {
	mk := func(id string, p50 time.Duration, server, redisCPU float64) row {
		return row{sc: mustScenario(t, id), conc: 1, res: result{decisions: 1000, window: time.Second, p50: p50, p99: 2 * p50},
			serverCPU: server, clientCPU: 0.05, redis: redisStats{cpu: redisCPU, scripts: 1000}}
	}
	var out bytes.Buffer
	printTable(&out, Options{}, "m", nil, []row{
		mk("a", 100*time.Microsecond, 0.1, 0), mk("b", 300*time.Microsecond, 0.2, 0.05),
		mk("rt", 50*time.Microsecond, 0, 0.02), mk("naive", 60*time.Microsecond, 0, 0.03),
	})
	r := parseTable(t, out.String())["(rt) one Redis round trip from the load generator"]
	if r == nil || r["server ×(a)"] != "-" || r["server µs/dec"] != "-" || r["server+Redis µs/dec"] != "-" || r["Redis µs/dec"] != "20.0" || r["scripts/dec"] != "1.00" {
		t.Errorf("(rt)'s row %v: want no server figures, Redis 20.0 µs/dec, 1 script per call", r)
	}
	for _, s := range []string{"\nlatency added over the baseline", "| (b) Redis, distinct keys |    1 |", " 4.00 |",
		"\nRedis CPU per decision of (b) and (c) against the naive script's", " 1.67 |"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the printed table lacks %q:\n%s", s, out.String())
		}
	}
}

func TestFmtAdded(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0µs", 132 * time.Microsecond: "+132µs", -4 * time.Microsecond: "-4µs", 1540 * time.Microsecond: "+1.54ms"} {
		if got := fmtAdded(d); got != want {
			t.Errorf("fmtAdded(%v) = %q, want %q", d, got, want)
		}
	}
}

var errSentinel = errorString("INFO failed")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestOpenLoopSendsAtTheRate: with a rate, requests arrive at that rate
// whatever the calls do (about rate × window of them), and each is timed
// from its scheduled send, so a request that waited for a busy worker
// counts the wait: at 1000/s into one worker whose calls take 5 ms, the
// median request waits far longer than a call takes.
func TestOpenLoopSendsAtTheRate(t *testing.T) {
	instant := func(int) callFunc { return func(context.Context) (bool, error) { return false, nil } }
	r := driveCalls(context.Background(), cell{conc: 8, rate: 2000, window: 300 * time.Millisecond, maxCount: 1 << 20, rpcTimeout: time.Second}, instant)
	if r.decisions < 400 || r.decisions > 800 {
		t.Errorf("%d requests at 2000/s over 300ms, want about 600", r.decisions)
	}
	const callTime = 5 * time.Millisecond
	slow := func(int) callFunc {
		return func(context.Context) (bool, error) { time.Sleep(callTime); return false, nil }
	}
	r = driveCalls(context.Background(), cell{conc: 1, rate: 1000, window: 200 * time.Millisecond, maxCount: 1 << 20, rpcTimeout: time.Second}, slow)
	if r.decisions == 0 || r.p50 < 5*callTime {
		t.Errorf("one worker, 5ms calls, 1000/s offered: %d answered, p50 %v; want a p50 of at least %v (the queue's wait counted)", r.decisions, r.p50, 5*callTime)
	}
	closed := driveCalls(context.Background(), cell{conc: 1, window: 100 * time.Millisecond, maxCount: 1 << 20, rpcTimeout: time.Second}, slow)
	if closed.p50 >= r.p50/2 {
		t.Errorf("closed-loop, one worker: p50 %v; want about one call (%v), far below the open loop's %v: no queue", closed.p50, callTime, r.p50)
	}
}
