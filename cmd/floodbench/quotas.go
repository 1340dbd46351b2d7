package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/floodgate/floodgate/internal/bench"
)

// runQuotas parses floodbench rlqs's flags and runs bench.Quotas.
func runQuotas(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlqs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.DefaultQuotas
	fs.StringVar(&o.Floodgate, "floodgate", o.Floodgate, "the floodgate binary")
	fs.StringVar(&o.Redis, "redis", o.Redis, "the redis-server binary")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long the Envoys ask (at most 10m)")
	fs.IntVar(&o.Replicas, "replicas", o.Replicas, "floodgate replicas on the one redis-server")
	fs.IntVar(&o.Envoys, "envoys", o.Envoys, "simulated Envoys, spread over the replicas")
	fs.Int64Var(&o.Limit, "limit", o.Limit, "the bucket's limit, requests a second")
	fs.Float64Var(&o.Demand, "demand", o.Demand, "the fleet's demand, a multiple of --limit")
	fs.Float64Var(&o.Heavy, "heavy", o.Heavy, "the heavy Envoy's part of the demand")
	fs.DurationVar(&o.Shift, "shift", o.Shift, "how often the heavy Envoy changes")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "Envoy's report interval (5s, hardcoded in Envoy)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Duration < time.Second || o.Duration > 10*time.Minute || o.Replicas < 1 || o.Replicas > 8 || o.Envoys < 2 || o.Envoys > 64 ||
		o.Limit < 1 || o.Demand <= 0 || o.Demand*float64(o.Limit) > 100_000 || o.Heavy <= 0 || o.Heavy >= 1 || o.Shift < time.Second || o.Interval <= 0 {
		fmt.Fprintln(stderr, "floodbench rlqs: --duration from 1s to 10m, --replicas 1 to 8, --envoys 2 to 64, --limit at least 1, --demand × --limit at most 100000 a second, --heavy between 0 and 1, --shift at least 1s")
		return 2
	}
	if err := bench.Quotas(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "floodbench rlqs:", err)
		return 1
	}
	return 0
}
