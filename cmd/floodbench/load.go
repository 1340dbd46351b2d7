package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/floodgate/floodgate/internal/bench"
)

// runLoad parses floodbench load's flags and runs bench.Load.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o bench.LoadOptions
	fs.StringVar(&o.Target, "target", "", "ext_authz server HOST:PORT (loopback)")
	fs.StringVar(&o.Scenario, "scenario", "b", "which requests to send: b (distinct keys under /b/), c (hot key), d (over-limit flood), f (two policies); see floodbench run")
	fs.IntVar(&o.Keys, "keys", 100_000, "distinct callers for scenarios b and f")
	fs.IntVar(&o.Conc, "conc", 64, "requests in flight (with --rate, the most in flight at once)")
	fs.Float64Var(&o.Rate, "rate", 0, "send open-loop at this many requests a second (Poisson arrivals, each timed from its scheduled send) instead of closed-loop")
	fs.IntVar(&o.Conns, "conns", 1, "gRPC connections")
	fs.StringVar(&o.Client, "client", bench.ClientLean, "lean: pre-encoded requests, answers' status read from the wire; proto: protobuf's work on every call too (decode and marshal the request, decode the answer)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "how long to send (at most 10m)")
	fs.Int64Var(&o.Max, "max", 50_000_000, "send at most this many requests")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Target == "" || o.Duration <= 0 || o.Duration > 10*time.Minute || o.Conc < 1 || o.Max < 1 || o.Rate < 0 || o.Rate > 1e6 {
		fmt.Fprintln(stderr, "floodbench load: need --target, 0 < --duration <= 10m, --conc >= 1, --max >= 1, 0 <= --rate <= 1000000")
		return 2
	}
	if err := bench.LoadScenario(o.Scenario); err != nil {
		fmt.Fprintln(stderr, "floodbench load:", err)
		return 2
	}
	if err := bench.Load(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "floodbench load:", err)
		return 1
	}
	return 0
}
