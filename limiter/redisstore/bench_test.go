package redisstore_test

import (
	"context"
	"flag"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// The Redis benchmarks run 64 goroutines (-goroutines) against one real
// redis-server. Their baseline is BenchmarkRawEvalSha: go-redis calling
// EVALSHA on a script that returns at once, the floor of any one-round-trip
// design on this machine. Compare the two in the same run (make bench
// prints the ratio). More goroutines make deeper pipelines.
var parallelism = 64

func init() {
	flag.IntVar(&parallelism, "goroutines", parallelism, "goroutines deciding at once in the Redis benchmarks")
}

func benchClient(b *testing.B) *redis.Client {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: parallelism})
	b.Cleanup(func() { c.Close() })
	return c
}

func setParallelism(b *testing.B) {
	b.SetParallelism((parallelism + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
}

func BenchmarkRawEvalSha(b *testing.B) {
	c := benchClient(b)
	noop := redis.NewScript("return 1")
	ctx := context.Background()
	if err := noop.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	setParallelism(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		keys := []string{"fg:bench:{raw}"}
		for pb.Next() {
			if err := noop.EvalSha(ctx, c, keys).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The Take benchmarks run each decision shape three ways: one round trip per
// decision (New), through the store's coalescer (NewPipelined, what
// floodgate runs by default), and, for comparison, one round trip per
// decision through go-redis' blocking AutoPipeline. redis-µs/op is Redis'
// own CPU time (INFO cpu, user + sys) per decision, client-µs/op the
// benchmark process's (the store and go-redis, with the benchmark's loop).
func BenchmarkTakeDistinctKeys(b *testing.B) {
	benchModes(b, 100_000, 1)
}

func BenchmarkTakeHotKey(b *testing.B) {
	benchModes(b, 1, 1)
}

func BenchmarkTakeTwoBuckets(b *testing.B) {
	benchModes(b, 100_000, 2)
}

func benchModes(b *testing.B, keys, buckets int) {
	b.Run("roundtrip", func(b *testing.B) {
		c := benchClient(b)
		benchTake(b, cpuOf(b, c), redisstore.New(c, "fg:"), keys, buckets)
	})
	b.Run("pipelined", func(b *testing.B) {
		c := benchClient(b)
		var depth batchDepth
		s := redisstore.NewPipelined(c, "fg:", depth.options())
		defer s.Close()
		benchTake(b, cpuOf(b, c), s, keys, buckets)
		depth.report(b)
	})
	b.Run("goredis-autopipeline", func(b *testing.B) {
		c := benchClient(b)
		ap, err := c.AutoPipeline()
		if err != nil {
			b.Fatal(err)
		}
		defer ap.Close()
		benchTake(b, cpuOf(b, c), redisstore.New(ap, "fg:"), keys, buckets)
	})
}

// BenchmarkScriptObserver weighs ObserveScripts, which floodgate serve
// hooks to its script-latency histogram: the pipelined distinct-keys
// benchmark without an observer and with one observing a Prometheus
// histogram per script call, as serve's does. client-µs/op is the benchmark
// process's CPU per decision; alternate the two (-count) to compare.
func BenchmarkScriptObserver(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			c := benchClient(b)
			s := redisstore.NewPipelined(c, "fg:", servePipeline())
			defer s.Close()
			var observed atomic.Int64
			if mode == "on" {
				h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "script_seconds", Buckets: prometheus.ExponentialBuckets(5e-5, 2.5, 12)})
				s.ObserveScripts(func(calls int, elapsed time.Duration) {
					for range calls {
						h.Observe(elapsed.Seconds())
					}
					observed.Add(int64(calls))
				})
			}
			benchTake(b, cpuOf(b, c), s, 100_000, 1)
			if mode == "on" && observed.Load() == 0 {
				b.Fatal("the observer heard no script call")
			}
		})
	}
}

// redisCPU reads Redis' CPU time in seconds (user + sys).
func redisCPU(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// BenchmarkTakeCluster is BenchmarkTakeDistinctKeys/pipelined on a Redis
// Cluster: redis-µs/op sums its masters, and busiest-node-share is the
// largest one's part of that CPU (1/masters when decisions spread evenly).
// masters=1 is one cluster-mode server holding every slot, deciding the
// same batches as a standalone one: against BenchmarkTakeDistinctKeys it
// measures what cluster mode costs Redis per decision, and masters=3
// against it what splitting every batch three ways costs.
func BenchmarkTakeCluster(b *testing.B) {
	for _, masters := range []int{1, 3} {
		b.Run("masters="+strconv.Itoa(masters), func(b *testing.B) { benchCluster(b, masters) })
	}
}

func benchCluster(b *testing.B, masters int) {
	cl := redistest.StartCluster(b, masters)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: parallelism})
	defer cc.Close()
	nodes := make([]*redis.Client, len(cl.Nodes))
	for i, n := range cl.Nodes {
		nodes[i] = redis.NewClient(&redis.Options{Addr: n.Addr})
		defer nodes[i].Close()
	}
	perNode := func() []float64 {
		out := make([]float64, len(nodes))
		for i, n := range nodes {
			out[i] = redisCPU(b, n)
		}
		return out
	}
	var depth batchDepth
	s := redisstore.NewPipelined(cc, "fg:", depth.options())
	defer s.Close()
	before := perNode()
	benchTake(b, func() float64 {
		var sum float64
		for _, x := range perNode() {
			sum += x
		}
		return sum
	}, s, 100_000, 1)
	var total, busiest float64
	for i, x := range perNode() {
		d := x - before[i]
		total += d
		busiest = max(busiest, d)
	}
	b.ReportMetric(busiest/total, "busiest-node-share")
	depth.report(b)
}

