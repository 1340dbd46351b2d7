package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/floodgate/floodgate/internal/bench"
	"github.com/floodgate/floodgate/internal/config"
)

// runNoop serves the no-op server until ctx ends (bench.ServeNoop).
func runNoop(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("noop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "gRPC listen address (loopback)")
	gogc := fs.Int("gogc", config.DefaultGOGC, "the collector setting (GOGC), as floodgate's runtime.gogc; the GOGC environment variable, when set, wins")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := bench.ServeNoop(ctx, *listen, *gogc, stdout); err != nil {
		fmt.Fprintln(stderr, "floodbench noop:", err)
		return 1
	}
	return 0
}

// runNoopHTTP serves the no-op HTTP server until ctx ends
// (bench.ServeNoopHTTP).
func runNoopHTTP(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("noop-http", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "HTTP listen address (loopback)")
	gogc := fs.Int("gogc", config.DefaultGOGC, "the collector setting (GOGC), as floodgate's runtime.gogc; the GOGC environment variable, when set, wins")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := bench.CheckLoopback(*listen); err != nil {
		fmt.Fprintln(stderr, "floodbench noop-http:", err)
		return 2
	}
	if err := bench.ServeNoopHTTP(ctx, *listen, *gogc, stdout); err != nil {
		fmt.Fprintln(stderr, "floodbench noop-http:", err)
		return 1
	}
	return 0
}
