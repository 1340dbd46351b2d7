package door

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/rls"
	"github.com/floodgate/floodgate/limiter/decide"
)

// RateLimitName names Envoy's rate limit service door.
const RateLimitName = "ratelimit"

var rateLimitKind = kind{
	name: RateLimitName,
	on:   func(c *Config) bool { return c.RLS.Limits() },
	summary: func(c *Config) string {
		if x := c.RLS.XDS; x != nil {
			return fmt.Sprintf("rate limit domains pushed by xds %s (node %s)", x.Server, x.NodeID)
		}
		ds := limits(c).Domains()
		return fmt.Sprintf("rate limit %s %s", plural(len(ds), "domain", "domains"), strings.Join(ds, " "))
	},
	build: newRateLimitDoor,
}

// rateLimitDoor is Envoy's rate limit service (envoy.service.ratelimit.v3),
// deciding the limits of rls.config, or those a feed pushes (rls.xds), with
// descriptor values hashed under the identity secret the policies use.
type rateLimitDoor struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s    *rls.Service
	feed Feed // nil: the limits are read from files
	log  *zap.Logger
	// errorFirst: before a feed's first push, answer with an RPC error
	// (rls.on_failure: error) rather than by the store's failure mode.
	errorFirst bool

	mu     sync.Mutex // orders reloads and pushes
	bursts map[string]int64
	// ready: there are limits to decide with (always for files; for a
	// feed, once it has pushed).
	ready atomic.Bool
	// needDomain is rls.unhealthy_without_limits.
	needDomain atomic.Bool
}

func newRateLimitDoor(c *Config, env Env) Door {
	d := &rateLimitDoor{feed: env.Feed, log: env.Log.Named("rls"), errorFirst: c.OnFailure(true) == decide.Error}
	d.s = rls.NewService(rls.Empty(), rls.ServiceOptions{
		Hash: c.Engine.HashIdentity, Store: env.Store.Main, ShadowStore: env.Store.Shadow, OnFailure: c.OnFailure(true),
		FailureRetryAfter: c.Store.FailureRetryAfter.Duration,
		Response:          rls.ResponseOptions{Headers: c.RLS.Headers}, Logger: d.log, Registerer: env.Registerer,
		Recorder: env.Recorder,
	})
	d.Reload(c)
	if d.feed != nil {
		d.feed.OnPush(func(p Pushed) {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.apply(p)
		})
	}
	return d
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
	rlsv3.RegisterRateLimitServiceServer(r, d)
}
func (d *rateLimitDoor) Services() []string {
	return []string{rlsv3.RateLimitService_ServiceDesc.ServiceName}
}

// On is true while c turns the door on and it has limits to serve: from
// files, or pushed at least once; with rls.unhealthy_without_limits, only
// while they name a domain.
func (d *rateLimitDoor) On(c *Config) bool { return rateLimitKind.on(c) && d.serving() }

func (d *rateLimitDoor) serving() bool {
	return d.ready.Load() && (!d.needDomain.Load() || len(d.s.Config().Domains()) > 0)
}

// Reload takes c's settings; the limits are c's files', or, fed, the
// feed's last push with c's bursts.
func (d *rateLimitDoor) Reload(c *Config) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.s.SetShadowMode(c.RLS.ShadowMode)
	d.needDomain.Store(c.RLS.UnhealthyWithoutLimits)
	d.bursts = c.RLS.Burst
	if d.feed == nil {
		d.s.SetConfig(limits(c))
		d.ready.Store(true)
		return
	}
	if p, ok := d.feed.Latest(); ok {
		d.apply(p)
	}
}

// apply serves a push with the bursts in use. A burst that names no limit
// of the push is left out and said: the control plane owns the limits, and
// a route it removed must not hold back the others' updates.
func (d *rateLimitDoor) apply(p Pushed) {
	cfg, err := rls.Parse(p.Names, p.Sources)
	if err != nil { // the feed parsed it before accepting it
		d.log.Error("a pushed configuration the feed accepted does not load; the previous limits keep serving", zap.String("version", p.Version), zap.Error(err))
		return
	}
	bursts := d.bursts
	var refused rls.BurstErrors
	if err := cfg.SetBursts(bursts); errors.As(err, &refused) {
		bursts = maps.Clone(bursts)
		var keys []string
		for _, b := range refused {
			delete(bursts, b.Key)
			keys = append(keys, b.Key)
		}
		d.log.Warn("rls.burst names limits the push does not hold as they are named; the other bursts apply", zap.String("version", p.Version), zap.Strings("refused", keys), zap.Error(refused))
		cfg.SetBursts(bursts)
	}
	d.s.SetConfig(cfg)
	d.ready.Store(true)
}

// ShouldRateLimit answers with the limits in use; before a feed's first
// push, as rls.on_failure says; in shadow mode, every answer is OK.
func (d *rateLimitDoor) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if !d.ready.Load() {
		if d.errorFirst {
			return nil, status.Error(codes.Unavailable, "floodgate: no rate limits pushed yet")
		}
		return d.s.Unread()
	}
	return d.s.ShouldRateLimit(ctx, req)
}

func (d *rateLimitDoor) Unread() map[string]func(context.Context) (any, error) {
	return map[string]func(context.Context) (any, error){
		"/" + rlsv3.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit": func(context.Context) (any, error) { return d.s.Unread() },
	}
}

// RateLimitHealthy reports whether the rate limit door of doors has what
// rls.unhealthy_without_limits asks for (a domain to serve); true without
// that setting, or without the door.
func RateLimitHealthy(doors []Door) bool {
	d, ok := Find(doors, RateLimitName).(*rateLimitDoor)
	return !ok || !d.needDomain.Load() || (d.ready.Load() && len(d.s.Config().Domains()) > 0)
}

// RateLimitDomains are the domains the rate limit door of doors serves now
// (none without the door, or before a feed's first push).
func RateLimitDomains(doors []Door) []string {
	if d, ok := Find(doors, RateLimitName).(*rateLimitDoor); ok && d.ready.Load() {
		return d.s.Config().Domains()
	}
	return nil
}
