package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/door/ratelimit/xdsfeed"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/fielderr"
)

// Name names Envoy's rate limit service door.
const Name = "ratelimit"

// Spec is the rate limit door as the list of doors registers it.
var Spec = door.Spec{
	Name: Name,
	On:   func(c *door.Config) bool { return c.RLS.Limits() },
	Summary: func(c *door.Config) string {
		if x := c.RLS.XDS; x != nil {
			return fmt.Sprintf("rate limit domains pushed by xds %s (node %s)", x.Server, x.NodeID)
		}
		ds := Limits(c).Domains()
		return fmt.Sprintf("rate limit %s %s", fielderr.Plural(len(ds), "domain", "domains"), strings.Join(ds, " "))
	},
	Read:  readLimits,
	Codec: Codec,
	Build: func(c *door.Config, env door.Env) door.Door { return newDoor(c, env, nil) },
}

// rateLimitDoor is Envoy's rate limit service (envoy.service.ratelimit.v3),
// deciding the limits of rls.config, or those a feed pushes (rls.xds), with
// descriptor values hashed under the identity secret the policies use.
type rateLimitDoor struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s   *rls.Service
	src provider      // where the limits come from: files, or a feed
	xds *xdsfeed.Feed // the feed the door built and runs (rls.xds), nil without
	// waitFirst is rls.xds.wait_for_first_push, and xdsServer rls.xds.server,
	// as the process started.
	waitFirst bool
	xdsServer string
	log, root *zap.Logger // root: the process's, unnamed
	// domains are the domains of the last configuration applied, and
	// removed counts those a reload removed.
	domains []string
	removed prometheus.Counter
	// errorFirst: before a feed's first push, answer with an RPC error
	// (rls.on_failure: error) rather than by the store's failure mode.
	errorFirst bool

	mu  sync.Mutex   // orders reloads and pushes
	cfg *door.Config // the configuration last reloaded
	// ready: there are limits to decide with (always for files; for a
	// feed, once it has pushed).
	ready atomic.Bool
	// needDomain is rls.unhealthy_without_limits.
	needDomain atomic.Bool
	// board is where the limits in use are published for the quota door
	// (quota.go), hash what they are keyed with.
	board *door.QuotaBoard
	hash  rls.Hasher
}

// newDoor builds the door on c and env, fed by feed (nil: the feed it
// builds from rls.xds, or none).
func newDoor(c *door.Config, env door.Env, feed limitFeed) door.Door {
	d := &rateLimitDoor{log: env.Log.Named("rls"), root: env.Log, errorFirst: c.OnFailure(true) == decide.Error,
		board: env.Quotas(), hash: c.Engine.HashIdentity}
	if feed == nil && c.RLS.XDS != nil {
		d.xds = xdsfeed.New(c.RLS.XDS, env.Log, env.Registerer)
		feed, d.waitFirst, d.xdsServer = d.xds, c.RLS.XDS.WaitForFirstPush, c.RLS.XDS.Server
	}
	d.src = files{}
	if feed != nil {
		d.src = fed{feed: feed, log: d.log}
	}
	d.s = rls.NewService(rls.Empty(), rls.ServiceOptions{
		Hash: c.Engine.HashIdentity, Store: env.Store.Main, ShadowStore: env.Store.Shadow, OnFailure: c.OnFailure(true),
		FailureRetryAfter: c.Store.FailureRetryAfter.Duration,
		Response:          rls.ResponseOptions{Headers: c.RLS.Headers}, Logger: d.log, Registerer: env.Registerer,
		Recorder: env.Recorder,
	})
	d.removed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_rls_domains_removed_total",
		Help: "Rate limit domains a reload removed: their descriptors meet no limit from then on.",
	})
	if env.Registerer != nil {
		env.Registerer.MustRegister(d.removed)
	}
	d.Reload(c)
	d.domains = Limits(c).Domains()
	d.src.onChange(func() {
		d.mu.Lock()
		d.serve()
		d.mu.Unlock()
		// A push can turn the door's health on (its first) or off (no
		// domain, with rls.unhealthy_without_limits).
		if env.HealthChanged != nil {
			env.HealthChanged(d)
		}
	})
	return d
}

func (d *rateLimitDoor) Name() string { return Name }
func (d *rateLimitDoor) Register(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, d)
}
func (d *rateLimitDoor) Services() []string {
	return []string{rlsv3.RateLimitService_ServiceDesc.ServiceName}
}

