package main

import (
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/replay"
)

// replayGOGC is replay's collector target (GOGC) unless GOGC is set.
const replayGOGC = 200

// replayCmd decides an Envoy access log offline with a configuration's
// policies and reports what they would have done (package replay).
func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("replay", stderr)
	path := fs.String("config", "", "configuration whose policies decide the log")
	logPath := fs.String("log", "", "Envoy JSON access log, one object a line (FILE.gz is read compressed; - reads standard input)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	top := fs.Int("top", 10, "callers listed with the most denials")
	redact := fs.Bool("redact", false, "show callers as a hash of their bucket identity, not their key in the clear")
	window := fs.Duration("reorder-window", replay.DefaultReorderWindow, "how far out of start_time order a line may come (Envoy logs a request when it ends)")
	var sets listFlag
	fs.Var(&sets, "set", "override a policy for the run: POLICY.capacity=N, POLICY.refill_per_second=R or POLICY.mode=shadow (repeatable; with --compare each --set is one more run of the log, its overrides joined by commas)")
	compare := fs.Bool("compare", false, "run the log once with the configuration as it is and once per --set, and print one table")
	printFormat := fs.Bool("print-log-format", false, "print the Envoy access-log block that logs what this configuration's policies read, and exit")
	printTo := fs.String("print-log-to", replay.DefaultLogPath, "with --print-log-format: the file Envoy's access logger writes, or - for Envoy's standard output (a container's log)")
	htmlPath := fs.String("html", "", "also write a self-contained HTML report (inline SVG charts) to this file")
	if !parseArgs(fs, args) {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "floodgate replay: --config FILE is required (the configuration whose policies decide the log)")
		return 2
	}
	// Replay serves nothing and its buckets live for this run: a hash
	// secret the production machines have and this one lacks is no reason
	// to refuse the configuration (config.LoadOffline).
	cfg, err := config.LoadOffline(*path)
	if err != nil {
		printProblems(stderr, err)
		return 1
	}
	printToSet := false
	fs.Visit(func(f *flag.Flag) { printToSet = printToSet || f.Name == "print-log-to" })
	if printToSet && !*printFormat {
		fmt.Fprintln(stderr, "floodgate replay: --print-log-to says where the block --print-log-format prints has Envoy write: give both")
		return 2
	}
	if cfg.SecretReplaced != "" && !*printFormat {
		fmt.Fprintf(stderr, "floodgate replay: %s: %s; replay shares no bucket, so it uses a random secret for this run (callers are the same within the run; --redact hashes differ from serve's)\n", *path, cfg.SecretReplaced)
	}
	if *printFormat {
		fmt.Fprint(stdout, replay.LogFormat(cfg.Engine, *path, *printTo))
		return 0
	}
	if *logPath == "" {
		fmt.Fprintln(stderr, "floodgate replay: --log FILE is required (an Envoy JSON access log; - reads standard input; --print-log-format prints the Envoy block that writes one)")
		return 2
	}
	if *window < 0 {
		fmt.Fprintln(stderr, "floodgate replay: --reorder-window must be >= 0")
		return 2
	}
	if *compare && *logPath == "-" {
		fmt.Fprintln(stderr, "floodgate replay: --compare reads the log once per set: give --log a file, not standard input")
		return 2
	}
	if *compare && len(sets) == 0 {
		fmt.Fprintln(stderr, "floodgate replay: --compare needs at least one --set to compare with the configuration")
		return 2
	}

	var parsed []replay.Set
	for _, s := range sets {
		set, err := replay.ParseSet(s)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate replay: %v\n", err)
			return 2
		}
		parsed = append(parsed, set)
	}
	runs := []replay.Set{replay.Merge(parsed)}
	if *compare {
		runs = append([]replay.Set{{}}, parsed...)
	}
	opts := cfg.EngineOptions()
	engines := make([]*extauthz.Engine, len(runs))
	for i, s := range runs {
		if engines[i], err = s.Apply(cfg.Policies, opts); err != nil {
			fmt.Fprintf(stderr, "floodgate replay: %v\n", err)
			return 2
		}
	}
	// Replay holds every caller while it allocates for every line: a
	// collector that waits for the heap to triple costs it no more CPU
	// than serve's setting and much less peak memory (make bench-replay
	// measures both). GOGC, when set, wins; the container's memory limit
	// applies as for serve.
	gogc := replayGOGC
	planGC(config.Runtime{GOGC: &gogc, MemoryLimitRatio: cfg.Runtime.MemoryLimitRatio}, 0, os.LookupEnv, cgroupMemoryLimit).apply()
	// The store as serve would run it: the memory backend with its cap (0,
	// left out, is the memory store's default, as for serve); for a Redis
	// configuration no cap (Redis keeps every live bucket).
	maxBuckets := 1 << 40
	if cfg.Store.Backend == "memory" {
		maxBuckets = cfg.Store.Memory.MaxBuckets
	}

	results := make([]*replay.Result, len(runs))
	for i := range runs {
		in, closeIn, err := openLog(*logPath)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate replay: %v\n", err)
			return 1
		}
		malformed := stderr
		if i > 0 {
			malformed = nil // the same lines, said once
		}
		res, err := replay.Run(ctx, in, replay.Options{Engine: engines[i], MaxBuckets: maxBuckets,
			ReorderWindow: *window, Malformed: malformed})
		closeIn()
		if err != nil {
			fmt.Fprintf(stderr, "floodgate replay: %s: %v\n", *logPath, err)
			return 1
		}
		if res.Skipped > 0 && i == 0 {
			fmt.Fprintf(stderr, "floodgate replay: %d %s skipped (malformed or blank)\n", res.Skipped, plural(res.Skipped, "line", "lines"))
		}
		results[i] = res.Report(replay.ReportOptions{Top: *top, Redact: *redact})
	}
	if *htmlPath != "" {
		f, err := os.Create(*htmlPath)
		if err == nil {
			var rs []replay.Labeled
			for i, r := range results {
				rs = append(rs, replay.Labeled{Label: runs[i].Text, Result: r})
			}
			err = replay.WriteHTML(f, *path, rs)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "floodgate replay: --html: %v\n", err)
			return 1
		}
	}
	if *compare {
		return writeComparison(stdout, stderr, runs, results, *asJSON)
	}
	if *asJSON {
		err = results[0].WriteJSON(stdout)
	} else {
		err = results[0].WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "floodgate replay: %v\n", err)
		return 1
	}
	return 0
}

