// Command floodgate is the Floodgate rate limiter: an Envoy ext_authz gRPC
// server (serve), a configuration checker (validate), a small ext_authz
// client for trying it out (check), and a view of who is being limited
// across replicas (top). Started under the name ratelimit, it serves
// Envoy's rate limit service configured by envoyproxy/ratelimit's
// environment variables (ratelimit.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	// A quota's time zone (quota.timezone) must load where the image has
	// no /usr/share/zoneinfo: the zone database is built in (some 450 kB).
	_ "time/tzdata"
)

const usage = `floodgate — a distributed rate limiter for Envoy and Istio (ext_authz)

Usage:
  floodgate serve    [--config FILE] [--log-format json|console] [--pprof 127.0.0.1:PORT]
  floodgate validate --config FILE [--connect]
  floodgate check    [--addr 127.0.0.1:9191] [--path /] [-H 'name: value']... [--count N] [--grpc | --http]
  floodgate replay   --config FILE --log FILE|- [--json] [--html FILE] [--set POLICY.FIELD=V]... [--compare]
                     [--top N] [--redact] [--reorder-window 60s] | --config FILE --print-log-format [--print-log-to FILE|-]
  floodgate top      [--admin HOST:PORT[,HOST:PORT...]] [--once | --json] [--rows N] [--interval 2s]
  floodgate bucket   get|add N|set N|reset --policy P --key VALUE [--addr 127.0.0.1:9192] [--token-file FILE]
  floodgate explain  [check's flags: --path /, -H 'name: value'..., --rls --domain D --descriptor k=v...] [--addr 127.0.0.1:9192]
  floodgate version

Without --config, serve runs the embedded default: in-memory store, one sample
policy (5 requests, then 1 a second, per caller), loopback only.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// Started as /bin/ratelimit (the image's link to this binary), it is a
	// drop-in for envoyproxy/ratelimit, configured by that server's
	// environment variables.
	if filepath.Base(os.Args[0]) == ratelimitName {
		os.Exit(runRatelimit(context.Background(), os.Args[1:], os.LookupEnv, os.Environ(), os.Stdout, os.Stderr))
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; tests call it in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if noArgs[args[0]] && !parseArgs(newFlagSet(args[0], stderr), args[1:]) {
		return 2
	}
	switch args[0] {
	case "serve":
		// Only serve handles SIGINT and SIGTERM itself (to drain); the
		// other commands are stopped by them as any program is.
		ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return serve(ctx, args[1:], stdout, stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "check":
		return check(ctx, args[1:], stdout, stderr)
	case "replay":
		return replayCmd(ctx, args[1:], stdout, stderr)
	case "top":
		return top(ctx, args[1:], stdout, stderr)
	case "bucket":
		return bucketCmd(ctx, args[1:], stdout, stderr)
	case "explain":
		return explainCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		printVersion(stdout)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// noArgs lists the subcommands that take neither flags nor arguments.
var noArgs = map[string]bool{"version": true, "--version": true, "help": true, "-h": true, "--help": true}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseArgs parses a subcommand's flags, and refuses what is left over:
// no subcommand takes positional arguments, and one given by mistake
// (`floodgate serve my.yaml`) must not be silently ignored. The error
// suggests the flag the argument was probably meant for. It reports false
// after writing the problem to fs.Output().
func parseArgs(fs *flag.FlagSet, args []string) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() == 0 {
		return true
	}
	extra := fs.Arg(0)
	msg := fmt.Sprintf("floodgate %s: unexpected argument %q", fs.Name(), extra)
	if fs.NArg() > 1 {
		msg = fmt.Sprintf("floodgate %s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	if f := flagFor(fs, extra); f != "" {
		msg += fmt.Sprintf(": did you mean --%s %s?", f, extra)
	} else if slices.ContainsFunc(fs.Args(), func(a string) bool { return strings.HasPrefix(a, "-") }) {
		msg += ": flags go before any other argument"
	}
	fmt.Fprintln(fs.Output(), msg)
	return false
}

// flagFor guesses which of fs's flags a stray argument was meant for: a
// file for --config, a path for --path, an address for --admin.
func flagFor(fs *flag.FlagSet, arg string) string {
	switch {
	case fs.Lookup("config") != nil && (strings.Contains(arg, string(filepath.Separator)) || strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml")):
		return "config"
	case fs.Lookup("config") != nil:
		if fi, err := os.Stat(arg); err == nil && fi.Mode().IsRegular() {
			return "config"
		}
	case fs.Lookup("path") != nil && strings.HasPrefix(arg, "/"):
		return "path"
	case fs.Lookup("admin") != nil && strings.Contains(arg, ":"):
		return "admin"
	}
	return ""
}
