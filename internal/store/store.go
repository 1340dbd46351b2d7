// Package store builds the bucket store a configuration names: the
// in-memory store, or Redis (standalone, Cluster or Sentinel, pipelined)
// inside the resilience layer (deadline, breaker, failure mode, over-limit
// cache, the local fallback), with its metrics, its start-up checks (the
// server's version, its eviction policy) and its background work. Every
// front end decides through the one Store it builds.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/lease"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/resilient"
)

// Status tells readiness whether decisions are exact and, when the store
// refuses floodgate for good (a wrong password, say), what to fix.
type Status interface {
	Exact() bool
	Problem() string
}

type alwaysExact struct{}

func (alwaysExact) Exact() bool     { return true }
func (alwaysExact) Problem() string { return "" }

// Stores are the stores a configuration names, wired: what decides, what
// decides shadow buckets (uncached, so that an over-limit cache hides no
// would-be denial), whether decisions are exact, and how to let go.
type Stores struct {
	Main, Shadow limiter.Store
	Status       Status
	// Balances reads and adjusts one bucket for an operator (the admin
	// API): the memory store itself, or the resilience layer around Redis
	// (the shared bucket, or an error; never the local fallback).
	Balances limiter.Adjuster
	close    func()
}

// Close stops the store's background work and closes its connections.
func (s *Stores) Close() { s.close() }

// Build connects the configured store. With Redis, the resilience layer
// (deadline, breaker, failure mode, over-limit cache) wraps it. onExact
// (nil: none) hears when decisions turn exact or degraded; reg gets the
// store's metrics.
func Build(ctx context.Context, cfg *config.Config, log *zap.Logger, reg prometheus.Registerer, onExact func(bool)) (*Stores, error) {
	if cfg.Store.Backend != "redis" {
		m, stop := NewMemory(cfg.Store.Memory)
		return &Stores{Main: m, Shadow: m, Status: alwaysExact{}, Balances: m, close: stop}, nil
	}
	return buildRedis(ctx, cfg, log, reg, onExact)
}

// MemoryOptions are the in-memory store's options for m, sharded as serve
// shards it (config.MemoryShards).
func MemoryOptions(m config.Memory) memory.Options {
	return memory.Options{MaxBuckets: m.MaxBuckets, Shards: config.MemoryShards}
}

// MemoryBytes is the most the configuration's in-memory buckets can hold:
// the memory backend's, or Redis' local fallback's; 0 without either.
func MemoryBytes(cfg *config.Config) int64 {
	if cfg.Store.Backend == "redis" && cfg.Store.OnFailure != "local" {
		return 0
	}
	return memory.MaxTableBytes(MemoryOptions(cfg.Store.Memory))
}

// PipelineOptions are redisstore's pipelining options for r
// (store.redis.pipeline_*); the caller adds its OnBatch.
func PipelineOptions(r config.Redis) redisstore.PipelineOptions {
	return redisstore.PipelineOptions{MaxBatch: r.PipelineMaxBatch, Flushers: r.PipelineFlushers, Wait: r.PipelineWait.Duration}
}

// NewMemory is the in-memory store for m (the memory backend, or Redis'
// local fallback) with its idle buckets reclaimed; the func stops that.
func NewMemory(m config.Memory) (*memory.Store, func()) {
	s := memory.New(MemoryOptions(m))
	return s, reclaimEvery(s, config.ReclaimInterval)
}

