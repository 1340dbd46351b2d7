package door

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/limiter/decide"
)

// HTTPName names the HTTP authorization door (listen.http).
const HTTPName = "http_authz"

// HTTPHealthService is the name under which grpc.health.v1 reports the
// HTTP door: SERVING while it serves policies, as Check's service is. It
// is no gRPC service: the door's requests come to listen.http.
const HTTPHealthService = "floodgate.http_authz"

var httpKind = kind{
	name:    HTTPName,
	on:      func(c *Config) bool { return c.Listen.HTTP != "" && len(c.Policies) > 0 },
	summary: func(c *Config) string { return "HTTP authorization on " + c.Listen.HTTP },
	build:   newHTTPDoor,
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

func newHTTPDoor(c *Config, env Env) Door {
	d := &httpDoor{addr: c.Listen.HTTP, storeMode: c.OnFailure(false)}
	if d.addr != "" {
		o := d.options(c)
		o.Registerer = env.Registerer
		d.h = extauthz.NewHTTPServer(env.policyServer(c), c.HTTPEngine(), o)
	}
	return d
}

// options are the HTTP door's options under c.
func (d *httpDoor) options(c *Config) extauthz.HTTPOptions {
	mode := d.storeMode
	if c.HTTPOnFailure() == decide.Error {
		mode = decide.Error
	}
	return extauthz.HTTPOptions{Request: HTTPRequest(c), OnFailure: mode}
}

// HTTPRequest is how the HTTP door reads requests under c (http_authz).
func HTTPRequest(c *Config) extauthz.HTTPRequestOptions {
	h := c.HTTPAuthz
	return extauthz.HTTPRequestOptions{PathPrefix: h.PathPrefix, OriginalURIHeader: h.OriginalURIHeader,
		OriginalMethodHeader: h.OriginalMethodHeader, OriginalHostHeader: h.OriginalHostHeader,
		GRPCStatusAlways: h.GRPCStatusOnDeny == "always"}
}

func (d *httpDoor) Name() string { return HTTPName }

// Register registers nothing: the door has no gRPC service.
func (d *httpDoor) Register(grpc.ServiceRegistrar) {}

func (d *httpDoor) Services() []string { return []string{HTTPHealthService} }
func (d *httpDoor) On(c *Config) bool  { return d.h != nil && len(c.Policies) > 0 }

func (d *httpDoor) Unread() map[string]func(context.Context) (any, error) { return nil }

func (d *httpDoor) Reload(c *Config) {
	if d.h != nil {
		d.h.SetEngine(c.HTTPEngine(), d.options(c))
	}
}

func (d *httpDoor) Listen() string { return d.addr }

func (d *httpDoor) Handler() http.Handler {
	if d.h == nil {
		return nil
	}
	return d.h
}

func (d *httpDoor) UnreadHTTP() []byte { return d.h.Unread() }
