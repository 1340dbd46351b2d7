package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/bench"
	"github.com/floodgate/floodgate/internal/config"
)

// runBench parses floodbench run's flags and runs bench.Run.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o bench.Options
	fs.StringVar(&o.Floodgate, "floodgate", "bin/floodgate", "the floodgate binary (make bench builds it)")
	fs.StringVar(&o.RedisServer, "redis-server", "redis-server", "the redis-server binary")
	scen := fs.String("scenarios", "a,b,b0,c,c-lease,d,e,f,g,b-rls,b-xds,b-http,rt,naive", "scenarios to run, from a b b0 b2 c c-lease d e f g a' r b-rls b-xds a-http b-http rt naive (b-xds: b-rls with its limits pushed over xDS by a management server of floodbench's; b-http: floodgate's HTTP authorization door on (b)'s callers as Envoy's http_service sends them, against a-http, a no-op HTTP server; rt: one go-redis script round trip from the load generator, the floor of the added-latency table; naive: one GET + SET script call per decision from the load generator, distinct keys, the reference of Redis CPU per decision; b0: (b) with store.redis.pipeline: false; b2: (b) with pipeline_flushers: 2; g: (b) on a Redis Cluster of 3 masters; c-lease: (c) with the policy's lease: auto; r: envoyproxy/ratelimit, needs --ratelimit; b-rls: floodgate's rate limit service on (r)'s requests and limits; r and b-rls bring their baseline a', the no-op server on the rate limit API)")
	conc := fs.String("conc", "1,16,64", "concurrencies (requests in flight)")
	fs.DurationVar(&o.Cell, "cell", 3*time.Second, "measured window of each cell, split into --rounds")
	fs.IntVar(&o.Rounds, "rounds", 3, "rounds each cell's window is split into, taking turns with the other scenarios")
	fs.DurationVar(&o.Warmup, "warmup", 200*time.Millisecond, "warm-up before each round's window")
	fs.Int64Var(&o.MaxCount, "max", 2_000_000, "at most this many requests per cell")
	fs.IntVar(&o.Keys, "keys", 100_000, "distinct callers in (a), (b), (e) and (f)")
	fs.IntVar(&o.Conns, "conns", 1, "gRPC connections from the load generator to each server")
	fs.StringVar(&o.Client, "client", bench.ClientLean, "the in-process client: lean (pre-encoded requests, answers' status read from the wire) or proto (protobuf's work on every call too: decode and marshal the request, decode the answer)")
	fs.StringVar(&o.Ghz, "ghz", "", "drive every cell with this ghz binary (make bench-ghz) instead of the in-process client")
	fs.StringVar(&o.Ratelimit, "ratelimit", "", "envoyproxy/ratelimit's service_cmd binary, for scenario r (make bench-ghz installs it)")
	fs.IntVar(&o.GOGC, "gogc", config.DefaultGOGC, "the collector setting (GOGC) of floodgate (runtime.gogc) and of the no-op server alike; the GOGC environment variable, when set, wins for both")
	fs.StringVar(&o.ProfileDir, "profile", "", "write pprof CPU and allocation profiles of floodgate under (b), (e), (g) and (b-rls), those that run, at the highest concurrency to this directory")
	fs.StringVar(&o.TraceDir, "trace", "", "record a Go execution trace of floodgate over the last round of (b), (c) and (e), those that run, at every concurrency into this directory, and print what each decision wakes")
	fs.DurationVar(&o.RedisRTT, "redis-rtt", 0, "put Redis behind a delaying TCP proxy on 127.0.0.1 adding this round trip (e.g. 500us, 1ms: a Redis a network hop away) for floodgate, envoyproxy/ratelimit, (rt) and (naive); then --scenarios defaults to "+bench.HopScenarios+", --conc to "+bench.HopConc+" and --rates to "+bench.HopRates)
	rates := fs.String("rates", "", "open-loop cells after the closed-loop ones: requests a second (Poisson arrivals, each timed from its scheduled send), at most the highest --conc in flight, e.g. 500,2000")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.RedisRTT < 0 || o.RedisRTT > time.Second {
		fmt.Fprintln(stderr, "floodbench run: need 0 <= --redis-rtt <= 1s")
		return 2
	}
	if o.RedisRTT > 0 {
		// A hop's defaults: the rows whose decisions wait on Redis, at the
		// concurrencies of its latency targets, and open-loop beside them.
		if !set["scenarios"] {
			*scen = bench.HopScenarios
		}
		if !set["conc"] {
			*conc = bench.HopConc
		}
		if !set["rates"] {
			*rates = bench.HopRates
		}
	}
	o.Scenarios = strings.Split(*scen, ",")
	for _, s := range strings.Split(*rates, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || r <= 0 || r > 1e6 {
			fmt.Fprintf(stderr, "floodbench run: bad rate %q (requests a second, up to 1000000)\n", s)
			return 2
		}
		o.Rates = append(o.Rates, r)
	}
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 4096 {
			fmt.Fprintf(stderr, "floodbench run: bad concurrency %q\n", s)
			return 2
		}
		o.Conc = append(o.Conc, n)
	}
	if o.Rounds < 1 || o.Rounds > 100 || o.Cell <= 0 || o.Cell > time.Minute || o.Warmup < 0 || o.Warmup > time.Minute || o.MaxCount < 1 || o.Keys < 1 || o.Keys > 1<<20 {
		fmt.Fprintln(stderr, "floodbench run: need 1 <= --rounds <= 100, 0 < --cell <= 1m, 0 <= --warmup <= 1m, --max >= 1, 1 <= --keys <= 1048576")
		return 2
	}
	if err := bench.Run(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "floodbench run:", err)
		return 1
	}
	return 0
}
