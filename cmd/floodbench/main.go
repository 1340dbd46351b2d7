// Command floodbench measures Floodgate end to end on one machine: it starts
// its own redis-server, a no-op ext_authz server (the ceiling) and the real
// floodgate binary with generated configurations, all on 127.0.0.1, drives
// each with the same lean gRPC client at several concurrencies, and prints
// one table: decisions/s, p50, p99, the ratio to the no-op server measured
// in the same run, and Redis CPU per decision; then two reference rows the
// load generator drives itself over go-redis on the same redis-server, one
// script round trip (rt) and a naive one-call-per-decision limiter (naive),
// and what each scenario adds to the no-op hop's latency in round trips and
// costs Redis against the naive script. `make bench` runs it;
// `make bench-ghz` runs it with ghz as the load generator instead
// (floodbench run --ghz), the client of the reference figures in
// docs/performance.md. run --redis-rtt puts Redis a network hop away, behind
// a delaying proxy (internal/bench: delay.go, hop.go; make bench-hop); floodbench
// instructions counts the instructions a decision costs under valgrind's
// callgrind (make bench-instructions).
//
//	floodbench run  [--floodgate bin/floodgate] [--cell 2s] [--conc 1,16,64] [--redis-rtt 1ms] ...
//	floodbench noop [--listen 127.0.0.1:0]
//	floodbench noop-http [--listen 127.0.0.1:0]
//	floodbench load --target HOST:PORT [--scenario b] [--conc 64] [--duration 10s]
//	floodbench wakeups TRACE...
//	floodbench instructions [--floodgate bin/floodgate] [--scenarios a,b,c-lease,e,b-rls] [--requests 2000] ...
//	floodbench global [--duration 30s] [--replicas 3] [--capacity 1000] [--rate 5000] [--offered 2]
//	floodbench rlqs [--duration 60s] [--replicas 2] [--envoys 8] [--limit 1000] [--demand 2] [--shift 10s]
//
// Every load loop is bounded in count and in time, and every address it
// dials or binds is on loopback.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `floodbench — Floodgate's end-to-end benchmark (make bench)

Usage:
  floodbench run  [flags]   start redis-server, a no-op server and floodgate; print the table
  floodbench noop [flags]   serve a no-op ext_authz server (the ceiling)
  floodbench noop-http [flags]  serve a no-op HTTP authorization server (the HTTP door's ceiling)
  floodbench load [flags]   drive one server with one scenario's requests
  floodbench wakeups TRACE...  what each gRPC call wakes in Go execution traces (run --trace writes them)
  floodbench instructions [flags]  instructions per decision under valgrind's callgrind, floodgate against the no-op server
  floodbench global [flags]  one global limit shared by replicas, with leases and without: admitted against allowed, Redis CPU
  floodbench rlqs [flags]    Envoy's rate limit quotas: simulated Envoys on replicas, the fleet admitted against the limit, shares against demand

Run 'floodbench CMD -h' for the flags of CMD.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return runBench(ctx, args[1:], stdout, stderr)
	case "noop":
		return runNoop(ctx, args[1:], stdout, stderr)
	case "noop-http":
		return runNoopHTTP(ctx, args[1:], stdout, stderr)
	case "load":
		return runLoad(ctx, args[1:], stdout, stderr)
	case "wakeups":
		return runWakeups(args[1:], stdout, stderr)
	case "instructions":
		return runInstructions(ctx, args[1:], stdout, stderr)
	case "global":
		return runGlobal(ctx, args[1:], stdout, stderr)
	case "rlqs":
		return runQuotas(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "floodbench: unknown command %q\n\n%s", args[0], usage)
	return 2
}
