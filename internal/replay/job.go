package replay

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/httpauthz"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Job is one `floodgate replay` as its flags ask for it: which log, which
// what-ifs, which outputs. The command fills it from its flags, checks it
// with Validate, and leaves the rest to Replay and Write.
type Job struct {
	ConfigPath    string
	LogPath       string // "-" reads the stdin given to Replay
	JSON          bool
	Top           int
	Redact        bool
	ReorderWindow time.Duration
	// Sets are the --set flags as given; with Compare each is one more run
	// of the log, else they are merged into one.
	Sets       []string
	Compare    bool
	HTMLPath   string
	MaxCallers int
	// PrintLogFormat prints the Envoy access-log block (LogFormat) instead
	// of replaying, to PrintLogTo; PrintLogToGiven says --print-log-to was.
	PrintLogFormat  bool
	PrintLogTo      string
	PrintLogToGiven bool
	// Door is the front end whose decisions the log replays: "check" (the
	// default: Envoy's ext_authz Check, an Envoy access log) or "http" (the
	// HTTP authorization door: its client address rule,
	// http_authz.trusted_hops, and nginx's log, NginxLogFormat).
	Door string

	sets []Set
}

// UsageError is a Job the command line got wrong (exit 2, not 1).
type UsageError struct{ msg string }

func (e UsageError) Error() string { return e.msg }

func usage(format string, a ...any) error { return UsageError{fmt.Sprintf(format, a...)} }

// Validate checks the flags against each other and parses the --set
// overrides; every error is a UsageError.
func (j *Job) Validate() error {
	if j.ConfigPath == "" {
		return usage("--config FILE is required (the configuration whose policies decide the log)")
	}
	switch j.Door {
	case "":
		j.Door = "check"
	case "check", "http":
	default:
		return usage("--door %q: want check (Envoy's Check, an Envoy access log) or http (the HTTP authorization door, nginx's log)", j.Door)
	}
	if j.PrintLogToGiven && !j.PrintLogFormat {
		return usage("--print-log-to says where the block --print-log-format prints has Envoy write: give both")
	}
	if j.PrintLogFormat {
		return nil
	}
	switch {
	case j.LogPath == "":
		return usage("--log FILE is required (an Envoy JSON access log; - reads standard input; --print-log-format prints the Envoy block that writes one)")
	case j.ReorderWindow < 0:
		return usage("--reorder-window must be >= 0")
	case j.MaxCallers < 0:
		return usage("--max-callers must be >= 0 (0: no bound)")
	case j.Top < 0:
		return usage("--top must be >= 0 (0: no caller lists)")
	case j.Compare && j.LogPath == "-":
		return usage("--compare reads the log once per set: give --log a file, not standard input")
	case j.Compare && len(j.Sets) == 0:
		return usage("--compare needs at least one --set to compare with the configuration")
	}
	j.sets = nil
	for _, s := range j.Sets {
		set, err := ParseSet(s)
		if err != nil {
			return UsageError{err.Error()}
		}
		j.sets = append(j.sets, set)
	}
	return nil
}

// runs are the what-ifs the log is replayed with: the merged --set, or with
// Compare the configuration as it is and then each --set.
func (j *Job) runs() []Set {
	if j.Compare {
		return append([]Set{{}}, j.sets...)
	}
	return []Set{Merge(j.sets)}
}

// engines compiles the configuration's policies once per run; an override
// the policies refuse is a UsageError.
func (j *Job) engines(specs []extauthz.PolicySpec, opts extauthz.Options) ([]*extauthz.Engine, error) {
	var engines []*extauthz.Engine
	for _, s := range j.runs() {
		e, err := s.Apply(specs, opts)
		if err != nil {
			return nil, UsageError{err.Error()}
		}
		engines = append(engines, e)
	}
	return engines, nil
}

// Replay decides the log with cfg's policies, once per run, and reports
// each run. Notes (a hash secret replaced, malformed lines and their count)
// go to stderr once.
func (j *Job) Replay(ctx context.Context, cfg *door.Config, stdin io.Reader, stderr io.Writer) ([]Labeled, error) {
	if cfg.SecretReplaced != "" {
		fmt.Fprintf(stderr, "floodgate replay: %s: %s; replay shares no bucket, so it uses a random secret for this run (callers are the same within the run; --redact hashes differ from serve's)\n", j.ConfigPath, cfg.SecretReplaced)
	}
	opts := door.EngineOptions(cfg.Config)
	if j.Door == "http" {
		opts = httpauthz.EngineOptions(cfg.Config)
	}
	engines, err := j.engines(cfg.Policies, opts)
	if err != nil {
		return nil, err
	}
	// The store as serve would run it: the memory backend with its cap
	// (config fills in its default when the file leaves it out, as for
	// serve); for a Redis configuration no cap (Redis keeps every live
	// bucket).
	maxBuckets := 1 << 40
	if cfg.Store.Backend == "memory" {
		maxBuckets = cfg.Store.Memory.MaxBuckets
	}
	runs := j.runs()
	var out []Labeled
	for i, e := range engines {
		in, closeIn, err := OpenLog(j.LogPath, stdin)
		if err != nil {
			return nil, err
		}
		malformed := stderr
		if i > 0 {
			malformed = nil // the same lines, said once
		}
		res, err := Run(ctx, in, Options{Engine: e, MaxBuckets: maxBuckets, ReorderWindow: j.ReorderWindow,
			Workers: runtime.GOMAXPROCS(0), Malformed: malformed, ShowMalformed: DefaultShowMalformed, MaxLineBytes: DefaultMaxLineBytes,
			MaxCallers: j.MaxCallers})
		closeIn()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", j.LogPath, err)
		}
		if i == 0 {
			if res.Skipped > 0 {
				fmt.Fprintf(stderr, "floodgate replay: %d %s skipped (malformed or blank)\n", res.Skipped, fielderr.Plural(res.Skipped, "line", "lines"))
			}
			// The runs read the same lines: one refusal says it for all.
			if err := res.Undecided(); err != nil {
				return nil, fmt.Errorf("%s: %w", j.LogPath, err)
			}
		}
		out = append(out, Labeled{Label: runs[i].Text, Result: res.Report(ReportOptions{Top: j.Top, Redact: j.Redact})})
	}
	return out, nil
}

// Write prints the runs to stdout (a table, or JSON; with Compare one
// table of every run) and, when asked, writes the HTML report.
func (j *Job) Write(stdout io.Writer, runs []Labeled) error {
	if j.HTMLPath != "" {
		if err := writeHTMLFile(j.HTMLPath, j.ConfigPath, runs); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	switch {
	case j.Compare:
		return WriteComparison(stdout, runs, j.JSON)
	case j.JSON:
		return runs[0].Result.WriteJSON(stdout)
	}
	return runs[0].Result.WriteTable(stdout)
}

func writeHTMLFile(path, configName string, runs []Labeled) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = WriteHTML(f, configName, runs)
	return errors.Join(err, f.Close())
}

// OpenLog opens the log: a file, gzip-compressed when its name ends in .gz
// (as logrotate leaves old logs), or stdin for "-".
func OpenLog(path string, stdin io.Reader) (io.Reader, func(), error) {
	if path == "-" {
		return stdin, func() {}, nil
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
