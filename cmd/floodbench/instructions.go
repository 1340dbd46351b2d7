package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate/internal/bench"
	"github.com/floodgate/floodgate/internal/config"
)

// runInstructions parses floodbench instructions' flags and runs
// bench.CountInstructions.
func runInstructions(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("instructions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o bench.InstructionOptions
	fs.StringVar(&o.Floodgate, "floodgate", "bin/floodgate", "the floodgate binary (make bench-instructions builds it)")
	fs.StringVar(&o.RedisServer, "redis-server", "redis-server", "the redis-server binary")
	fs.StringVar(&o.Valgrind, "valgrind", "valgrind", "the valgrind binary (callgrind_control is looked for beside it, then on PATH)")
	scen := fs.String("scenarios", "a,b,c-lease,e,b-rls", "scenarios to count, from "+strings.Join(bench.InstructionScenarios, " ")+"; (a) always, and (a') with (b-rls), as their baselines")
	conc := fs.String("conc", "1", "concurrencies (requests in flight); 1 sends the same sequence in the same order every run")
	fs.IntVar(&o.Requests, "requests", 2000, "requests counted per round")
	fs.IntVar(&o.Warmup, "warmup", 200, "requests sent before each scenario's first round, not counted")
	fs.IntVar(&o.Rounds, "rounds", 2, "rounds of --requests each, every one a fresh part of the callers: their spread is how far the count moves")
	fs.IntVar(&o.Keys, "keys", 100_000, "distinct callers the requests are drawn from, at least warmup + rounds × requests")
	fs.StringVar(&o.GOGC, "gogc", "off", "the collector setting (GOGC) of floodgate and the no-op server alike: off (no collection: a cycle costs millions of instructions and when cycles fall would move the counts by a tenth from round to round; allocation itself is counted) or a percentage (floodgate's default is "+strconv.Itoa(config.DefaultGOGC)+")")
	fs.IntVar(&o.GOMAXPROCS, "gomaxprocs", 1, "GOMAXPROCS of both Go servers (0: Go's default, the CPUs). With more than one, the scheduler's idle threads spin looking for work for as long as valgrind and the machine keep them waiting, which moved a round's count by up to 3.4%; with one, by 0.6%")
	fs.StringVar(&o.OutDir, "out", "", "keep callgrind's output files in this directory (callgrind_annotate reads them: which functions the instructions went to)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Scenarios = strings.Split(*scen, ",")
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 256 {
			fmt.Fprintf(stderr, "floodbench instructions: bad concurrency %q (1 to 256)\n", s)
			return 2
		}
		o.Conc = append(o.Conc, n)
	}
	if n, err := strconv.Atoi(o.GOGC); o.GOGC != "off" && (err != nil || n < 1) {
		fmt.Fprintf(stderr, "floodbench instructions: --gogc %q: off or a percentage above 0\n", o.GOGC)
		return 2
	}
	if o.Requests < 1 || o.Requests > 1_000_000 || o.Warmup < 0 || o.Warmup > 1_000_000 || o.Rounds < 1 || o.Rounds > 20 || o.Keys < 1 || o.Keys > 1<<20 {
		fmt.Fprintln(stderr, "floodbench instructions: need 1 <= --requests <= 1000000, 0 <= --warmup <= 1000000, 1 <= --rounds <= 20, 1 <= --keys <= 1048576")
		return 2
	}
	if err := bench.CountInstructions(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "floodbench instructions:", err)
		return 1
	}
	return 0
}