// buildRedis connects to Redis and wraps the store in the resilience
// layer, with the in-memory fallback when on_failure is local.
func buildRedis(ctx context.Context, cfg *config.Config, log *zap.Logger, reg prometheus.Registerer, onExact func(bool)) (*Stores, error) {
	opts, err := ResilientOptions(cfg, log, reg, onExact)
	if err != nil {
		return nil, err
	}
	client, prefix, err := dialRedis(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	rstore := NewRedis(cfg.Store.Redis, client, prefix, reg)
	// The pipelined store stops before the client closes (closers run in order).
	closers := []func(){rstore.Close, func() { client.Close() }}
	if cfg.Store.OnFailure == "local" {
		m, stop := NewMemory(cfg.Store.Memory)
		closers = append(closers, stop)
		opts.Fallback = m
	}
	rs, err := resilient.New(rstore, opts)
	if err != nil {
		for _, c := range closers {
			c()
		}
		return nil, err
	}
	// The probe stops first: it decides through the pipelined store.
	closers = append([]func(){rs.Close}, closers...)
	// Leases (a policy's or rls.lease: auto) sit before the resilience
	// layer, so that a decision a lease pays waits for no breaker or
	// deadline; what they take and give back goes through it. Their
	// sweep ends, and every lease goes back, before the store closes.
	leases := lease.New(rs, lease.Options{Registerer: reg})
	lctx, stopLeases := context.WithCancel(context.Background())
	go leases.Run(lctx)
	closers = append([]func(){stopLeases, leases.Close}, closers...)
	return &Stores{Main: leases, Shadow: rs.Uncached(), Status: rs, Balances: rs, close: func() {
		for _, c := range closers {
			c()
		}
	}}, nil
}

// ResilientOptions are the resilience layer's settings (the fallback
// store aside).
func ResilientOptions(cfg *config.Config, log *zap.Logger, reg prometheus.Registerer, onExact func(bool)) (resilient.Options, error) {
	var share resilient.Share // the fallback's share of each limit; zero (unused) without one
	if cfg.Store.OnFailure == "local" {
		var err error
		if share, err = resilient.ShareOf(*cfg.Store.LocalShare); err != nil {
			return resilient.Options{}, fmt.Errorf("store.local_share: %w", err)
		}
	}
	opts := resilient.Options{
		Timeout:       cfg.Store.Redis.Timeout,
		Breaker:       resilient.BreakerOptions{Failures: cfg.Store.Breaker.Failures, OpenFor: cfg.Store.Breaker.OpenFor.Duration},
		Logger:        log,
		Registerer:    reg,
		OnExactChange: onExact,
		ProbeInterval: config.ProbeInterval,
		Permanent:     redisstore.Permanent,
		FallbackShare: share,
	}
	opts.OverLimitEntries = *cfg.Store.OverLimitCache.MaxEntries
	return opts, nil
}

// dialRedis connects to the configured Redis and checks it once: a server
// too old to run floodgate is an error; one unreachable or refusing
// floodgate is logged, and the failure mode answers until it is fixed.
// It returns the client and the key prefix.
func dialRedis(ctx context.Context, cfg *config.Config, log *zap.Logger) (redis.UniversalClient, string, error) {
	ro, err := cfg.RedisOptions()
	if err != nil {
		return nil, "", err
	}
	if cfg.Identity.HashSecretFile == "" && cfg.Identity.HashSecretEnv == "" {
		log.Warn("identity.hash_secret_file/_env is not set: bucket keys in Redis are hashed without a secret, so guessable identities (IP addresses) could be confirmed from them; set the same secret on every replica")
	}
	redis.SetLogger(redisLog{log.Named("redis")})
	client, err := redisstore.Dial(ro)
	if err != nil {
		return nil, "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = redisstore.CheckServer(cctx, client)
	cancel()
	if errors.Is(err, redisstore.ErrVersion) {
		client.Close()
		return nil, "", err
	}
	if _, fix, ok := redisstore.Permanent(err); ok {
		log.Error("redis refuses floodgate: "+fix+"; the failure mode answers until it is fixed", zap.Error(err))
	} else if err != nil {
		log.Warn("redis is not reachable yet; the failure mode answers until it is", zap.Error(err))
	} else {
		warnEviction(ctx, client, log)
	}
	return client, ro.Prefix, nil
}

// NewRedis is the Redis store, pipelined unless store.redis.pipeline is
// false, its script calls timed in the metrics.
func NewRedis(r config.Redis, client redis.UniversalClient, prefix string, reg prometheus.Registerer) *redisstore.Store {
	var rstore *redisstore.Store
	if *r.Pipeline {
		o := PipelineOptions(r)
		o.OnBatch = pipelineMetrics(reg)
		rstore = redisstore.NewPipelined(client, prefix, o)
	} else {
		rstore = redisstore.New(client, prefix)
	}
	rstore.ObserveScripts(scriptMetrics(reg))
	rstore.ObserveLate(lateMetrics(reg))
	return rstore
}

// lateMetrics registers the decisions whose script call outlived their
// deadline, by what became of their charge (docs/failure-modes.md), and
// returns what the store reports them to.
func lateMetrics(reg prometheus.Registerer) func(outcome string, decisions int) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_store_late_decisions_total",
		Help: "Decisions answered as a store failure whose token-bucket script call outlived their deadline, by outcome: expired_unrun (Redis started the script past the deadline: it took nothing), refunded (Redis allowed it after its caller left: its takes were given back), refund_failed (that refund failed: the buckets keep the charge), unanswered (no reply by the deadline: the script took nothing if Redis started it past the deadline, and charged the buckets if it started before).",
	}, []string{"outcome"})
	for _, o := range []string{"expired_unrun", "refunded", "refund_failed", "unanswered"} {
		c.WithLabelValues(o)
	}
	reg.MustRegister(c)
	return func(outcome string, decisions int) { c.WithLabelValues(outcome).Add(float64(decisions)) }
}

