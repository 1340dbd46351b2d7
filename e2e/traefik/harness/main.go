// Command harness runs Traefik's HTTP pipeline, as Traefik's own packages build it, from a static
// configuration file (entry points) and a dynamic configuration file (the file provider's routers,
// middlewares and services), for the Traefik recipe's tests (e2e/traefik). The traefik binary
// itself needs modules the Go module proxy does not serve; its packages build, and this program
// wires them as cmd/traefik's setupServer does: the entry points (pkg/server NewTCPEntryPoints:
// forwardedHeaders.trustedIPs, path normalisation), the routers, middlewares and services
// (RouterFactory.CreateRouters: pkg/server/router, pkg/server/middleware, pkg/server/service, the
// reverse proxy of pkg/proxy/httputil), and the internal provider's defaults (the default servers
// transport). What it leaves out: providers other than one file read once, ACME, TLS, plugins,
// metrics, tracing and access logs, the API and dashboard.
//
//	harness -static traefik.yaml -dynamic dynamic.yaml
//
// It serves until SIGTERM or SIGINT. A configuration Traefik would report as an error (an unknown
// middleware, a bad rule, a service without servers) makes it exit 1 before it listens.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	"github.com/traefik/paerser/file"
	ptypes "github.com/traefik/paerser/types"
	"github.com/traefik/traefik/v3/pkg/config/dynamic"
	"github.com/traefik/traefik/v3/pkg/config/runtime"
	"github.com/traefik/traefik/v3/pkg/config/static"
	"github.com/traefik/traefik/v3/pkg/observability/metrics"
	traefikprovider "github.com/traefik/traefik/v3/pkg/provider/traefik"
	"github.com/traefik/traefik/v3/pkg/proxy/httputil"
	"github.com/traefik/traefik/v3/pkg/safe"
	"github.com/traefik/traefik/v3/pkg/server"
	"github.com/traefik/traefik/v3/pkg/server/middleware"
	"github.com/traefik/traefik/v3/pkg/server/service"
	"github.com/traefik/traefik/v3/pkg/tcp"
	traefiktls "github.com/traefik/traefik/v3/pkg/tls"
)

func main() {
	staticPath := flag.String("static", "traefik.yaml", "Traefik's static configuration (entryPoints, serversTransport)")
	dynamicPath := flag.String("dynamic", "dynamic.yaml", "the file provider's dynamic configuration (http routers, middlewares, services)")
	logLevel := flag.String("log-level", "warn", "Traefik's log level (debug shows each middleware built and each authorization error)")
	flag.Parse()

	level, err := zerolog.ParseLevel(*logLevel)
	if err != nil {
		fail("log level: %v", err)
	}
	log.Logger = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).With().Timestamp().Logger().Level(level)
	zerolog.SetGlobalLevel(level)

	if err := run(*staticPath, *dynamicPath); err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "harness: "+format+"\n", args...)
	os.Exit(1)
}

