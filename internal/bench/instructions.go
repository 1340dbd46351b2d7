package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/bench/callgrind"
	"github.com/floodgate/floodgate/internal/config"
)

// Figures that hold still. CPU time per decision on a shared machine moves
// with the hour (docs/performance.md); the instructions a process executes
// for the same requests do not, or far less. floodbench instructions runs
// each server under valgrind's callgrind, sends it a fixed, bounded
// sequence of requests from the load generator (outside valgrind), and
// counts the instructions the serving process, and Redis for the scenarios
// that decide there, executed between zeroing its counts before the
// requests and dumping them after (callgrind/): start-up, the warm-up and
// shutdown are left out. floodgate's instructions per decision are set
// against the no-op server's on the same requests, as the CPU table sets
// their CPU.
//
// Go under callgrind needs one setting: callgrind's signal handling fails
// an assertion on the signals Go's scheduler preempts goroutines with
// (SIGURG), so both Go servers run with GODEBUG=asyncpreemptoff=1 (goroutines
// are then preempted only at function calls). Two more keep the counts
// still, for both servers alike (--gogc, --gomaxprocs): no collector (a
// cycle is millions of instructions, and whether it falls in a round moved
// the round's count by a tenth; allocation itself is still counted), and one
// processor (idle threads of a second one spin for work as long as they are
// kept waiting). valgrind runs a process' threads one at a time, so what
// each request wakes and the order threads run in differ from a native run;
// the counts measure the work, not the waiting.

// InstructionOptions are floodbench instructions' flags.
type InstructionOptions struct {
	Floodgate, RedisServer, Valgrind, control, Self string
	Scenarios                                       []string
	Conc                                            []int
	Requests, Warmup, Rounds, Keys                  int
	GOGC                                            string // GOGC of both Go servers
	GOMAXPROCS                                      int    // GOMAXPROCS of both Go servers (0: Go's default)
	OutDir                                          string // keep callgrind's files here ("": a temporary directory)
}

// InstructionScenarios are the scenarios floodbench instructions can
// measure: those a server answers ((rt), (naive) and (r) have none of
// floodbench's to run under callgrind, and (g) would need a cluster under
// it).
var InstructionScenarios = []string{"a", "b", "b0", "b2", "c", "c-lease", "d", "e", "f", "a'", "b-rls"}

// instructionRow is one scenario at one concurrency: the instructions per
// decision of the serving process and of Redis, round by round.
type instructionRow struct {
	sc     scenario
	conc   int
	server []float64 // per round
	redis  []float64 // per round; nil when the scenario does not decide in Redis
	// scripts is the script calls Redis counted per decision, all rounds:
	// a decision that did not reach Redis (a degraded answer) would count
	// other instructions.
	scripts float64
}

func (r instructionRow) meanServer() float64 { return mean(r.server) }
func (r instructionRow) meanRedis() float64  { return mean(r.redis) }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// CountInstructions starts the servers under callgrind one at a time (and
// Redis, when a scenario decides there), counts every cell and prints the
// table.
func CountInstructions(ctx context.Context, o InstructionOptions, stdout, stderr io.Writer) error {
	for _, id := range o.Scenarios {
		if !slices.Contains(InstructionScenarios, strings.TrimSpace(id)) {
			return fmt.Errorf("scenario %q cannot be counted (from %s)", id, strings.Join(InstructionScenarios, " "))
		}
	}
	bo := Options{Scenarios: o.Scenarios}
	scs, wanted, err := selectScenarios(bo)
	if err != nil {
		return err
	}
	if need := o.Warmup + o.Rounds*o.Requests; o.Keys < need {
		return fmt.Errorf("--keys %d: the rounds need %d distinct callers (warm-up + rounds × requests)", o.Keys, need)
	}
	valgrind, err := exec.LookPath(o.Valgrind)
	if err != nil {
		return fmt.Errorf("valgrind not found (%v): install it, e.g. apt-get install valgrind", err)
	}
	control := o.control
	if control == "" {
		if control, err = exec.LookPath("callgrind_control"); err != nil {
			return fmt.Errorf("callgrind_control not found beside valgrind (%v)", err)
		}
	}
	version, _ := exec.Command(valgrind, "--version").Output()
	self := o.Self
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return err
		}
	}
	if _, err := os.Stat(o.Floodgate); err != nil {
		return fmt.Errorf("floodgate binary: %w (build it with make build, or pass --floodgate)", err)
	}
	dir, err := os.MkdirTemp("", "floodbench-instructions")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := dir
	if o.OutDir != "" {
		if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
			return err
		}
		out = o.OutDir
	}
	m := &instructionMeter{o: o, valgrind: valgrind, control: control, dir: dir, out: out, self: self, stderr: stderr}
	defer m.close()
	redisBacked := false
	for name := range wanted {
		redisBacked = redisBacked || strings.HasPrefix(name, "redis")
	}
	if redisBacked {
		if err := m.startRedis(ctx); err != nil {
			return err
		}
	}
	work := map[string]workload{}
	for _, sc := range scs {
		if _, ok := work[sc.cache(o.Keys)]; !ok {
			work[sc.cache(o.Keys)] = sc.work(o.Keys)
		}
	}
	var rows []instructionRow
	for _, server := range []string{"noop", "memory", "redis", "redis-nopipe", "redis-2flushers", "redis-rls"} {
		if !wanted[server] {
			continue
		}
		var on []scenario
		for _, sc := range scs {
			if sc.server == server {
				on = append(on, sc)
			}
		}
		got, err := m.measureServer(ctx, server, on, work)
		if err != nil {
			return err
		}
		rows = append(rows, got...)
	}
	printInstructions(stdout, o, machine(o.RedisServer), strings.TrimSpace(string(version)), rows)
	return nil
}

