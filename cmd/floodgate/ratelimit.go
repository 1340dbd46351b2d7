package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/floodgate/floodgate/limiter/fielderr"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/peerenv"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/store"
)

// ratelimitName is the name the binary answers to as a drop-in for
// envoyproxy/ratelimit: the image's /bin/ratelimit, which Envoy Gateway's
// rate limit Deployment runs with the peer's environment alone.
const ratelimitName = "ratelimit"

const ratelimitUsage = `ratelimit — Floodgate as envoyproxy/ratelimit: configured by that server's
environment variables (docs/ratelimit.md lists each and how it is honoured)

Usage:
  ratelimit          serve Envoy's rate limit service from the environment
  ratelimit config   print the Floodgate configuration the environment makes,
                     and what is not implemented, then exit
`

// runRatelimit is the whole program when started as ratelimit: it builds
// the configuration from the environment (lookup, environ) and serves it
// as floodgate serve serves a file.
func runRatelimit(ctx context.Context, args []string, lookup func(string) (string, bool), environ []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help"):
		fmt.Fprint(stdout, ratelimitUsage)
		return 0
	case len(args) == 1 && (args[0] == "version" || args[0] == "--version"):
		printVersion(stdout)
		return 0
	case len(args) > 1 || (len(args) == 1 && args[0] != "config"):
		fmt.Fprintf(stderr, "ratelimit: unexpected arguments %q\n\n%s", args, ratelimitUsage)
		return 2
	}
	res, err := peerenv.Build(lookup, environ)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit: Floodgate does not run with this environment (docs/ratelimit.md):\n%v\n", err)
		return 1
	}
	if len(args) == 1 {
		stdout.Write(res.YAML)
		for _, w := range res.Warnings {
			fmt.Fprintf(stdout, "# not implemented: %s\n", w)
		}
		return 0
	}
	for k, v := range res.Env {
		os.Setenv(k, v)
	}
	cfg, err := doors.LoadBytes(peerenv.Source, res.YAML)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit: %v\n", explainEnv(res, err))
		return 1
	}
	log, err := newLogger(cfg.Log, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "ratelimit:", err)
		return 1
	}
	defer log.Sync()
	for _, w := range res.Warnings {
		log.Warn("envoyproxy/ratelimit's "+fielderr.Plural(len(w.Vars), "variable", "variables")+" "+strings.Join(w.Vars, ", ")+": "+w.Msg,
			zap.Strings("variables", w.Vars))
	}
	gc := planGC(cfg.Runtime, store.MemoryBytes(cfg.Config), os.LookupEnv, cgroupMemoryLimit)
	gc.apply()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	data := res.YAML
	src := source{name: peerenv.Source, read: func() ([]byte, error) { return data, nil },
		explain: func(err error) error { return explainEnv(res, err) }}
	if err := runServer(ctx, cfg, src, log); err != nil {
		log.Error("floodgate stopped", zap.Error(err))
		return 1
	}
	return 0
}

// explainEnv names, for a problem of the configuration built from the
// environment, the variables the user set rather than that configuration's
// settings and lines, which the user never wrote: the rate limit files'
// problems (each at its own file and line) under RUNTIME_ROOT and the
// variables beside it, the others as res.Explain names them.
func explainEnv(res *peerenv.Result, err error) error {
	var le *ratelimit.LimitsError
	if !errors.As(err, &le) {
		return res.Explain(err)
	}
	vars := res.VarsOf("rls.config")
	if len(le.Problems) > 0 {
		return peerenv.Refused{{Vars: vars, Msg: le.Detail()}}
	}
	return peerenv.Refused{{Vars: vars, Msg: "the rate limit configuration they name, " + le.Path + ", cannot be read: " + le.Err.Error()}}
}