// On is true while c turns the door on and it has limits to serve: from
// files, or pushed at least once; with rls.unhealthy_without_limits, only
// while they name a domain.
func (d *rateLimitDoor) On(c *door.Config) bool { return Spec.On(c) && d.serving() }

func (d *rateLimitDoor) serving() bool {
	return d.ready.Load() && (!d.needDomain.Load() || len(d.s.Limits().Domains()) > 0)
}

// Reload takes c's settings and the limits its provider has under them:
// c's files', or a feed's last push with c's bursts.
func (d *rateLimitDoor) Reload(c *door.Config) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.s.SetShadowMode(c.RLS.ShadowMode)
	d.s.SetLease(c.RLS.Lease == "auto")
	d.s.SetFixedWindows(c.RLS.Windows == "fixed")
	d.needDomain.Store(c.RLS.UnhealthyWithoutLimits)
	d.cfg = c
	d.serve()
}

// serve swaps in the limits the provider has under the configuration last
// reloaded, if it has any yet.
func (d *rateLimitDoor) serve() {
	if l, ok := d.src.limits(d.cfg); ok {
		d.s.SetLimits(l)
		d.ready.Store(true)
		d.board.Publish(quotas{l: l, hash: d.hash})
	}
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

func (d *rateLimitDoor) AnswerUnread() map[string]func(context.Context) (any, error) {
	return map[string]func(context.Context) (any, error){
		"/" + rlsv3.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit": func(context.Context) (any, error) { return d.s.Unread() },
	}
}

// Healthy is whether the door has what rls.unhealthy_without_limits asks
// for (a domain to serve), as envoyproxy/ratelimit's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED; true without that setting.
func (d *rateLimitDoor) Healthy() bool {
	return !d.needDomain.Load() || (d.ready.Load() && len(d.s.Limits().Domains()) > 0)
}

// Run runs the feed the door built (rls.xds), if any.
func (d *rateLimitDoor) Run(ctx context.Context) {
	if d.xds != nil {
		d.xds.Run(ctx)
	}
}

// Wait holds serve's listeners until the feed's first push with
// rls.xds.wait_for_first_push, as envoyproxy/ratelimit does without
// FORCE_START_WITHOUT_INITIAL_CONFIG: no port before the limits.
func (d *rateLimitDoor) Wait(ctx context.Context) bool {
	if !d.waitFirst {
		return true
	}
	d.root.Info("waiting for the first push of rate limits", zap.String("xds", d.xdsServer))
	select {
	case <-d.xds.First():
		return true
	case <-ctx.Done():
		return false
	}
}

// Pages is /debug/xds, the feed's state, when the door built one.
func (d *rateLimitDoor) Pages() map[string]http.Handler {
	if d.xds == nil {
		return nil
	}
	return map[string]http.Handler{"/debug/xds": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		d.xds.WriteStatus(w)
	})}
}

// Fields name the domains c's files hold.
func (d *rateLimitDoor) Fields(c *door.Config) []zap.Field {
	return []zap.Field{zap.Strings("rls_domains", Limits(c).Domains())}
}

// Files is rls.config.
func (d *rateLimitDoor) Files(c *config.Config) string { return c.RLS.Config }

// Snapshot is the rate limit files' content (rls.Snapshot).
func (d *rateLimitDoor) Snapshot(files string) []byte { return rls.Snapshot(files) }

func (d *rateLimitDoor) DigestLabel() (label, help string) {
	return "rls_sha256", "the rate limit files rls.config names, as read (rls_sha256, empty without them)"
}

// Reported counts and says the domains a reload to c removed: their
// descriptors meet no limit from then on.
func (d *rateLimitDoor) Reported(c *door.Config) {
	domains := Limits(c).Domains()
	if gone := removedFrom(d.domains, domains); len(gone) > 0 {
		d.removed.Add(float64(len(gone)))
		d.root.Warn("rate limit domains removed: their descriptors meet no limit now", zap.Strings("removed", gone), zap.Strings("rls_domains", domains))
	}
	d.domains = domains
}

// removedFrom lists the domains of before (sorted) that after (sorted)
// lacks.
func removedFrom(before, after []string) []string {
	var gone []string
	for _, d := range before {
		if _, found := slices.BinarySearch(after, d); !found {
			gone = append(gone, d)
		}
	}
	return gone
}
