package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/internal/rls"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/resilient"
)

// drainTimeout bounds how long SIGTERM waits for in-flight Checks.
const drainTimeout = 10 * time.Second

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	path := fs.String("config", "", "configuration file (default: the embedded default)")
	logFormat := fs.String("log-format", "", "json or console (overrides log.format)")
	pprofAddr := fs.String("pprof", "", "serve Go's /debug/pprof/ on this loopback address, e.g. 127.0.0.1:6060 (for profiling; off by default)")
	if !parseArgs(fs, args) {
		return 2
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	log, err := newLogger(cfg.Log, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate:", err)
		return 1
	}
	defer log.Sync()
	gc := planGC(cfg.Runtime, storeBytes(cfg), os.LookupEnv, cgroupMemoryLimit)
	gc.apply()
	log.Info("garbage collector", gc.fields()...)
	if *pprofAddr != "" {
		stop, err := servePprof(*pprofAddr, log)
		if err != nil {
			fmt.Fprintln(stderr, "floodgate: --pprof:", err)
			return 1
		}
		defer stop()
	}
	if err := runServer(ctx, cfg, *path, log); err != nil {
		log.Error("floodgate stopped", zap.Error(err))
		return 1
	}
	return 0
}

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

func newLogger(l config.Log, out io.Writer) (*zap.Logger, error) {
	level := zapcore.InfoLevel
	if l.Level != "" {
		if err := level.Set(l.Level); err != nil {
			return nil, err
		}
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey, enc.EncodeTime, enc.EncodeDuration = "ts", zapcore.ISO8601TimeEncoder, zapcore.StringDurationEncoder
	var encoder zapcore.Encoder
	switch l.Format {
	case "", "json":
		encoder = zapcore.NewJSONEncoder(enc)
	case "console":
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("unknown log format %q (want json or console)", l.Format)
	}
	core := zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(out)), level)
	// At most 10 identical lines a second, then one in 100: a flood of
	// denials or shadow would-be denials cannot drown the log.
	core = zapcore.NewSamplerWithOptions(core, time.Second, 10, 100)
	return zap.New(core), nil
}

// runServer serves until ctx ends, then drains.
func runServer(ctx context.Context, cfg *config.Config, path string, log *zap.Logger) error {
	s, err := newServer(ctx, cfg, path, log)
	if err != nil {
		return err
	}
	defer s.store.close()
	if err := s.listen(); err != nil {
		return err
	}
	// SIGHUP is caught before "serving" is logged: whoever waits for that
	// line (an operator, a test, a script) may reload at once, and an
	// uncaught SIGHUP would end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	s.start()
	if err := s.serve(ctx, hup); err != nil {
		return err
	}
	s.drain()
	return nil
}

// server is what `floodgate serve` runs: the store, the ext_authz and
// health services on the gRPC listener, and the admin server (metrics and
// readiness) when listen.admin is set.
type server struct {
	cfg  *config.Config
	path string // the configuration file reloads read; "" for the embedded default
	log  *zap.Logger
	reg  *prometheus.Registry

	hs    *health.Server
	store *builtStore
	authz *extauthz.Server
	rls   *rls.Service      // Envoy's rate limit service API, beside Check
	who   *limited.Recorder // who is being limited, for /debug/limited

	grpcLis   net.Listener
	gs        *grpc.Server
	admin     *http.Server // nil without listen.admin
	adminAddr string
	ready     atomic.Bool // /readyz: serving and not draining
	errc      chan error  // the gRPC server's end
}

// newServer connects the store and builds the ext_authz server on it.
// The caller closes s.store.
func newServer(ctx context.Context, cfg *config.Config, path string, log *zap.Logger) (*server, error) {
	s := &server{cfg: cfg, path: path, log: log, reg: prometheus.NewRegistry(), hs: health.NewServer(), errc: make(chan error, 1)}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Exact until the store says otherwise: every later change comes, in
	// order, through the store's callback (a start-up probe may already
	// have found the store unusable by the time the server is listening).
	setExact(s.hs, true)
	store, err := buildStore(ctx, cfg, log, s.reg, func(exact bool) { setExact(s.hs, exact) })
	if err != nil {
		return nil, err
	}
	s.store = store
	s.who = limited.New(limited.DefaultOptions())
	s.authz = newAuthzServer(cfg, store, log, s.reg, s.who)
	s.rls = newRLSService(cfg, store, log, s.reg, s.who)
	return s, nil
}