// decode reads a configuration file as Traefik's file provider and static loader do
// (paerser's file.DecodeContent, which calls each type's SetDefaults).
func decode(path string, element any) error {
	content, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := file.DecodeContent(string(content), strings.ToLower(filepath.Ext(path)), element); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func run(staticPath, dynamicPath string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The defaults cmd/traefik starts from (cmd/configuration.go, NewTraefikConfiguration).
	staticCfg := static.Configuration{
		Global:              &static.Global{},
		EntryPoints:         make(static.EntryPoints),
		Providers:           &static.Providers{ProvidersThrottleDuration: ptypes.Duration(2 * time.Second)},
		ServersTransport:    &static.ServersTransport{MaxIdleConnsPerHost: 200},
		TCPServersTransport: &static.TCPServersTransport{DialTimeout: ptypes.Duration(30 * time.Second), DialKeepAlive: ptypes.Duration(15 * time.Second)},
	}
	if err := decode(staticPath, &staticCfg); err != nil {
		return err
	}
	staticCfg.SetEffectiveConfiguration()
	if err := staticCfg.ValidateConfiguration(); err != nil {
		return err
	}

	fileCfg := &dynamic.Configuration{}
	if err := decode(dynamicPath, fileCfg); err != nil {
		return err
	}
	if fileCfg.HTTP == nil {
		return fmt.Errorf("%s: no http section", dynamicPath)
	}

	// The internal provider's configuration: the default servers transport the services use.
	internal := make(chan dynamic.Message, 1)
	routinesPool := safe.NewPool(ctx)
	defer routinesPool.Stop()
	if err := traefikprovider.New(staticCfg).Provide(internal, routinesPool); err != nil {
		return err
	}
	internalMsg := <-internal

	conf := merge(staticCfg, map[string]*dynamic.Configuration{"file": fileCfg, internalMsg.ProviderName: internalMsg.Configuration})

	metricsRegistry := metrics.NewVoidRegistry()
	observabilityMgr := middleware.NewObservabilityMgr(staticCfg, metricsRegistry, nil, nil, nil, nil)
	tlsManager := traefiktls.NewManager(nil)
	transportManager := service.NewTransportManager(nil)
	transportManager.Update(conf.HTTP.ServersTransports)
	proxyBuilder := httputil.NewProxyBuilder(transportManager, nil)
	managerFactory := service.NewManagerFactory(staticCfg, routinesPool, observabilityMgr, transportManager, proxyBuilder, nil)
	routerFactory, err := server.NewRouterFactory(staticCfg, managerFactory, tlsManager, observabilityMgr, nil, tcp.NewDialerManager(nil))
	if err != nil {
		return err
	}

	rtConf := runtime.NewConfig(conf)
	routersTCP, _ := routerFactory.CreateRouters(rtConf)
	if err := configurationErrors(rtConf); err != nil {
		return err
	}

	entryPoints, err := server.NewTCPEntryPoints(staticCfg.EntryPoints, staticCfg.HostResolver, metricsRegistry)
	if err != nil {
		return err
	}
	entryPoints.Switch(routersTCP)
	entryPoints.Start()
	<-ctx.Done()
	entryPoints.Stop()
	return nil
}

// merge is what Traefik's configuration watcher does with each provider's configuration
// (pkg/server/aggregator.go, mergeConfiguration): every element's name qualified with its
// provider's ("name@file"), and a router naming no entry point on the default ones (those with
// asDefault, or all when none has it).
func merge(staticCfg static.Configuration, byProvider map[string]*dynamic.Configuration) dynamic.Configuration {
	var defaults []string
	for name, ep := range staticCfg.EntryPoints {
		if ep.AsDefault {
			defaults = append(defaults, name)
		}
	}
	if len(defaults) == 0 {
		for name := range staticCfg.EntryPoints {
			defaults = append(defaults, name)
		}
	}
	sort.Strings(defaults)

	conf := dynamic.Configuration{
		HTTP: &dynamic.HTTPConfiguration{
			Routers:           map[string]*dynamic.Router{},
			Middlewares:       map[string]*dynamic.Middleware{},
			Services:          map[string]*dynamic.Service{},
			Models:            map[string]*dynamic.Model{},
			ServersTransports: map[string]*dynamic.ServersTransport{},
		},
		TCP: &dynamic.TCPConfiguration{
			Routers:           map[string]*dynamic.TCPRouter{},
			Middlewares:       map[string]*dynamic.TCPMiddleware{},
			Services:          map[string]*dynamic.TCPService{},
			ServersTransports: map[string]*dynamic.TCPServersTransport{},
		},
		UDP: &dynamic.UDPConfiguration{
			Routers:  map[string]*dynamic.UDPRouter{},
			Services: map[string]*dynamic.UDPService{},
		},
		TLS: &dynamic.TLSConfiguration{},
	}
	for provider, c := range byProvider {
		if c == nil || c.HTTP == nil {
			continue
		}
		q := func(name string) string { return name + "@" + provider }
		for name, r := range c.HTTP.Routers {
			if len(r.EntryPoints) == 0 {
				r.EntryPoints = defaults
			}
			conf.HTTP.Routers[q(name)] = r
		}
		for name, m := range c.HTTP.Middlewares {
			conf.HTTP.Middlewares[q(name)] = m
		}
		for name, s := range c.HTTP.Services {
			conf.HTTP.Services[q(name)] = s
		}
		for name, m := range c.HTTP.Models {
			conf.HTTP.Models[q(name)] = m
		}
		for name, st := range c.HTTP.ServersTransports {
			conf.HTTP.ServersTransports[q(name)] = st
		}
	}
	return conf
}

// configurationErrors is what Traefik reports on its dashboard and in its log for each router,
// middleware and service it could not build: here, a reason not to start.
func configurationErrors(rt *runtime.Configuration) error {
	var errs []string
	for name, r := range rt.Routers {
		if len(r.Err) > 0 || r.Status != runtime.StatusEnabled {
			errs = append(errs, fmt.Sprintf("router %s (%s): %s", name, r.Status, strings.Join(r.Err, "; ")))
		}
	}
	for name, m := range rt.Middlewares {
		if len(m.Err) > 0 {
			errs = append(errs, fmt.Sprintf("middleware %s: %s", name, strings.Join(m.Err, "; ")))
		}
	}
	for name, s := range rt.Services {
		if len(s.Err) > 0 {
			errs = append(errs, fmt.Sprintf("service %s: %s", name, strings.Join(s.Err, "; ")))
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("the configuration has errors:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}
