// Package door is the contract between Floodgate's process and each of
// its front ends. A front end — Envoy's ext_authz Check, Envoy's rate limit
// service — is a Door: it registers its API, says whether a configuration
// turns it on and what it serves, answers a request the server could not
// read in time by its own failure mode, and takes a reloaded
// configuration. A door may also do what the optional interfaces below
// say (run work of its own, serve admin pages, add to health, the logs and
// what a reload watches), found by the registry's functions here. serve,
// the request gate, health, validate and the reloader loop over the doors
// Build returns and name none, so a new front end plugs in here, once: a
// file of its own and its line in kinds.
//
// Config is the configuration with each front end's part compiled by the
// code that owns it: the policies by extauthz, the rate limit files by
// internal/door/ratelimit/rls.
package door

import (
	"context"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Door is one front end.
type Door interface {
	// Name names the door in logs and in floodgate validate.
	Name() string
	// Register registers the door's gRPC services on r (the request
	// gate's registrar, which reads their requests within the budget). A
	// door is registered whether or not the configuration turns it on,
	// so that a reload can.
	Register(r grpc.ServiceRegistrar)
	// Services are the names grpc.health.v1 reports the door under,
	// SERVING while the configuration turns the door on: the gRPC services
	// it registers, or a Listener's name of its own.
	Services() []string
	// On reports whether the door serves under c: c turns it on, and it
	// has what it decides with (a feed's limits, once pushed).
	On(c *Config) bool
	// AnswerUnread answers, by full gRPC method name, a request of the
	// door that the server could not read in time (no room in the budget
	// of request bytes): as the door answers when the store cannot decide.
	AnswerUnread() map[string]func(context.Context) (any, error)
	// Reload swaps in the door's part of c: requests in flight finish on
	// the configuration they started with.
	Reload(c *Config)
}

// Listener is a door that serves on a listener of its own besides the
// gRPC one (the HTTP authorization door): serve opens it at Listen,
// serves Handler on it with its request bytes in the request gate's
// budget, keeps answering while it drains, then closes it, as it does the
// gRPC listener.
type Listener interface {
	Door
	// Listen is the address the door listens on, as the process started
	// (a reload does not move a listener); "" when it has none.
	Listen() string
	// Handler serves the door's requests (nil when Listen is "").
	Handler() http.Handler
	// AnswerUnreadHTTP answers, as a whole HTTP/1.1 response that closes the
	// connection, a request the server could not read within the budget
	// in time: as the door answers when the store cannot decide.
	AnswerUnreadHTTP() []byte
}

// Env is what every door decides with: the one store, and the process's
// log, metrics and report of who is limited.
type Env struct {
	Store      *store.Stores
	Log        *zap.Logger
	Registerer prometheus.Registerer
	// Recorder, when set, hears every decision (/debug/limited).
	Recorder decide.Recorder
	// HealthChanged, when set, is told of a door whose On may have
	// changed other than by a reload (a feed's push), so its health follows.
	HealthChanged func(Door)

	// policies is the ext_authz server the doors deciding the policies
	// share (Check and the HTTP door), built once per Build.
	policies *policyServer
	// quotas is the rate limit door's limits as the quota door reads
	// them, one board per Build.
	quotas *QuotaBoard
}

// policyServer is the one ext_authz server of a Build: the doors deciding
// the policies count, log and report through it alike.
type policyServer struct {
	once sync.Once
	s    *extauthz.Server
}

// PolicyServer is env's ext_authz server, built on c the first time a
// door asks for it: the doors deciding the policies (Check and the HTTP
// door) share it, and count, log and report through it alike.
func (env Env) PolicyServer(c *Config) *extauthz.Server {
	p := env.policies
	if p == nil {
		p = &policyServer{}
	}
	p.once.Do(func() {
		p.s = extauthz.NewServer(c.Engine, env.Store.Main, extauthz.ServerOptions{
			Logger: env.Log, Registerer: env.Registerer, OnFailure: c.OnFailure(false),
			FailureRetryAfter: c.Store.FailureRetryAfter.Duration, ShadowStore: env.Store.Shadow, Recorder: env.Recorder,
		})
	})
	return p.s
}

// ForBuild is env for one Build of the doors: the doors it builds share
// one PolicyServer.
func (env Env) ForBuild() Env {
	env.policies = &policyServer{}
	env.quotas = &QuotaBoard{}
	return env
}

// Quotas is env's board of the rate limit door's limits (quota.go): the
// rate limit door publishes on it, the quota door (RLQS) reads it. An Env
// that no Build made has a board of its own each time it is asked, which
// nothing publishes on.
func (env Env) Quotas() *QuotaBoard {
	if env.quotas == nil {
		return &QuotaBoard{}
	}
	return env.quotas
}

// Spec is a door before it is built, as a door's package declares it and
// the list of doors (internal/doors) names it: its name, whether a
// configuration turns it on, what it serves from one, its compile and
// read steps, and how to build it.
type Spec struct {
	Name    string
	On      func(c *Config) bool
	Summary func(c *Config) string
	// Compile checks and compiles the door's part of c, reading no file:
	// problems at their lines of c's file (nil: nothing to compile).
	Compile func(c *Config) fielderr.List
	// Read reads the files the door's part of c names (nil: none).
	Read func(c *Config) error
	// Codec is how the gRPC codec reads and writes the door's messages
	// (nil: as protobuf-go does).
	Codec func() grpccodec.Message
	Build func(c *Config, env Env) Door
}

// Runner is a door with work of its own while the process runs (the rate
// limit door's feed): serve runs it from before it listens until it stops.
type Runner interface {
	Door
	// Run works until ctx ends.
	Run(ctx context.Context)
	// Wait returns true once the door lets serve listen (rls.xds's
	// wait_for_first_push: after the first push), false if ctx ends first.
	Wait(ctx context.Context) bool
}

// Admin is a door with pages of its own on the admin server, served under
// listen.admin_debug's rules as /debug/limited is.
type Admin interface {
	Door
	// Pages maps each page's pattern to its handler.
	Pages() map[string]http.Handler
}

// Healther is a door with a health of its own besides On (the rate limit
// door's rls.unhealthy_without_limits): /healthcheck fails while it is
// false.
type Healther interface {
	Door
	Healthy() bool
}

// Fielder is a door that adds what it serves to the "serving" and
// "reloaded" log lines (the rate limit door: rls_domains).
type Fielder interface {
	Door
	Fields(c *Config) []zap.Field
}

// Files is a door that reads files beside the configuration (the rate
// limit door: rls.config's): a reload also follows their content, and
// floodgate_config_info labels their digest.
type Files interface {
	Door
	// Files names the files c has the door read ("" for none).
	Files(c *config.Config) string
	// Snapshot is the content of the files named, as read now (nil for
	// none).
	Snapshot(files string) []byte
	// DigestLabel is floodgate_config_info's label for the SHA-256 of the
	// snapshot, and what the metric's help says it digests.
	DigestLabel() (label, help string)
}

// Reporter is a door that says what an applied reload changed (the rate
// limit door: the domains it removed), after every door took it.
type Reporter interface {
	Door
	Reported(c *Config)
}

// Run runs every Runner of doors until ctx ends, then waits until each
// can let serve listen; false when ctx ended first. stop ends their work
// and returns once it has.
func Run(ctx context.Context, doors []Door) (ok bool, stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runners []Runner
	for _, d := range doors {
		if r, ok := d.(Runner); ok {
			runners = append(runners, r)
			wg.Add(1)
			go func() { defer wg.Done(); r.Run(rctx) }()
		}
	}
	stop = func() { cancel(); wg.Wait() }
	for _, r := range runners {
		if !r.Wait(ctx) {
			return false, stop
		}
	}
	return true, stop
}

// Pages are every Admin door's pages, by pattern.
func Pages(doors []Door) map[string]http.Handler {
	pages := map[string]http.Handler{}
	for _, d := range doors {
		if a, ok := d.(Admin); ok {
			for p, h := range a.Pages() {
				pages[p] = h
			}
		}
	}
	return pages
}

// Healthy is whether every Healther of doors is healthy.
func Healthy(doors []Door) bool {
	for _, d := range doors {
		if h, ok := d.(Healther); ok && !h.Healthy() {
			return false
		}
	}
	return true
}

// Fields are every Fielder's log fields under c, in the order of doors.
func Fields(doors []Door, c *Config) []zap.Field {
	var fs []zap.Field
	for _, d := range doors {
		if f, ok := d.(Fielder); ok {
			fs = append(fs, f.Fields(c)...)
		}
	}
	return fs
}

// Watched are the doors of doors that read files beside the configuration.
func Watched(doors []Door) []Files {
	var ws []Files
	for _, d := range doors {
		if f, ok := d.(Files); ok {
			ws = append(ws, f)
		}
	}
	return ws
}

// Reported tells every Reporter of doors that c was applied.
func Reported(doors []Door, c *Config) {
	for _, d := range doors {
		if r, ok := d.(Reporter); ok {
			r.Reported(c)
		}
	}
}