// newRLSService is the rate limit service deciding cfg's rls limits (none
// without rls.config) in store, through the decide step Check uses, with
// descriptor values hashed under the identity secret the policies use,
// telling who (when not nil) whom each limit limits.
func newRLSService(cfg *config.Config, store *builtStore, log *zap.Logger, reg prometheus.Registerer, who *limited.Recorder) *rls.Service {
	rules := cfg.RLS.Rules
	if rules == nil {
		rules = rls.Empty()
	}
	onFailure := rls.FailAllow
	switch {
	case cfg.RLS.OnFailure == "error":
		onFailure = rls.FailError
	case cfg.Store.OnFailure == "deny":
		onFailure = rls.FailDeny
	}
	return rls.NewService(rules, rls.ServiceOptions{
		Hash: cfg.Engine.HashIdentity, Store: store.main, ShadowStore: store.shadow, OnFailure: onFailure,
		Response: rls.ResponseOptions{Headers: cfg.RLS.Headers}, Logger: log.Named("rls"), Registerer: reg,
		Limited: who,
	})
}

// grpcServerOptions are the gRPC server's limits, codec and credentials.
func grpcServerOptions(cfg *config.Config, log *zap.Logger) ([]grpc.ServerOption, error) {
	serverOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.Listen.MaxRequestBytes),
		grpc.MaxConcurrentStreams(uint32(cfg.Listen.MaxConcurrentStreams)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.Listen.KeepaliveMinTime.Duration, PermitWithoutStream: true}),
		// Calls run on goroutines kept from one call to the next
		// (config.StreamWorkers, docs/performance.md).
		grpc.NumStreamWorkers(config.StreamWorkers),
	}
	if cfg.Listen.Decoder == "fast" {
		// Protobuf, with CheckRequests decoded without protobuf-go's
		// reflection over the headers map (internal/grpccodec/decode.go).
		serverOpts = append(serverOpts, grpc.ForceServerCodecV2(grpccodec.Fast()))
	} else {
		// protobuf-go for every message; CheckRequests still decoded
		// leniently, so invalid UTF-8 is decided, not an RPC error.
		serverOpts = append(serverOpts, grpc.ForceServerCodecV2(grpccodec.Protobuf()))
	}
	if cfg.Listen.TLS != nil {
		src, err := newTLSSource(*cfg.Listen.TLS, log)
		if err != nil {
			return nil, err
		}
		serverOpts = append(serverOpts, grpc.Creds(src.credentials()))
	}
	return serverOpts, nil
}

// listen opens the gRPC listener with its services registered, and the
// admin server, which answers (not ready) from here on.
func (s *server) listen() error {
	cfg := s.cfg
	serverOpts, err := grpcServerOptions(cfg, s.log)
	if err != nil {
		return err
	}
	gate := newRequestGate(cfg, s.authz, s.reg, s.log) // inflight.go: bounds the request bytes in flight
	serverOpts = append(serverOpts, gate.ServerOptions()...)
	s.grpcLis, err = net.Listen("tcp", cfg.Listen.GRPC)
	if err != nil {
		return fmt.Errorf("listen.grpc %s: %w", cfg.Listen.GRPC, err)
	}
	s.gs = grpc.NewServer(serverOpts...)
	services := gate.Registrar(s.gs)
	authv3.RegisterAuthorizationServer(services, s.authz)
	rlsv3.RegisterRateLimitServiceServer(services, s.rls)
	healthpb.RegisterHealthServer(services, s.hs)
	reflection.Register(services)

	if cfg.Listen.Admin != "" {
		adminLis, err := net.Listen("tcp", cfg.Listen.Admin)
		if err != nil {
			s.grpcLis.Close()
			return fmt.Errorf("listen.admin %s: %w", cfg.Listen.Admin, err)
		}
		s.adminAddr = adminLis.Addr().String()
		mux := adminMux(s.reg, &s.ready, s.store.status)
		mux.Handle("/debug/limited", limited.Handler(s.who, s.adminAddr))
		s.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go s.admin.Serve(adminLis)
	}
	return nil
}