// instructionMeter runs the servers under callgrind and counts their cells.
type instructionMeter struct {
	o                                 InstructionOptions
	valgrind, control, dir, out, self string
	stderr                            io.Writer
	redis                             *callgrind.Run // nil until startRedis
	redisAddr                         string
	rc                                *redis.Client
	procs                             []*proc
}

func (m *instructionMeter) close() {
	if m.rc != nil {
		m.rc.Close()
	}
	for i := len(m.procs) - 1; i >= 0; i-- {
		m.procs[i].stop()
	}
}

// startRedis runs redis-server under callgrind.
func (m *instructionMeter) startRedis(ctx context.Context) error {
	bin, err := exec.LookPath(m.o.RedisServer)
	if err != nil {
		return fmt.Errorf("redis-server not found (%v): install Redis >= 7.0, e.g. apt-get install redis-server", err)
	}
	fmt.Fprintln(m.stderr, "floodbench: starting redis-server under callgrind")
	out := m.out + "/callgrind-redis"
	p, rc, err := startRedisUnder(ctx, append([]string{m.valgrind}, callgrind.Args(out)...), 2*time.Minute, bin, m.dir, nil)
	if err != nil {
		return err
	}
	m.procs, m.rc = append(m.procs, p), rc
	m.redis = &callgrind.Run{PID: p.cmd.Process.Pid, Control: m.control, Out: out}
	m.redisAddr = p.addr
	return nil
}

// instructionConfig is floodgate's configuration for server (floodgateConfig)
// with Redis given the time valgrind takes: a decision must reach Redis and
// come back, never be answered by the failure mode because it was slow.
func instructionConfig(server, redisAddr string, gogc int, rlsConfig string) (string, error) {
	cfg, err := floodgateConfig(server, []string{redisAddr}, gogc, rlsConfig)
	if err != nil || !strings.Contains(cfg, "  redis:\n") {
		return cfg, err
	}
	return strings.Replace(cfg, "  redis:\n", "  redis:\n    timeout: 10s\n    dial_timeout: 10s\n", 1), nil
}

