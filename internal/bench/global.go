package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
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
	// Floodgate, when set, is the floodgate binary: each replica is then a
	// floodgate serve process on the redis-server, the bucket a policy
	// (lease: auto in the run with leases), decided over gRPC Check;
	// unset, each replica is a store in this process.
	Floodgate string
}

// DefaultGlobal is the global limit the issue of leases fixes: three
// replicas on one Redis, one bucket of 1,000 refilling 5,000 a second,
// offered about twice that for 30 s.
var DefaultGlobal = GlobalOptions{Redis: "redis-server", Duration: 30 * time.Second, Replicas: 3, Capacity: 1000, Rate: 5000, Offered: 2}

// globalRun is one run's figures.
type globalRun struct {
	admitted, offered int64
	worstExcess       int64 // the most admitted beyond capacity + rate × elapsed, at a second's end (≤ 0: never)
	failed            int64 // decisions the replica could not make (the store's failure)
	firstErr          error
	redis             redisStats
	elapsed           time.Duration
}

// Global measures one global limit shared by replicas, in-process (each a
// lease.Store, or not, over its own client and pipelined store on one
// redis-server), offered more than the limit, once without leases and once
// with: what they admitted against what the bucket allowed, at every
// second and in all, and Redis' CPU and script calls for it.
func Global(ctx context.Context, o GlobalOptions, w io.Writer) error {
	dir, rc, stopRedis, err := redisInTemp(ctx, o.Redis, "floodbench-global-")
	if err != nil {
		return err
	}
	defer stopRedis()
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
		var replicas []replica
		var stop func()
		if o.Floodgate != "" {
			replicas, stop, err = globalProcesses(ctx, o, dir, rc.Options().Addr, leased)
		} else {
			replicas, stop = globalStores(o, l, rc.Options().Addr, leased)
		}
		if err != nil {
			return err
		}
		run, err := globalOnce(ctx, o, replicas, stop, rc)
		if err != nil {
			return err
		}
		runs[leased] = run
	}
	what := "replicas (each its own client and pipelined store, in-process)"
	if o.Floodgate != "" {
		what = "floodgate serve processes (a policy, decided over gRPC Check)"
	}
	fmt.Fprintf(w, "one bucket (capacity %d, %d/s) shared by %d %s on one redis-server, offered %.1f × its rate for %v each\n\n",
		o.Capacity, o.Rate, o.Replicas, what, o.Offered, o.Duration)
	fmt.Fprintln(w, "| leases | offered | admitted | allowed (capacity + rate × elapsed) | admitted ÷ allowed | most over the bound at a second's end | failed | Redis µs/dec | scripts/dec | decisions/s one Redis core holds |")
	fmt.Fprintln(w, "| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
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
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.3f | %d | %d | %.1f | %.3f | %s |\n", name, g.offered, g.admitted, allowed,
			float64(g.admitted)/float64(allowed), g.worstExcess, g.failed, perDec, float64(g.redis.scripts)/float64(max(g.offered, 1)), core)
	}
	for _, leased := range []bool{false, true} {
		if e := runs[leased].firstErr; e != nil {
			fmt.Fprintf(w, "\nleases %v: the first failed decision: %v\n", leased, e)
		}
	}
	return nil
}

// replica decides one request of the global bucket: whether it was
// admitted.
type replica func(ctx context.Context) (bool, error)

// globalStores are o.Replicas stores in this process, each its own client
// and pipelined store (serve's defaults), leasing or not, and what closes
// them.
func globalStores(o GlobalOptions, l limiter.Limit, addr string, leased bool) ([]replica, func()) {
	prefix := fmt.Sprintf("global-%v:", leased)
	var replicas []replica
	var closers []func()
	for range o.Replicas {
		c := redis.NewClient(&redis.Options{Addr: addr})
		ps := redisstore.NewPipelined(c, prefix, store.PipelineOptions(config.Default().Store.Redis)) // serve's defaults
		var s limiter.Store = ps
		closers = append(closers, func() { ps.Close(); c.Close() })
		if leased {
			ls := lease.New(ps, lease.Options{})
			s = ls
			closers = append([]func(){ls.Close}, closers...)
		}
		replicas = append(replicas, func(ctx context.Context) (bool, error) {
			reqs := []limiter.Request{{Name: "global", ID: "one", Limit: l, Cost: 1, Lease: true}}
			res := make([]limiter.Result, 1)
			return s.Take(ctx, reqs, res)
		})
	}
	return replicas, func() {
		for _, c := range closers {
			c()
		}
	}
}

