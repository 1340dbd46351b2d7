package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/door/rlqs"
)

// QuotaOptions shape a Quotas run.
type QuotaOptions struct {
	Floodgate, Redis string        // the binaries
	Duration         time.Duration // of the run
	Replicas, Envoys int
	Limit            int64   // the bucket's limit, requests a second
	Demand           float64 // the fleet's demand, a multiple of Limit
	Heavy            float64 // the heavy Envoy's part of the demand
	Shift            time.Duration
	Interval         time.Duration // Envoy's report interval
}

// DefaultQuotas is the measurement the quota door's issue fixes: eight
// simulated Envoys against one bucket of 1,000 requests a second through
// two Floodgate replicas on one Redis, demand twice the limit, one Envoy
// half of it, the heavy one changing every 10 s, for 60 s, Envoy's own
// report interval.
var DefaultQuotas = QuotaOptions{Floodgate: "bin/floodgate", Redis: "redis-server", Duration: 60 * time.Second, Replicas: 2, Envoys: 8,
	Limit: 1000, Demand: 2, Heavy: 0.5, Shift: 10 * time.Second, Interval: rlqs.ReportInterval}

// Quotas measures Envoy's rate limit quota service: o.Envoys Envoys (the
// Envoy internal/door/rlqs plays, each its own stream, spread over the
// replicas) ask for one bucket at o.Demand × o.Limit a second in all, the
// heavy one o.Heavy of it, the heavy one changing every o.Shift; the
// replicas are floodgate serve processes on one redis-server. It prints the
// fleet's admitted requests a second against the limit, second by second
// and in all, each Envoy's admitted share against its demand in each phase,
// and the replicas' and Redis' CPU per million requests admitted.
func Quotas(ctx context.Context, o QuotaOptions, w io.Writer) error {
	dir, rc, stopRedis, err := redisInTemp(ctx, o.Redis, "floodbench-rlqs-")
	if err != nil {
		return err
	}
	defer stopRedis()
	limits := filepath.Join(dir, "limits")
	if err := os.Mkdir(limits, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(limits, "bench.yaml"), fmt.Appendf(nil,
		"domain: bench\ndescriptors:\n  - key: name\n    value: api\n    rate_limit: {unit: second, requests_per_unit: %d}\n", o.Limit), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "floodgate.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "listen: {grpc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nstore:\n  backend: redis\n  redis: {addresses: [%q]}\nrls:\n  config: %s\n",
		rc.Options().Addr, limits), 0o644); err != nil {
		return err
	}
	var replicas []*proc
	defer func() {
		for _, p := range replicas {
			p.stop()
		}
	}()
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range o.Replicas {
		p, err := startServing(ctx, fmt.Sprintf("floodgate %d", i), o.Floodgate, "serve", "--config", cfg)
		if err != nil {
			return err
		}
		replicas = append(replicas, p)
		c, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}

	bucket := map[string]string{"name": "api"}
	envoys := make([]*rlqs.Envoy, o.Envoys)
	for i := range envoys {
		envoys[i] = rlqs.NewEnvoy(conns[i%len(conns)], rlqs.EnvoyOptions{Domain: "bench"})
		defer envoys[i].Close()
	}
	phases := int((o.Duration + o.Shift - 1) / o.Shift)
	demandIn := func(phase, e int) float64 {
		total := o.Demand * float64(o.Limit)
		if e == phase%o.Envoys {
			return total * o.Heavy
		}
		return total * (1 - o.Heavy) / float64(o.Envoys-1)
	}
	seconds := int(o.Duration / time.Second)
	allowed := make([][]atomic.Int64, o.Envoys) // [envoy][second]
	asked := make([][]atomic.Int64, o.Envoys)
	for i := range allowed {
		allowed[i] = make([]atomic.Int64, seconds+1)
		asked[i] = make([]atomic.Int64, seconds+1)
	}

	cpu0 := make([]float64, len(replicas))
	for i, p := range replicas {
		cpu0[i] = procCPU(p)
	}
	r0, err := readRedisStats(ctx, rc)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, e := range envoys {
		// Each Envoy's report timer starts with its first bucket, made by
		// its first request (GlobalRateLimitClientImpl): the Envoys start
		// asking, and their timers, spread over one interval, as Envoys
		// started at different times do.
		offset := time.Duration(i+1) * o.Interval / time.Duration(o.Envoys+1)
		wg.Add(2)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(offset):
			case <-rctx.Done():
				return
			}
			const step = 10 * time.Millisecond
			t := time.NewTicker(step)
			defer t.Stop()
			owed := 0.0
			for rctx.Err() == nil {
				now := time.Since(start)
				if now >= o.Duration {
					return
				}
				sec := int(now / time.Second)
				owed += demandIn(int(now/o.Shift), i) * step.Seconds()
				for ; owed >= 1; owed-- {
					asked[i][sec].Add(1)
					if e.Request(bucket) {
						allowed[i][sec].Add(1)
					}
				}
				select {
				case <-t.C:
				case <-rctx.Done():
				}
			}
		}()
		go func() {
			defer wg.Done()
			select {
			case <-time.After(offset):
			case <-rctx.Done():
				return
			}
			e.Run(rctx, o.Interval)
		}()
	}
	time.Sleep(o.Duration)
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	var cpu float64
	for i, p := range replicas {
		cpu += procCPU(p) - cpu0[i]
	}
	r1, err := readRedisStats(ctx, rc)
	if err != nil {
		return err
	}
	redisCPU := r1.minus(r0).cpu

	// The report.
	fmt.Fprintf(w, "%d Envoys on %d replicas (one redis-server), one bucket of %d a second, demand %.1f × the limit (one Envoy %.0f%% of it, changing every %v), reports every %v, %v\n\n",
		o.Envoys, o.Replicas, o.Limit, o.Demand, o.Heavy*100, o.Shift, o.Interval, o.Duration)
	fleet := make([]int64, seconds)
	var total int64
	for s := range seconds {
		for e := range envoys {
			fleet[s] += allowed[e][s].Load()
		}
		total += fleet[s]
	}
	var b strings.Builder
	for s, a := range fleet {
		if s > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.2f", float64(a)/float64(o.Limit))
	}
	fmt.Fprintf(w, "admitted ÷ limit, second by second: %s\n\n", b.String())
	after := min(int(o.Shift/time.Second), seconds-1) // from the first shift on
	in := func(a int64) bool { f := float64(a) / float64(o.Limit); return f >= 0.95 && f <= 1.05 }
	var rest int64
	within, withinAll := 0, 0
	for s, a := range fleet {
		if in(a) {
			withinAll++
		}
		if s >= after {
			rest += a
			if in(a) {
				within++
			}
		}
	}
	fmt.Fprintf(w, "| | admitted ÷ limit | seconds within 0.95–1.05 |\n| --- | --: | --: |\n")
	fmt.Fprintf(w, "| the whole run | %.3f | %d of %d |\n", float64(total)/float64(int64(seconds)*o.Limit), withinAll, seconds)
	fmt.Fprintf(w, "| from the first shift (second %d) on | %.3f | %d of %d |\n\n", after, float64(rest)/float64(int64(seconds-after)*o.Limit), within, seconds-after)

	fmt.Fprintln(w, "each Envoy's admitted ÷ asked, phase by phase (the heavy one in brackets):")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| phase |")
	for e := range envoys {
		fmt.Fprintf(w, " envoy %d (replica %d) |", e, e%o.Replicas)
	}
	fmt.Fprint(w, "\n| --- |")
	for range envoys {
		fmt.Fprint(w, " --: |")
	}
	fmt.Fprintln(w)
	secsPerPhase := int(o.Shift / time.Second)
	for ph := range phases {
		fmt.Fprintf(w, "| %d |", ph)
		for e := range envoys {
			var a, d int64
			for s := ph * secsPerPhase; s < min((ph+1)*secsPerPhase, seconds); s++ {
				a += allowed[e][s].Load()
				d += asked[e][s].Load()
			}
			cell := fmt.Sprintf("%.2f", float64(a)/float64(max(d, 1)))
			if e == ph%o.Envoys {
				cell = "[" + cell + "]"
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	var answers int
	for _, e := range envoys {
		answers += e.Stats().Answers
	}
	perM := func(s float64) float64 { return s / float64(max(total, 1)) * 1e6 }
	fmt.Fprintf(w, "\n%d answers to reports (and pushes) over %v; CPU per million requests admitted: floodgate %.2f s (all replicas), redis-server %.3f s\n",
		answers, elapsed.Round(time.Millisecond), perM(cpu), perM(redisCPU))
	return nil
}
