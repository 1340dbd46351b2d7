package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/floodgate/floodgate/internal/bench"
)

// runGlobal parses floodbench global's flags and runs bench.Global.
func runGlobal(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("global", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.DefaultGlobal
	fs.StringVar(&o.Redis, "redis", o.Redis, "the redis-server binary")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long each run (without leases, with them) offers its load (at most 10m)")
	fs.IntVar(&o.Replicas, "replicas", o.Replicas, "replicas sharing the bucket")
	fs.Int64Var(&o.Capacity, "capacity", o.Capacity, "the bucket's capacity")
	fs.Int64Var(&o.Rate, "rate", o.Rate, "the bucket's refill, tokens a second")
	fs.StringVar(&o.Floodgate, "floodgate", "", "the floodgate binary: each replica a floodgate serve process (a policy, decided over gRPC Check) instead of a store in floodbench's process")
	fs.Float64Var(&o.Offered, "offered", o.Offered, "requests a second across the replicas, as a multiple of --rate")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Duration <= 0 || o.Duration > 10*time.Minute || o.Replicas < 1 || o.Replicas > 16 || o.Capacity < 1 || o.Rate < 1 || o.Offered <= 0 || o.Offered*float64(o.Rate) > 200_000 {
		fmt.Fprintln(stderr, "floodbench global: --duration from 1ns to 10m, --replicas 1 to 16, --capacity and --rate at least 1, --offered × --rate at most 200000 a second")
		return 2
	}
	if err := bench.Global(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "floodbench global:", err)
		return 1
	}
	return 0
}
