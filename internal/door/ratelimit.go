package door

import (
	"context"
	"fmt"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/internal/rls"
)

// RateLimitName names Envoy's rate limit service door.
const RateLimitName = "ratelimit"

var rateLimitKind = kind{
	name: RateLimitName,
	on:   func(c *Config) bool { return c.RLS.Config != "" },
	summary: func(c *Config) string {
		ds := limits(c).Domains()
		return fmt.Sprintf("rate limit %s %s", plural(len(ds), "domain", "domains"), strings.Join(ds, " "))
	},
	build: newRateLimitDoor,
}

// rateLimitDoor is Envoy's rate limit service (envoy.service.ratelimit.v3),
// deciding the limits of rls.config, with descriptor values hashed under
// the identity secret the policies use.
type rateLimitDoor struct{ s *rls.Service }

func newRateLimitDoor(c *Config, env Env) Door {
	return &rateLimitDoor{s: rls.NewService(limits(c), rls.ServiceOptions{
		Hash: c.Engine.HashIdentity, Store: env.Store.Main, ShadowStore: env.Store.Shadow, OnFailure: c.OnFailure(true),
		FailureRetryAfter: c.Store.FailureRetryAfter.Duration,
		Response:          rls.ResponseOptions{Headers: c.RLS.Headers}, Logger: env.Log.Named("rls"), Registerer: env.Registerer,
		Recorder: env.Recorder,
	})}
}

// limits are c's rate limits: none when they were not read.
func limits(c *Config) *rls.Config {
	if c.Limits == nil {
		return rls.Empty()
	}
	return c.Limits
}

func (d *rateLimitDoor) Name() string { return RateLimitName }
func (d *rateLimitDoor) Register(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, d.s)
}
func (d *rateLimitDoor) Services() []string {
	return []string{rlsv3.RateLimitService_ServiceDesc.ServiceName}
}
func (d *rateLimitDoor) On(c *Config) bool { return rateLimitKind.on(c) }
func (d *rateLimitDoor) Reload(c *Config)  { d.s.SetConfig(limits(c)) }

func (d *rateLimitDoor) Unread() map[string]func(context.Context) (any, error) {
	return map[string]func(context.Context) (any, error){
		"/" + rlsv3.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit": func(context.Context) (any, error) { return d.s.Unread() },
	}
}