// measureServer starts server under callgrind and counts each of its
// scenarios at each concurrency, then stops it.
func (m *instructionMeter) measureServer(ctx context.Context, server string, scs []scenario, work map[string]workload) ([]instructionRow, error) {
	o := m.o
	// The GOGC environment variable decides for both servers; the
	// percentage in floodgate's file and the no-op server's flag are
	// floodgate's default, which it overrides.
	gogc := config.DefaultGOGC
	name := "floodgate (" + server + ")"
	var args []string
	bin := o.Floodgate
	if server == "noop" {
		name, bin, args = "floodbench noop", m.self, []string{"noop", "--listen", "127.0.0.1:0", "--gogc", strconv.Itoa(gogc)}
	} else {
		rlsConfig := m.dir + "/ratelimit-floodbench.yaml"
		if err := os.WriteFile(rlsConfig, []byte(ratelimitConfig), 0o600); err != nil {
			return nil, err
		}
		redisAddr := "127.0.0.1:1" // the in-memory store names no Redis
		if m.redis != nil {
			redisAddr = m.redisAddr
		}
		cfg, err := instructionConfig(server, redisAddr, gogc, rlsConfig)
		if err != nil {
			return nil, err
		}
		path := m.dir + "/floodgate-" + server + ".yaml"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		args = []string{"serve", "--config", path}
	}
	out := m.out + "/callgrind-" + strings.ReplaceAll(server, "noop", "noop-server")
	cmd := exec.Command(m.valgrind, append(append(callgrind.Args(out), bin), args...)...)
	cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1", "GOGC="+o.GOGC)
	if o.GOMAXPROCS > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(o.GOMAXPROCS))
	}
	fmt.Fprintf(m.stderr, "floodbench: starting %s under callgrind\n", name)
	p, err := startServingCmd(ctx, name, cmd, 3*time.Minute)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	run := &callgrind.Run{PID: p.cmd.Process.Pid, Control: m.control, Out: out}
	c, err := dial(p.addr, 1, ClientLean)
	if err != nil {
		return nil, err
	}
	defer c.close()
	var rows []instructionRow
	for _, sc := range scs {
		w := work[sc.cache(o.Keys)]
		for _, conc := range o.Conc {
			r := instructionRow{sc: sc, conc: conc}
			if _, err := m.send(ctx, c, part(w, 0, o.Warmup), conc, o.Warmup); err != nil {
				return nil, fmt.Errorf("%s, warm-up: %w", sc.label, err)
			}
			var scripts int64
			for rd := 0; rd < o.Rounds; rd++ {
				server, redisIr, calls, err := m.round(ctx, run, c, part(w, o.Warmup+rd*o.Requests, o.Requests), conc, strings.HasPrefix(sc.server, "redis"))
				if err != nil {
					return nil, fmt.Errorf("%s, concurrency %d, round %d: %w", sc.label, conc, rd+1, err)
				}
				n := float64(o.Requests)
				r.server = append(r.server, float64(server)/n)
				if strings.HasPrefix(sc.server, "redis") {
					r.redis = append(r.redis, float64(redisIr)/n)
					scripts += calls
				}
			}
			r.scripts = float64(scripts) / float64(o.Rounds*o.Requests)
			fmt.Fprintf(m.stderr, "  %s, conc %d: %.0f instructions per decision\n", sc.label, conc, r.meanServer())
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// part is w with its requests from lo, n of them: the callers of one round,
// fresh for every round. A workload of fewer requests (one hot caller) is
// the same requests every round.
func part(w workload, lo, n int) workload {
	if len(w.reqs) >= lo+n && n > 0 {
		w.reqs = w.reqs[lo : lo+n]
	}
	return w
}

// round counts one round: zero the counts, send the requests, dump the
// counts. It returns the instructions of the server and, withRedis, of
// Redis, and the script calls Redis counted.
func (m *instructionMeter) round(ctx context.Context, run *callgrind.Run, c *client, w workload, conc int, withRedis bool) (server, redisIr uint64, scripts int64, err error) {
	// What the previous requests left running (a response being written,
	// the collector) ends before the counts start.
	time.Sleep(200 * time.Millisecond)
	withRedis = withRedis && m.redis != nil
	var before redisStats
	if withRedis {
		if before, err = readRedisStats(ctx, m.rc); err != nil {
			return 0, 0, 0, err
		}
		if err = m.redis.Zero(ctx); err != nil {
			return 0, 0, 0, err
		}
	}
	if err = run.Zero(ctx); err != nil {
		return 0, 0, 0, err
	}
	if _, err = m.send(ctx, c, w, conc, m.o.Requests); err != nil {
		return 0, 0, 0, err
	}
	time.Sleep(200 * time.Millisecond) // the last answer's tail: its goroutine ending, the stream closing
	if server, err = run.Instructions(ctx); err != nil {
		return 0, 0, 0, err
	}
	if withRedis {
		if redisIr, err = m.redis.Instructions(ctx); err != nil {
			return 0, 0, 0, err
		}
		after, err := readRedisStats(ctx, m.rc)
		if err != nil {
			return 0, 0, 0, err
		}
		scripts = after.minus(before).scripts
	}
	return server, redisIr, scripts, nil
}

// send sends n requests of w at concurrency conc and checks that every one
// was answered as w expects.
func (m *instructionMeter) send(ctx context.Context, c *client, w workload, conc, n int) (result, error) {
	if n == 0 {
		return result{}, nil
	}
	r := c.drive(ctx, w, cell{conc: conc, window: 30 * time.Minute, maxCount: int64(n), rpcTimeout: time.Minute})
	if r.decisions != int64(n) || r.unexpected != 0 || r.rpcErrors != 0 {
		return r, fmt.Errorf("%d of %d requests answered, %d unexpectedly, %d RPC errors (first: %v)", r.decisions, n, r.unexpected, r.rpcErrors, r.firstErr)
	}
	return r, nil
}

// instructionRows is the table: one row per cell in table order, its
// instructions per decision (the mean over its rounds) against its
// baseline's at the same concurrency, and the rounds' spread.
func instructionRows(rows []instructionRow) [][]string {
	type key struct {
		id   string
		conc int
	}
	at := map[key]instructionRow{}
	for _, r := range rows {
		at[key{r.sc.id, r.conc}] = r
	}
	out := [][]string{{"scenario", "conc", "server instr/dec", "baseline instr/dec", "server ÷ baseline", "by round", "Redis instr/dec", "Redis by round", "server+Redis ÷ baseline", "scripts/dec"}}
	for _, sc := range scenarios { // table order
		for _, r := range rows {
			if r.sc.id != sc.id {
				continue
			}
			base := sc.baseID()
			if sc.id == "a'" { // a baseline of its own
				base = sc.id
			}
			b, ok := at[key{base, r.conc}]
			line := []string{sc.label, strconv.Itoa(r.conc), fmt.Sprintf("%.0f", r.meanServer()), "?", "?", "-", "-", "-", "-", "-"}
			if ok {
				line[3] = fmt.Sprintf("%.0f", b.meanServer())
				line[4] = fmt.Sprintf("%.3f", r.meanServer()/b.meanServer())
				if len(r.server) >= 2 && len(b.server) == len(r.server) {
					var ratios []float64
					for i := range r.server {
						ratios = append(ratios, r.server[i]/b.server[i])
					}
					line[5] = spread3(ratios)
				}
			}
			if r.redis != nil {
				line[6] = fmt.Sprintf("%.0f", r.meanRedis())
				if len(r.redis) >= 2 {
					line[7] = fmt.Sprintf("%.0f–%.0f", slices.Min(r.redis), slices.Max(r.redis))
				}
				if ok {
					line[8] = fmt.Sprintf("%.3f", (r.meanServer()+r.meanRedis())/b.meanServer())
				}
				line[9] = fmt.Sprintf("%.2f", r.scripts)
			}
			out = append(out, line)
		}
	}
	return out
}

// spread3 is "lowest–highest" of xs to three decimals: ratios that hold
// still need the third to show how still.
func spread3(xs []float64) string {
	return fmt.Sprintf("%.3f–%.3f", slices.Min(xs), slices.Max(xs))
}

// printInstructions prints the run's settings and the table.
func printInstructions(w io.Writer, o InstructionOptions, mach, valgrind string, rows []instructionRow) {
	fmt.Fprintf(w, "machine: %s · %s\n", mach, valgrind)
	fmt.Fprintf(w, "run: %s; instructions (callgrind's Ir, every thread) of the serving process, and of Redis where the scenario decides there, between callgrind_control --zero before and --dump after each round: %d rounds of %d requests, fresh callers each, after %d warm-up requests; %d distinct callers; the load generator outside valgrind; everything on 127.0.0.1\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.Rounds, o.Requests, o.Warmup, o.Keys)
	gc := "GOGC=" + o.GOGC
	if o.GOGC == "off" {
		gc += " (no collection: allocation is counted, the collector's cycles are not)"
	}
	if o.GOMAXPROCS > 0 {
		gc += fmt.Sprintf(", GOMAXPROCS=%d", o.GOMAXPROCS)
	}
	fmt.Fprintf(w, "both Go servers: %s, GODEBUG=asyncpreemptoff=1 (callgrind cannot follow Go's preemption signals); floodgate's Redis timeouts raised to 10s, so that no decision is answered by the failure mode because valgrind is slow\n", gc)
	fmt.Fprintln(w, "server ÷ baseline: floodgate's instructions per decision over the no-op server's per request on the same requests ((a) for Check, (a') for the rate limit API); by round: the same, round against round (Redis': its instructions per decision, lowest–highest; they include its timer events, ten a second, so a slower round counts a few more); scripts/dec: Redis' script calls per decision (1.00 at concurrency 1: every decision reached Redis)")
	fmt.Fprintln(w)
	writeMarkdown(w, instructionRows(rows))
}