// globalPolicy is the configuration of every floodgate process of a
// Global run: serve's defaults on the redis-server at addr, and one policy
// whose one bucket every request shares (one tenant), leased or not. A
// decision the store could not make is denied (on_failure: deny), so that
// no failure counts as admitted.
func globalPolicy(o GlobalOptions, addr string, leased bool) string {
	lease := "off"
	if leased {
		lease = "auto"
	}
	return fmt.Sprintf(`# generated by floodbench global
listen:
  grpc: 127.0.0.1:0
  admin: ""
reload:
  watch: false
store:
  backend: redis
  on_failure: deny
  redis:
    addresses: [%q]
policies:
  - name: global-%s
    match: {path_prefix: /g/}
    key: [header:x-tenant]
    capacity: %d
    refill_per_second: %d
    lease: %s
`, addr, lease, o.Capacity, o.Rate, lease)
}

// globalProcesses starts o.Replicas floodgate serve processes on the
// redis-server at addr, and returns a replica calling each over gRPC
// Check, and what stops them.
func globalProcesses(ctx context.Context, o GlobalOptions, dir, addr string, leased bool) ([]replica, func(), error) {
	path := fmt.Sprintf("%s/global-%v.yaml", dir, leased)
	if err := os.WriteFile(path, []byte(globalPolicy(o, addr, leased)), 0o600); err != nil {
		return nil, nil, err
	}
	var procs []*proc
	var clients []*client
	stop := func() {
		for _, c := range clients {
			c.close()
		}
		for _, p := range procs {
			p.stop()
		}
	}
	req := checkRequest("/g/items/1", "", 7)
	req.Attributes.Request.Http.Headers["x-tenant"] = "one"
	body := encode([]*authv3.CheckRequest{req})[0]
	var replicas []replica
	for i := range o.Replicas {
		p, err := startServing(ctx, fmt.Sprintf("floodgate (global replica %d)", i), o.Floodgate, "serve", "--config", path)
		if err != nil {
			stop()
			return nil, nil, err
		}
		procs = append(procs, p)
		c, err := dial(p.addr, 2, ClientLean)
		if err != nil {
			stop()
			return nil, nil, err
		}
		clients = append(clients, c)
		var next atomic.Int64
		replicas = append(replicas, func(ctx context.Context) (bool, error) {
			req, resp := &rawMsg{b: body}, &rawMsg{}
			conn := c.conns[int(next.Add(1))%len(c.conns)]
			if err := conn.Invoke(ctx, checkMethod, req, resp); err != nil {
				return false, err
			}
			code, err := statusCode(resp.b)
			if err == nil && code != 0 && code != 8 { // 8: RESOURCE_EXHAUSTED, the limit's denial
				err = fmt.Errorf("floodgate answered gRPC status %d (the failure mode's): the store could not decide", code)
			}
			return code == 0, err
		})
	}
	return replicas, stop, nil
}

// globalOnce is one run: paced workers on every replica offering
// o.Offered × the rate in all, bounded by o.Duration; stop ends the
// replicas before Redis' figures are read.
func globalOnce(ctx context.Context, o GlobalOptions, replicas []replica, stop func(), rc *redis.Client) (globalRun, error) {
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	before, err := readRedisStats(ctx, rc)
	if err != nil {
		return globalRun{}, err
	}
	const workers = 8 // per replica
	n := len(replicas) * workers
	every := time.Duration(float64(time.Second) * float64(n) / (o.Offered * float64(o.Rate)))
	seconds := int(o.Duration/time.Second) + 2
	perSecond := make([]atomic.Int64, seconds)
	var offered, failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for _, take := range replicas {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(every)
				defer t.Stop()
				for time.Since(start) < o.Duration && ctx.Err() == nil {
					<-t.C
					offered.Add(1)
					ok, err := take(ctx)
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					} else if ok {
						perSecond[min(int(time.Since(start)/time.Second), seconds-1)].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	g := globalRun{offered: offered.Load(), failed: failed.Load(), elapsed: time.Since(start), worstExcess: -o.Capacity}
	if e, ok := firstErr.Load().(error); ok {
		g.firstErr = e
	}
	for i := range perSecond {
		g.admitted += perSecond[i].Load()
		bound := o.Capacity + int64(i+1)*o.Rate
		g.worstExcess = max(g.worstExcess, g.admitted-bound)
	}
	stop()
	stop = nil
	after, err := readRedisStats(ctx, rc)
	if err != nil {
		return globalRun{}, err
	}
	g.redis = after.minus(before)
	return g, nil
}