// pipelineMetrics registers how deep the Redis pipelines run and returns
// what the pipelined store reports each batch to. Decisions per batch (one
// write and one read each) and per script call are what pipeline_flushers
// and the Redis CPU per decision depend on.
func pipelineMetrics(reg prometheus.Registerer) func(decisions, scriptCalls int) {
	batches := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "floodgate_redis_batch_decisions",
		Help:    "Decisions per pipelined batch sent to Redis (one write and one read each): _count is the batches, _sum the decisions.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 8), // 1 .. 128, the default pipeline_max_batch
	})
	calls := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_redis_script_calls_total",
		Help: "Token-bucket script calls sent by the pipeline; decisions per call = floodgate_redis_batch_decisions_sum / this.",
	})
	reg.MustRegister(batches, calls)
	return func(decisions, scriptCalls int) {
		batches.Observe(float64(decisions))
		calls.Add(float64(scriptCalls))
	}
}

// scriptMetrics registers the latency of the token-bucket script's calls and
// returns what the Redis store reports each round trip of them to: every
// call it carried is observed with the round trip's time (the calls of one
// pipeline share it), so _count matches floodgate_redis_script_calls_total
// when pipelining. What Redis adds to a Check, apart from the wait for a
// batch to leave.
func scriptMetrics(reg prometheus.Registerer) func(calls int, elapsed time.Duration) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "floodgate_redis_script_duration_seconds",
		Help:    "Time from sending a token-bucket script call to Redis to reading its reply (the round trip of the pipeline carrying it); one observation per call.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
	})
	reg.MustRegister(h)
	return func(calls int, elapsed time.Duration) {
		sec := elapsed.Seconds()
		for range calls {
			h.Observe(sec)
		}
	}
}

// RedisLogger is go-redis' logger (redis.SetLogger) writing to log.
func RedisLogger(log *zap.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return redisLog{log}
}

// redisLog sends go-redis' own messages (failed dials, pool trouble) to the
// structured log, where the sampler keeps an outage from flooding it.
type redisLog struct{ log *zap.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn("redis client", zap.String("detail", fmt.Sprintf(format, v...)))
}

// reclaimEvery drops a memory store's full buckets periodically, returning
// the memory of callers that went idle; the returned func stops it.
func reclaimEvery(m *memory.Store, every time.Duration) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				m.Reclaim()
			case <-stop:
				return
			}
		}
	}()
	return func() { close(stop) }
}