// start serves gRPC, reports ready and logs "serving".
func (s *server) start() {
	cfg := s.cfg
	go func() { s.errc <- s.gs.Serve(s.grpcLis) }()
	s.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.hs.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.ready.Store(true)
	s.log.Info("serving",
		zap.String("grpc", s.grpcLis.Addr().String()), zap.String("admin", s.adminAddr),
		zap.String("config", cfg.Source), zap.String("store", cfg.Store.Backend),
		zap.Int("policies", len(cfg.Policies)), zap.Strings("rls_domains", s.rls.Config().Domains()),
		zap.String("decoder", cfg.Listen.Decoder), zap.String("version", version))
}

// serve reloads the configuration on SIGHUP (and, with reload.watch, when
// the file changes) until ctx ends, or returns the gRPC server's error.
func (s *server) serve(ctx context.Context, hup <-chan os.Signal) error {
	cfg := s.cfg
	rl := newReloader(cfg, s.path, s.authz, s.rls, s.log, s.reg)
	if s.path != "" && *cfg.Reload.Watch {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go rl.watch(wctx, cfg.Reload.Interval.Duration)
	}
	for {
		select {
		case <-hup:
			rl.reload(true)
		case err := <-s.errc:
			return fmt.Errorf("grpc server: %w", err)
		case <-ctx.Done():
			return nil
		}
	}
}

// drain reports not ready so Envoy and Kubernetes move away (and keeps
// answering for drain_delay while they do), finishes the Checks in flight
// within drainTimeout, then stops.
func (s *server) drain() {
	s.log.Info("draining", zap.Duration("delay", s.cfg.Listen.DrainDelay.Duration), zap.Duration("within", drainTimeout))
	s.ready.Store(false)
	s.hs.Shutdown()
	if d := s.cfg.Listen.DrainDelay.Duration; d > 0 {
		time.Sleep(d)
	}
	done := make(chan struct{})
	go func() { s.gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(drainTimeout):
		s.log.Warn("drain timed out; closing remaining streams")
		s.gs.Stop()
	}
	if s.admin != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.admin.Shutdown(sctx)
		cancel()
	}
	s.log.Info("stopped")
}

// newAuthzServer is the ext_authz server deciding with cfg's policies in
// store, answering by cfg's failure mode when the store cannot decide, and
// telling who (when not nil) whom it limits.
func newAuthzServer(cfg *config.Config, store *builtStore, log *zap.Logger, reg prometheus.Registerer, who *limited.Recorder) *extauthz.Server {
	onError := extauthz.FailOpen
	if cfg.Store.OnFailure == "deny" {
		onError = extauthz.FailClosed
	}
	return extauthz.NewServer(cfg.Engine, store.main, extauthz.ServerOptions{
		Logger: log, Registerer: reg, OnError: onError,
		ErrorRetryAfter: cfg.Store.FailureRetryAfter.Duration, ShadowStore: store.shadow, Limited: who,
	})
}

// ExactService is the grpc.health.v1 service name whose status says
// whether decisions are exact (SERVING: Redis reachable) or degraded
// (NOT_SERVING: the failure mode decides). The default service ("") stays
// SERVING while degraded: a limiter that fails its readiness during a Redis
// outage would take every replica out of Envoy's cluster at once.
const ExactService = "floodgate.exact"

func setExact(hs *health.Server, exact bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if exact {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus(ExactService, st)
}

// adminMux serves /metrics, /healthz (the process is alive) and /readyz
// (serving; the body says whether decisions are exact or degraded, and
// /readyz?exact=1 answers 503 while degraded, for monitors that want it).
func adminMux(reg *prometheus.Registry, ready *atomic.Bool, status storeStatus) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready: draining or starting", http.StatusServiceUnavailable)
			return
		}
		if !status.Exact() {
			msg := "ready, degraded: the store is unreachable and the failure mode decides"
			if p := status.Problem(); p != "" {
				msg = "ready, degraded: the store refuses floodgate and the failure mode decides: " + p
			}
			if r.URL.Query().Get("exact") != "" {
				http.Error(w, msg, http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, msg+"\n")
			return
		}
		io.WriteString(w, "ready, exact\n")
	})
	return mux
}

