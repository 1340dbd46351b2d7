// Command floodgate is the Floodgate rate limiter: an Envoy ext_authz gRPC
// server (serve), a configuration checker (validate) and a small ext_authz
// client for trying it out (check).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `floodgate — a distributed rate limiter for Envoy and Istio (ext_authz)

Usage:
  floodgate serve    [--config FILE] [--log-format json|console] [--pprof 127.0.0.1:PORT]
  floodgate validate --config FILE [--connect]
  floodgate check    --addr HOST:PORT --path P [-H 'name: value']... [--count N]
  floodgate version

Without --config, serve runs the embedded default: in-memory store, one sample
policy (5 requests, then 1 a second, per caller), loopback only.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; tests call it in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "check":
		return check(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "floodgate", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate: unknown command %q\n\n%s", args[0], usage)
	return 2
}
