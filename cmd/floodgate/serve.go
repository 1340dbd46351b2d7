package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate/floodgate/internal/adminapi"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/internal/store"
)

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
	gc := planGC(cfg.Runtime, store.MemoryBytes(cfg.Config), os.LookupEnv, cgroupMemoryLimit)
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
	if err := runServer(ctx, cfg, fileSource(*path), log); err != nil {
		log.Error("floodgate stopped", zap.Error(err))
		return 1
	}
	return 0
}

func loadConfig(path string) (*door.Config, error) {
	if path == "" {
		return doors.Default(), nil
	}
	return doors.Load(path)
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
func runServer(ctx context.Context, cfg *door.Config, src source, log *zap.Logger) error {
	s, err := newServer(ctx, cfg, src, log)
	if err != nil {
		return err
	}
	defer s.store.Close()
	// The doors' own work (a feed) runs from here; a door may hold the
	// listeners until it has what it decides with.
	ok, stop := door.Run(ctx, s.doors)
	defer stop()
	if !ok {
		return nil
	}
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

// server is what `floodgate serve` runs: the store, every front end's
// services and the health service on the gRPC listener, and the admin
// server (metrics, readiness, who is limited) when listen.admin is set.
type server struct {
	cfg *door.Config
	src source // what reloads read
	log *zap.Logger
	reg *prometheus.Registry

	hs    *health.Server
	store *store.Stores
	doors []door.Door
	who   *limited.Recorder // who is being limited, for /debug/limited
	// current is the configuration in use, swapped by each reload: the
	// admin API names its policies.
	current atomic.Pointer[door.Config]

	grpcLis   net.Listener
	gs        *grpc.Server
	https     []*httpListener // the listeners of doors with their own (listen.http)
	admin     *http.Server    // nil without listen.admin
	adminAddr string
	metrics   *http.Server // nil without listen.metrics
	ready     atomic.Bool  // /readyz: serving and not draining
	errc      chan error   // the gRPC server's end, or an HTTP server's
}

// newServer connects the store and builds every front end on it. The
// caller closes s.store.
func newServer(ctx context.Context, cfg *door.Config, src source, log *zap.Logger) (*server, error) {
	s := &server{cfg: cfg, src: src, log: log, reg: prometheus.NewRegistry(), hs: health.NewServer(), errc: make(chan error, 1)}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Exact until the store says otherwise: every later change comes, in
	// order, through the store's callback (a start-up probe may already
	// have found the store unusable by the time the server is listening).
	setExact(s.hs, true)
	st, err := store.Build(ctx, cfg.Config, log, s.reg, func(exact bool) { setExact(s.hs, exact) })
	if err != nil {
		return nil, err
	}
	s.store = st
	s.current.Store(cfg)
	s.who = limited.New(limited.DefaultOptions())
	env := door.Env{Store: st, Log: log, Registerer: s.reg, Recorder: s.who,
		// A door's own part of the configuration (a feed's) is read at
		// start only: its health follows cfg's.
		HealthChanged: func(d door.Door) { setDoorHealth(s.hs, []door.Door{d}, cfg) }}
	s.doors = doors.Build(cfg, env)
	return s, nil
}

// grpcServerOptions are the gRPC server's limits, codec and credentials.
func grpcServerOptions(cfg *door.Config, log *zap.Logger) ([]grpc.ServerOption, error) {
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
		// reflection over the headers map (internal/door/check/decode.go).
		serverOpts = append(serverOpts, grpc.ForceServerCodecV2(grpccodec.Fast(doors.Codecs()...)))
	} else {
		// protobuf-go for every message; CheckRequests still decoded
		// leniently, so invalid UTF-8 is decided, not an RPC error.
		serverOpts = append(serverOpts, grpc.ForceServerCodecV2(grpccodec.Protobuf(doors.Codecs()...)))
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
	budget := requestBudget(cfg, s.log)                 // the request bytes in flight, gRPC and HTTP
	gate := newRequestGate(cfg, s.doors, budget, s.reg) // reads gRPC requests within it
	serverOpts = append(serverOpts, gate.ServerOptions()...)
	s.grpcLis, err = net.Listen("tcp", cfg.Listen.GRPC)
	if err != nil {
		return fmt.Errorf("listen.grpc %s: %w", cfg.Listen.GRPC, err)
	}
	if err := s.listenHTTP(budget); err != nil {
		s.grpcLis.Close()
		return err
	}
	s.gs = grpc.NewServer(serverOpts...)
	services := gate.Registrar(s.gs)
	for _, d := range s.doors {
		d.Register(services)
	}
	healthpb.RegisterHealthServer(services, s.hs)
	reflection.Register(services)

	if cfg.Listen.Admin != "" {
		adminLis, err := net.Listen("tcp", cfg.Listen.Admin)
		if err != nil {
			s.grpcLis.Close()
			s.closeHTTP()
			return fmt.Errorf("listen.admin %s: %w", cfg.Listen.Admin, err)
		}
		s.adminAddr = adminLis.Addr().String()
		mux := adminMux(s.reg, &s.ready, s.store.Status)
		debug := debugFor(cfg.Listen.AdminDebug)
		openAddr := ""
		if cfg.Listen.AdminDebug == config.AdminDebugAll {
			openAddr = s.adminAddr
		}
		mux.Handle("/debug/limited", debug(limited.Handler(s.who, openAddr)))
		mux.HandleFunc("/healthcheck", s.healthcheck)
		// The admin API answers its tokens' holders from any peer (404
		// without admin_api), not under listen.admin_debug's rules.
		mux.Handle(adminapi.Prefix, adminapi.New(adminapi.Options{Config: s.current.Load, Balances: s.store.Balances,
			Doors: s.doors, Log: s.log, Registerer: s.reg}))
		for pattern, h := range door.Pages(s.doors) {
			mux.Handle(pattern, debug(h))
		}
		s.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go s.admin.Serve(adminLis)
	}
	if cfg.Listen.Metrics != "" {
		lis, err := net.Listen("tcp", cfg.Listen.Metrics)
		if err != nil {
			s.grpcLis.Close()
			if s.admin != nil {
				s.admin.Close()
			}
			return fmt.Errorf("listen.metrics %s: %w", cfg.Listen.Metrics, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		s.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go s.metrics.Serve(lis)
	}
	return nil
}

// healthcheck answers as envoyproxy/ratelimit's /healthcheck does
// (src/server/health.go, HealthChecker.ServeHTTP): 200 with the body OK
// while healthy, 500 with no body otherwise. Healthy is serving and not
// draining (its "sigterm" component) and every door healthy (door.Healthy:
// its "config" component). A store that cannot decide leaves it healthy:
// the failure mode answers (/readyz?exact=1 says so).
func (s *server) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if s.ready.Load() && door.Healthy(s.doors) {
		w.Write([]byte("OK"))
		return
	}
	w.WriteHeader(http.StatusInternalServerError)
}

// start serves gRPC, reports ready and logs "serving".
func (s *server) start() {
	cfg := s.cfg
	go func() { s.errc <- s.gs.Serve(s.grpcLis) }()
	s.startHTTP()
	s.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	setDoorHealth(s.hs, s.doors, cfg)
	s.ready.Store(true)
	fields := []zap.Field{zap.String("grpc", s.grpcLis.Addr().String()), zap.String("http", s.httpAddr()), zap.String("admin", s.adminAddr),
		zap.String("config", cfg.Source), zap.String("store", cfg.Store.Backend), zap.Int("policies", len(cfg.Policies))}
	fields = append(fields, door.Fields(s.doors, cfg)...)
	s.log.Info("serving", append(fields, zap.Strings("doors", doors.Describe(cfg)),
		zap.String("decoder", cfg.Listen.Decoder), zap.String("version", version))...)
}

// setDoorHealth reports each door's services SERVING while cfg turns the
// door on, NOT_SERVING while it does not.
func setDoorHealth(hs *health.Server, doors []door.Door, cfg *door.Config) {
	for _, d := range doors {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if d.On(cfg) {
			st = healthpb.HealthCheckResponse_SERVING
		}
		for _, svc := range d.Services() {
			hs.SetServingStatus(svc, st)
		}
	}
}

// serve reloads the configuration on SIGHUP (and, with reload.watch, when
// the file changes) until ctx ends, or returns the gRPC server's error.
func (s *server) serve(ctx context.Context, hup <-chan os.Signal) error {
	cfg := s.cfg
	rl := newReloader(cfg, s.src, s.doors, s.hs, s.log, s.reg)
	rl.applied = func(c *door.Config) { s.current.Store(c) }
	if s.src.name != "" && *cfg.Reload.Watch {
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go rl.watch(wctx, cfg.Reload.Interval.Duration)
	}
	for {
		select {
		case <-hup:
			rl.reload(true)
		case err := <-s.errc:
			return fmt.Errorf("serving stopped: %w", err)
		case <-ctx.Done():
			return nil
		}
	}
}

// drain reports not ready so Envoy and Kubernetes move away (and keeps
// answering for drain_delay while they do), finishes the requests in
// flight on every listener within config.DrainTimeout, then stops.
func (s *server) drain() {
	s.log.Info("draining", zap.Duration("delay", s.cfg.Listen.DrainDelay.Duration), zap.Duration("within", config.DrainTimeout))
	s.ready.Store(false)
	s.hs.Shutdown()
	if d := s.cfg.Listen.DrainDelay.Duration; d > 0 {
		time.Sleep(d)
	}
	dctx, cancel := context.WithTimeout(context.Background(), config.DrainTimeout)
	defer cancel()
	httpDone := make(chan struct{})
	go func() { s.drainHTTP(dctx); close(httpDone) }()
	done := make(chan struct{})
	go func() { s.gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-dctx.Done():
		s.log.Warn("drain timed out; closing remaining streams")
		s.gs.Stop()
	}
	<-httpDone
	for _, hs := range []*http.Server{s.admin, s.metrics} {
		if hs != nil {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			hs.Shutdown(sctx)
			cancel()
		}
	}
	s.log.Info("stopped")
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
func adminMux(reg *prometheus.Registry, ready *atomic.Bool, status store.Status) *http.ServeMux {
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