// storeStatus tells readiness whether decisions are exact and, when the
// store refuses floodgate for good (a wrong password, say), what to fix.
type storeStatus interface {
	Exact() bool
	Problem() string
}

type alwaysExact struct{}

func (alwaysExact) Exact() bool     { return true }
func (alwaysExact) Problem() string { return "" }

// probeInterval is how often a degraded store is probed in the background,
// so readiness turns exact again without traffic (once the breaker's
// open_for has passed).
const probeInterval = 250 * time.Millisecond

// builtStore is the wired store: what decides, what decides shadow
// policies, whether decisions are exact, and how to let go.
type builtStore struct {
	main, shadow limiter.Store
	status       storeStatus
	close        func()
}

// buildStore connects the configured store. With Redis, the resilience
// layer (deadline, breaker, failure mode, over-limit cache) wraps it.
// onExact hears when decisions turn exact or degraded.
func buildStore(ctx context.Context, cfg *config.Config, log *zap.Logger, reg prometheus.Registerer, onExact func(bool)) (*builtStore, error) {
	if cfg.Store.Backend != "redis" {
		m, stop := newMemoryStore(cfg)
		return &builtStore{main: m, shadow: m, status: alwaysExact{}, close: stop}, nil
	}
	return buildRedisStore(ctx, cfg, log, reg, onExact)
}

// newMemoryStore is the in-memory store (the memory backend, or Redis'
// local fallback) with its idle buckets reclaimed; the func stops that.
func newMemoryStore(cfg *config.Config) (*memory.Store, func()) {
	m := memory.New(cfg.Store.Memory.Options())
	return m, reclaimEvery(m, config.ReclaimInterval)
}

// buildRedisStore connects to Redis and wraps the store in the resilience
// layer, with the in-memory fallback when on_failure is local.
func buildRedisStore(ctx context.Context, cfg *config.Config, log *zap.Logger, reg prometheus.Registerer, onExact func(bool)) (*builtStore, error) {
	opts, err := resilientOptions(cfg, log, reg, onExact)
	if err != nil {
		return nil, err
	}
	client, prefix, err := dialRedis(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	rstore := newRedisStore(cfg, client, prefix, reg)
	// The pipelined store stops before the client closes (closers run in order).
	closers := []func(){rstore.Close, func() { client.Close() }}
	if cfg.Store.OnFailure == "local" {
		m, stop := newMemoryStore(cfg)
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
	return &builtStore{main: rs, shadow: rs.Uncached(), status: rs, close: func() {
		for _, c := range closers {
			c()
		}
	}}, nil
}

// resilientOptions are the resilience layer's settings (the fallback
// store aside).
func resilientOptions(cfg *config.Config, log *zap.Logger, reg prometheus.Registerer, onExact func(bool)) (resilient.Options, error) {
	var share limiter.Rate // the fallback's share of each limit; zero (unused) without one
	if cfg.Store.OnFailure == "local" {
		var err error
		if share, err = limiter.RateFromFloat(*cfg.Store.LocalShare); err != nil {
			return resilient.Options{}, fmt.Errorf("store.local_share: %w", err)
		}
	}
	opts := resilient.Options{
		Timeout:       cfg.Store.Redis.Timeout,
		Breaker:       resilient.BreakerOptions{Failures: cfg.Store.Breaker.Failures, OpenFor: cfg.Store.Breaker.OpenFor.Duration},
		Logger:        log,
		Registerer:    reg,
		OnExactChange: onExact,
		ProbeInterval: probeInterval,
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
		warnEviction(ctx, client, log) // eviction.go
	}
	return client, ro.Prefix, nil
}

// newRedisStore is the Redis store, pipelined unless
// store.redis.pipeline is false, its script calls timed in the metrics.
func newRedisStore(cfg *config.Config, client redis.UniversalClient, prefix string, reg prometheus.Registerer) *redisstore.Store {
	var rstore *redisstore.Store
	if *cfg.Store.Redis.Pipeline {
		o := cfg.Store.Redis.PipelineOptions()
		o.OnBatch = pipelineMetrics(reg)
		rstore = redisstore.NewPipelined(client, prefix, o)
	} else {
		rstore = redisstore.New(client, prefix)
	}
	rstore.ObserveScripts(scriptMetrics(reg))
	return rstore
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
