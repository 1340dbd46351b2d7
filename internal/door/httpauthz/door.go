package httpauthz

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Name names the HTTP authorization door (listen.http).
const Name = "http_authz"

// HealthService is the name under which grpc.health.v1 reports the
// HTTP door: SERVING while it serves policies, as Check's service is. It
// is no gRPC service: the door's requests come to listen.http.
const HealthService = "floodgate.http_authz"

// Spec is the HTTP authorization door as the list of doors registers it.
var Spec = door.Spec{
	Name:    Name,
	On:      func(c *door.Config) bool { return c.Listen.HTTP != "" && len(c.Policies) > 0 },
	Summary: func(c *door.Config) string { return "HTTP authorization on " + c.Listen.HTTP },
	Compile: compile,
	Build:   newDoor,
}

// httpDoor is the HTTP authorization door: Envoy's ext_authz http_service
// protocol (and nginx's, HAProxy's, Traefik's and Caddy's), deciding the
// policies with Check's server. It listens on listen.http as the process
// started (a reload does not move a listener); without it, the door is
// off and holds nothing.
type httpDoor struct {
	addr string
	// storeMode is store.on_failure as the process started: the store
	// section is read at start, so a reload keeps it.
	storeMode decide.OnFailure
	h         *extauthz.HTTPServer // nil when off
}

func newDoor(c *door.Config, env door.Env) door.Door {
	d := &httpDoor{addr: c.Listen.HTTP, storeMode: c.OnFailure(false)}
	if d.addr != "" {
		o := d.options(c)
		o.Registerer = env.Registerer
		d.h = extauthz.NewHTTPServer(env.PolicyServer(c), Engine(c), o)
	}
	return d
}

// options are the HTTP door's options under c.
func (d *httpDoor) options(c *door.Config) extauthz.HTTPOptions {
	mode := d.storeMode
	if c.HTTPOnFailure() == decide.Error {
		mode = decide.Error
	}
	return extauthz.HTTPOptions{Request: RequestOptions(c), OnFailure: mode}
}

// HTTPRequest is how the HTTP door reads requests under c (http_authz).
func RequestOptions(c *door.Config) extauthz.HTTPRequestOptions {
	h := c.HTTPAuthz
	return extauthz.HTTPRequestOptions{PathPrefix: h.PathPrefix, OriginalURIHeader: h.OriginalURIHeader,
		OriginalMethodHeader: h.OriginalMethodHeader, OriginalHostHeader: h.OriginalHostHeader,
		GRPCStatusAlways: h.GRPCStatusOnDeny == "always"}
}

func (d *httpDoor) Name() string { return Name }

// Register registers nothing: the door has no gRPC service.
func (d *httpDoor) Register(grpc.ServiceRegistrar) {}

func (d *httpDoor) Services() []string     { return []string{HealthService} }
func (d *httpDoor) On(c *door.Config) bool { return d.h != nil && len(c.Policies) > 0 }

func (d *httpDoor) AnswerUnread() map[string]func(context.Context) (any, error) { return nil }

func (d *httpDoor) Reload(c *door.Config) {
	if d.h != nil {
		d.h.SetEngine(Engine(c), d.options(c))
	}
}

func (d *httpDoor) Listen() string { return d.addr }

func (d *httpDoor) Handler() http.Handler {
	if d.h == nil {
		return nil
	}
	return d.h
}

func (d *httpDoor) AnswerUnreadHTTP() []byte { return d.h.Unread() }

// compile refuses a door with no policy to decide.
func compile(c *door.Config) fielderr.List {
	if len(c.Policies) == 0 && c.Listen.HTTP != "" {
		return fielderr.List{{Path: "listen.http", Msg: "the HTTP authorization door decides the policies, and none is listed"}}
	}
	return nil
}

// Engine is the policies as the door decides them: c's Engine, with the
// door's client address rule (http_authz.trusted_hops).
func Engine(c *door.Config) *extauthz.Engine {
	if h := c.HTTPAuthz.TrustedHops; h != nil {
		return c.Engine.WithTrustedHops(*h)
	}
	return c.Engine
}

// EngineOptions are door.EngineOptions with the door's client address
// rule (http_authz.trusted_hops), for a caller that compiles the policies
// as the door decides them (floodgate replay --door http).
func EngineOptions(c *config.Config) extauthz.Options {
	o := door.EngineOptions(c)
	if h := c.HTTPAuthz.TrustedHops; h != nil && len(o.ClientIP.TrustedCIDRs) == 0 {
		o.ClientIP.TrustedHops = *h
	}
	return o
}