// openLog opens the log: a file, gzip-compressed when its name ends in .gz
// (as logrotate leaves old logs), or standard input for "-".
func openLog(path string) (io.Reader, func(), error) {
	if path == "-" {
		return os.Stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, func() { f.Close() }, nil
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return z, func() { z.Close(); f.Close() }, nil
}

// writeComparison prints one row per policy and run.
func writeComparison(stdout, stderr io.Writer, runs []replay.Set, results []*replay.Result, asJSON bool) int {
	if asJSON {
		type run struct {
			Set string `json:"set"`
			*replay.Result
		}
		out := struct {
			Runs []run `json:"runs"`
		}{}
		for i, r := range results {
			out.Runs = append(out.Runs, run{Set: runs[i].Text, Result: r})
		}
		if err := replay.WriteIndentedJSON(stdout, out); err != nil {
			fmt.Fprintf(stderr, "floodgate replay: %v\n", err)
			return 1
		}
		return 0
	}
	r0 := results[0]
	fmt.Fprintf(stdout, "%d lines: %d decided, %d skipped, %d late; from %s to %s\n\n", r0.Lines, r0.Decided, r0.Skipped, r0.Late, r0.From, r0.To)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "policy\tset\tmode\tcapacity\trefill/s\trequests\tallowed\tdenied\tdenied callers\tcapacity needed p50/p90/p99/max")
	for p := range r0.Policies {
		for i, r := range results {
			x := r.Policies[p]
			set := runs[i].Text
			if set == "" {
				set = "(configuration)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d/%d/%d/%d\n", x.Name, set, x.Mode, x.Capacity, x.RefillPerSecond,
				x.Requests, x.Allowed, x.Denied, x.CallersDenied,
				x.CapacityNeeded.P50, x.CapacityNeeded.P90, x.CapacityNeeded.P99, x.CapacityNeeded.Max)
		}
	}
	tw.Flush()
	return 0
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
