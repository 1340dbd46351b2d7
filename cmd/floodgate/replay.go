package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/replay"
)

// replayGOGC is replay's collector target (GOGC) unless GOGC is set.
const replayGOGC = 200

// replayCmd decides an Envoy access log offline with a configuration's
// policies and reports what they would have done (package replay).
func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("replay", stderr)
	var j replay.Job
	var sets listFlag
	fs.StringVar(&j.ConfigPath, "config", "", "configuration whose policies decide the log")
	fs.StringVar(&j.LogPath, "log", "", "Envoy JSON access log, one object a line (FILE.gz is read compressed; - reads standard input)")
	fs.BoolVar(&j.JSON, "json", false, "print the result as JSON")
	fs.IntVar(&j.Top, "top", 10, "callers listed with the most denials")
	fs.BoolVar(&j.Redact, "redact", false, "show callers as a hash of their bucket identity, not their key in the clear")
	fs.DurationVar(&j.ReorderWindow, "reorder-window", replay.DefaultReorderWindow, "how far out of start_time order a line may come (Envoy logs a request when it ends)")
	fs.IntVar(&j.MaxCallers, "max-callers", 0, "hold at most N distinct callers (about 1 KiB each, docs/replay.md); a line that would add one more is counted, not decided (0: no bound)")
	fs.Var(&sets, "set", "override a policy for the run: POLICY.capacity=N, POLICY.refill_per_second=R or POLICY.mode=shadow (repeatable; with --compare each --set is one more run of the log, its overrides joined by commas)")
	fs.BoolVar(&j.Compare, "compare", false, "run the log once with the configuration as it is and once per --set, and print one table")
	fs.BoolVar(&j.PrintLogFormat, "print-log-format", false, "print the Envoy access-log block that logs what this configuration's policies read, and exit")
	fs.StringVar(&j.PrintLogTo, "print-log-to", replay.DefaultLogPath, "with --print-log-format: the file Envoy's access logger writes, or - for Envoy's standard output (a container's log)")
	fs.StringVar(&j.HTMLPath, "html", "", "also write a self-contained HTML report (inline SVG charts) to this file")
	fs.StringVar(&j.Door, "door", "check", "whose decisions to replay: check (Envoy's ext_authz Check, from an Envoy access log) or http (the HTTP authorization door, from the nginx log --print-log-format --door http prints; client addresses by http_authz.trusted_hops)")
	if !parseArgs(fs, args) {
		return 2
	}
	j.Sets = sets
	fs.Visit(func(f *flag.Flag) { j.PrintLogToGiven = j.PrintLogToGiven || f.Name == "print-log-to" })
	if err := j.Validate(); err != nil {
		fmt.Fprintln(stderr, "floodgate replay:", err)
		return 2
	}
	// Replay serves nothing and its buckets live for this run: a hash
	// secret the production machines have and this one lacks is no reason
	// to refuse the configuration (door.LoadOffline).
	cfg, err := doors.LoadOffline(j.ConfigPath)
	if err != nil {
		printProblems(stderr, err)
		return 1
	}
	if j.PrintLogFormat && j.Door == "http" {
		to := j.PrintLogTo
		if !j.PrintLogToGiven {
			to = replay.DefaultNginxLogPath
		}
		fmt.Fprint(stdout, replay.NginxLogFormat(cfg.Engine, j.ConfigPath, to))
		return 0
	}
	if j.PrintLogFormat {
		fmt.Fprint(stdout, replay.LogFormat(cfg.Engine, j.ConfigPath, j.PrintLogTo))
		return 0
	}
	// Replay holds every caller while it allocates for every line: a
	// collector that waits for the heap to triple costs it no more CPU
	// than serve's setting and much less peak memory (make bench-replay
	// measures both). GOGC, when set, wins; the container's memory limit
	// applies as for serve.
	gogc := replayGOGC
	planGC(config.Runtime{GOGC: &gogc, MemoryLimitRatio: cfg.Runtime.MemoryLimitRatio}, 0, os.LookupEnv, cgroupMemoryLimit).apply()
	runs, err := j.Replay(ctx, cfg, os.Stdin, stderr)
	if err == nil {
		err = j.Write(stdout, runs)
	}
	if err != nil {
		fmt.Fprintln(stderr, "floodgate replay:", err)
		if errors.As(err, new(replay.UsageError)) {
			return 2
		}
		return 1
	}
	return 0
}
