// Package door is what each front end of Floodgate is to the process that
// serves it. A front end — Envoy's ext_authz Check, Envoy's rate limit
// service — is a Door: it registers its API, says whether a configuration
// turns it on and what it serves, answers a request the server could not
// read in time by its own failure mode, and takes a reloaded
// configuration. serve, the request gate, health, validate and the
// reloader loop over the doors Build returns, so a new front end plugs in
// here, once.
//
// Config is the configuration with each front end's part compiled by the
// code that owns it: the policies by extauthz, the rate limit files by
// internal/rls.
package door

import (
	"context"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter/decide"
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
	// Unread answers, by full gRPC method name, a request of the door
	// that the server could not read in time: as the door answers when
	// the store cannot decide.
	Unread() map[string]func(context.Context) (any, error)
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
	// UnreadHTTP answers, as a whole HTTP/1.1 response that closes the
	// connection, a request the server could not read within the budget
	// in time: as the door answers when the store cannot decide.
	UnreadHTTP() []byte
}

// Env is what every door decides with: the one store, and the process's
// log, metrics and report of who is limited.
type Env struct {
	Store      *store.Store
	Log        *zap.Logger
	Registerer prometheus.Registerer
	// Recorder, when set, hears every decision (/debug/limited).
	Recorder decide.Recorder
	// Feed, when set, pushes the rate limit door's limits (rls.xds).
	Feed Feed

	// policies is the ext_authz server the doors deciding the policies
	// share (Check and the HTTP door), built once per Build.
	policies *policyServer
}

// policyServer is the one ext_authz server of a Build: the doors deciding
// the policies count, log and report through it alike.
type policyServer struct {
	once sync.Once
	s    *extauthz.Server
}

// policyServer is env's ext_authz server, built on c the first time a door
// asks for it.
func (env Env) policyServer(c *Config) *extauthz.Server {
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

// kind is a door before it is built: its name, whether a configuration
// turns it on, what it serves from one, and how to build it.
type kind struct {
	name    string
	on      func(c *Config) bool
	summary func(c *Config) string
	build   func(c *Config, env Env) Door
}

// kinds are every front end, in the order they are built and described.
var kinds = []kind{checkKind, rateLimitKind, httpKind}

// Build returns every door, each on c's part of the configuration and env,
// in the order they are listed and logged.
func Build(c *Config, env Env) []Door {
	env.policies = &policyServer{}
	doors := make([]Door, len(kinds))
	for i, k := range kinds {
		doors[i] = k.build(c, env)
	}
	return doors
}

// Describe says which front ends c turns on by what each serves, for the
// logs and floodgate validate: "3 policies", "rate limit domain edge".
func Describe(c *Config) []string {
	var out []string
	for _, k := range kinds {
		if k.on(c) {
			out = append(out, k.summary(c))
		}
	}
	return out
}

// Find returns the door named name among doors, nil when there is none.
func Find(doors []Door, name string) Door {
	for _, d := range doors {
		if d.Name() == name {
			return d
		}
	}
	return nil
}
