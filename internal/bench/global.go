package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/lease"
	"github.com/floodgate/floodgate/limiter/redisstore"
)

// GlobalOptions shape a Global run.
type GlobalOptions struct {
	Redis    string        // the redis-server binary
	Duration time.Duration // of each run, with leases and without
	Replicas int
	Capacity int64
	Rate     int64   // refill, tokens a second
	Offered  float64 // requests a second across the replicas, as a multiple of Rate
}

// DefaultGlobal is the global limit the issue of leases fixes: three
// replicas on one Redis, one bucket of 1,000 refilling 5,000 a second,
// offered about twice that for 30 s.
var DefaultGlobal = GlobalOptions{Redis: "redis-server", Duration: 30 * time.Second, Replicas: 3, Capacity: 1000, Rate: 5000, Offered: 2}

// globalRun is one run's figures.
type globalRun struct {
	admitted, offered int64
	worstExcess       int64 // the most admitted beyond capacity + rate × elapsed, at a second's end (≤ 0: never)
	redis             redisStats
	elapsed           time.Duration
}

// Global measures one global limit shared by replicas, in-process (each a
// lease.Store, or not, over its own client and pipelined store on one
// redis-server), offered more than the limit, once without leases and once
// with: what they admitted against what the bucket allowed, at every
// second and in all, and Redis' CPU and script calls for it.
func Global(ctx context.Context, o GlobalOptions, w io.Writer) error {
	dir, err := os.MkdirTemp("", "floodbench-global-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rp, rc, err := startRedis(ctx, o.Redis, dir, nil)
	if err != nil {
		return err
	}
	defer rp.stop()
	defer rc.Close()
	r, err := limiter.PerSecond(o.Rate)
	if err != nil {
		return err
	}
	l, err := limiter.NewLimit(o.Capacity, r)
	if err != nil {
		return err
	}
	runs := map[bool]globalRun{}
	for _, leased := range []bool{false, true} {
		run, err := globalOnce(ctx, o, l, rc, leased)
		if err != nil {
			return err
		}
		runs[leased] = run
	}
	fmt.Fprintf(w, "one bucket (capacity %d, %d/s) shared by %d replicas on one redis-server, offered %.1f × its rate for %v each\n\n",
		o.Capacity, o.Rate, o.Replicas, o.Offered, o.Duration)
	fmt.Fprintln(w, "| leases | offered | admitted | allowed (capacity + rate × elapsed) | admitted ÷ allowed | most over the bound at a second's end | Redis µs/dec | scripts/dec | decisions/s one Redis core holds |")
	fmt.Fprintln(w, "| --- | --: | --: | --: | --: | --: | --: | --: | --: |")
	for _, leased := range []bool{false, true} {
		g := runs[leased]
		allowed := o.Capacity + int64(g.elapsed.Seconds()*float64(o.Rate))
		perDec := g.redis.cpu / float64(max(g.admitted, 1)) * 1e6
		core := "-"
		if perDec > 0 {
			core = fmt.Sprintf("%.0f", 1e6/perDec)
		}
		name := "off"
		if leased {
			name = "auto"
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.3f | %d | %.1f | %.3f | %s |\n", name, g.offered, g.admitted, allowed,
			float64(g.admitted)/float64(allowed), g.worstExcess, perDec, float64(g.redis.scripts)/float64(max(g.offered, 1)), core)
	}
	return nil
}

// globalOnce is one run: o.Replicas stores, paced workers offering
// o.Offered × the rate in all, bounded by o.Duration.
func globalOnce(ctx context.Context, o GlobalOptions, l limiter.Limit, rc *redis.Client, leased bool) (globalRun, error) {
	prefix := fmt.Sprintf("global-%v:", leased)
	var stores []limiter.Store
	var closers []func()
	for range o.Replicas {
		c := redis.NewClient(&redis.Options{Addr: rc.Options().Addr})
		ps := redisstore.NewPipelined(c, prefix, store.PipelineOptions(config.Default().Store.Redis)) // serve's defaults
		var s limiter.Store = ps
		closers = append(closers, func() { ps.Close(); c.Close() })
		if leased {
			ls := lease.New(ps, lease.Options{})
			s = ls
			closers = append([]func(){ls.Close}, closers...)
		}
		stores = append(stores, s)
	}
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	before, err := readRedisStats(ctx, rc)
	if err != nil {
		return globalRun{}, err
	}
	const workers = 8 // per replica
	n := o.Replicas * workers
	every := time.Duration(float64(time.Second) * float64(n) / (o.Offered * float64(o.Rate)))
	seconds := int(o.Duration/time.Second) + 2
	perSecond := make([]atomic.Int64, seconds)
	var offered atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range stores {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(every)
				defer t.Stop()
				reqs := []limiter.Request{{Name: "global", ID: "one", Limit: l, Cost: 1, Lease: true}}
				res := make([]limiter.Result, 1)
				for time.Since(start) < o.Duration && ctx.Err() == nil {
					<-t.C
					offered.Add(1)
					ok, err := s.Take(ctx, reqs, res)
					if err == nil && ok {
						perSecond[min(int(time.Since(start)/time.Second), seconds-1)].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	g := globalRun{offered: offered.Load(), elapsed: time.Since(start), worstExcess: -o.Capacity}
	for i := range perSecond {
		g.admitted += perSecond[i].Load()
		bound := o.Capacity + int64(i+1)*o.Rate
		g.worstExcess = max(g.worstExcess, g.admitted-bound)
	}
	for _, c := range closers {
		c()
	}
	closers = nil
	after, err := readRedisStats(ctx, rc)
	if err != nil {
		return globalRun{}, err
	}
	g.redis = after.minus(before)
	return g, nil
}