// batchDepth counts a pipelined store's batches: dec/batch is how deep its
// pipelines ran (on a Cluster, before a batch splits over the nodes).
type batchDepth struct{ batches, decisions atomic.Int64 }

func (d *batchDepth) options() redisstore.PipelineOptions {
	o := servePipeline()
	o.OnBatch = func(decisions, _ int) {
		d.batches.Add(1)
		d.decisions.Add(int64(decisions))
	}
	return o
}

// servePipeline is how these benchmarks pipeline: floodgate serve's
// defaults (store.redis.pipeline_*, docs/configuration.md).
func servePipeline() redisstore.PipelineOptions {
	return redisstore.PipelineOptions{MaxBatch: 128, Flushers: 1, Wait: 100 * time.Microsecond}
}

func (d *batchDepth) report(b *testing.B) {
	if n := d.batches.Load(); n > 0 {
		b.ReportMetric(float64(d.decisions.Load())/float64(n), "dec/batch")
	}
}

// cpuOf reads c's server's CPU time in seconds.
func cpuOf(b *testing.B, c *redis.Client) func() float64 {
	return func() float64 { return redisCPU(b, c) }
}

func benchTake(b *testing.B, redisCPUNow func() float64, s limiter.Store, keys, buckets int) {
	ctx := context.Background()
	l := limiter.MustLimit(1_000_000_000, "1000000")
	ids := make([]string, keys)
	for i := range ids {
		ids[i] = "ip:" + strconv.Itoa(i)
	}
	var worker atomic.Int64
	setParallelism(b)
	b.ReportAllocs()
	cpu, self := redisCPUNow(), selfCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919
		reqs := make([]limiter.Request, buckets)
		for j := range reqs {
			reqs[j] = limiter.Request{Name: "bench" + strconv.Itoa(j), Limit: l, Cost: 1}
		}
		res := make([]limiter.Result, buckets)
		for pb.Next() {
			for j := range reqs {
				reqs[j].ID = ids[i%keys]
			}
			i++
			if _, err := s.Take(ctx, reqs, res); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric((selfCPU()-self)*1e6/float64(b.N), "client-µs/op")
	b.ReportMetric((redisCPUNow()-cpu)*1e6/float64(b.N), "redis-µs/op")
}

// BenchmarkDeadline weighs the two ways to bound a pipelined decision by the
// store timeout, as the resilience layer does for every decision: a context
// derived per decision (context.WithDeadline), or TakeBy's deadline, which
// the coalescer waits for with a timer it pools. client-µs/op is the
// benchmark process's own CPU time (user + system) per decision.
func BenchmarkDeadline(b *testing.B) {
	for _, mode := range []string{"context", "takeby"} {
		b.Run(mode, func(b *testing.B) {
			c := benchClient(b)
			s := redisstore.NewPipelined(c, "fg:", servePipeline())
			defer s.Close()
			l := limiter.MustLimit(1_000_000_000, "1000000")
			var worker atomic.Int64
			setParallelism(b)
			b.ReportAllocs()
			cpu := selfCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 7919
				reqs := []limiter.Request{{Name: "deadline", Limit: l, Cost: 1}}
				res := make([]limiter.Result, 1)
				for pb.Next() {
					reqs[0].ID = "ip:" + strconv.Itoa(i%100_000)
					i++
					var err error
					if mode == "takeby" {
						_, err = s.TakeBy(context.Background(), time.Now().Add(time.Second), reqs, res)
					} else {
						ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Second))
						_, err = s.Take(ctx, reqs, res)
						cancel()
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric((selfCPU()-cpu)*1e6/float64(b.N), "client-µs/op")
		})
	}
}

// selfCPU is this process's CPU time in seconds (user + system).
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkStateMemory reports MEMORY USAGE of one active bucket's key, a
// 22-character hashed identity as extauthz makes, in the current encoding
// (the full instant and the limit in the value: one GET reads it) and in
// the previous one (one integer beside the expiry, written here directly,
// which cannot carry a bucket across a change of limit).
func BenchmarkStateMemory(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	s := redisstore.New(c, "fg:")
	id := "AbCdEfGhIjKlMnOpQrStUv" // a 22-character hashed identity, as extauthz makes
	l := limiter.MustLimit(100, "10")
	res := make([]limiter.Result, 1)
	for i := 0; i < b.N; i++ {
		if _, err := s.Take(ctx, []limiter.Request{{Name: "api-per-key", ID: id, Limit: l, Cost: 7}}, res); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	current, err := c.MemoryUsage(ctx, s.Key("api-per-key", id)).Result()
	if err != nil {
		b.Fatal(err)
	}
	old := s.Key("api-per-key", "k:ZyXwVuTsRqPoNmLkJiHgFe") // a key of the same length
	if err := c.Set(ctx, old, 123456, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	previous, err := c.MemoryUsage(ctx, old).Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(current), "bytes/key")
	b.ReportMetric(float64(previous), "previous-bytes/key")
}
