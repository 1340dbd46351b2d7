// Package rlqs is Envoy's rate limit quota service door
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService,
// StreamRateLimitQuotas): Envoy's rate_limit_quota filter buckets requests
// itself, enforces the assignment it was last sent with no call per
// request, and reports each bucket's allowed and denied counts on one
// stream per domain; the door divides each bucket's global limit among the
// Envoys reporting it, across replicas through the shared store, and
// answers every report with the assignments (docs/rlqs.md).
//
// The limits are the rate limit door's (rls.config, rls.xds), read from
// the board it publishes them on (door.QuotaBoard): the stream's domain is
// the YAML's domain, and a bucket_id's pairs, sorted by key, are the
// descriptor chain that selects the limit. The division's arithmetic is
// in allot; the fleet's counts in the store in fleet.go; a stream in
// stream.go; the Envoy the tests and floodgate check --rlqs play in
// client.go.
package rlqs

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// Name names the door.
const Name = "rlqs"

// ReportInterval is how often Envoy reports: 5,000 ms, hardcoded whatever
// a bucket's reporting_interval says (initTlsStore,
// source/extensions/filters/http/rate_limit_quota/filter_persistence.cc:
// a TODO). The door's windows are one interval long, and an assignment
// lives TTLReports of them.
const ReportInterval = 5 * time.Second

// TTLReports is how many report intervals an assignment lives: refreshed
// by every report, it outlives a report or two lost to a stream that
// broke, and expires (Envoy then falls back to its
// expired_assignment_behavior) once Floodgate has not answered for that
// long.
const TTLReports = 3

// Spec is the quota door as the list of doors registers it: on wherever
// the rate limit door is (rls.config or rls.xds), with its limits.
var Spec = door.Spec{
	Name: Name,
	On:   func(c *door.Config) bool { return c.RLS.Limits() },
	Summary: func(c *door.Config) string {
		return "rate limit quotas (RLQS)"
	},
	Codec: Codec,
	Build: func(c *door.Config, env door.Env) door.Door { return New(c, env, Options{}) },
}

// Codec is the door's codec: its reports decoded leniently (a bucket_id
// value that is not valid UTF-8, which Envoy's C++ protobuf sends as it
// is, is repaired rather than refused, which would break the stream and
// every bucket's reports with it), everything else by protobuf-go.
func Codec() grpccodec.Message {
	return grpccodec.Message{Request: (*rlqsv3.RateLimitQuotaUsageReports)(nil)}
}

// Options tune a door; the zero value is what serve builds.
type Options struct {
	// Clock is the door's time (nil: the system clock): the windows, the
	// demand between reports.
	Clock limiter.Clock
	// Interval is Envoy's report interval (0: ReportInterval), shortened
	// in tests as their Envoys' is.
	Interval time.Duration
	// Store is where the fleet is counted (nil: env.Store.Main).
	Store limiter.Store
	// StoreTimeout bounds one report's call to the store (0: a second).
	StoreTimeout time.Duration
}

// quotaDoor is the rate limit quota service.
type quotaDoor struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	o       Options
	store   limiter.Store
	board   *door.QuotaBoard
	log     *zap.Logger
	rec     decide.Recorder
	metrics *metrics
	fleet   *ledgers
	env     door.Env

	shadow     atomic.Bool  // rls.shadow_mode
	drainDelay atomic.Int64 // listen.drain_delay, as last reloaded

	// sent counts the messages the streams sent; queued the pushes
	// signalled and not yet handled: a test's clock waits for both.
	sent, queued atomic.Int64

	mu       sync.Mutex
	streams  map[*stream]struct{}
	draining bool
	tallies  map[tallyKey]decide.Tally
}

type tallyKey struct {
	name   string
	shadow bool
}

// New builds the door on c and env.
func New(c *door.Config, env door.Env, o Options) door.Door {
	if o.Clock == nil {
		o.Clock = limiter.SystemClock{}
	}
	if o.Interval <= 0 {
		o.Interval = ReportInterval
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = time.Second
	}
	d := &quotaDoor{o: o, store: o.Store, board: env.Quotas(), log: env.Log.Named("rlqs"), rec: env.Recorder, env: env,
		fleet: newLedgers(o.Interval), streams: map[*stream]struct{}{}, tallies: map[tallyKey]decide.Tally{}}
	if d.store == nil && env.Store != nil {
		d.store = env.Store.Main
	}
	d.metrics = newMetrics(env.Registerer, d.fleet)
	first := true
	d.board.Watch(func() {
		d.pushAll()
		d.mu.Lock()
		was := first
		first = false
		d.mu.Unlock()
		if was && env.HealthChanged != nil {
			env.HealthChanged(d)
		}
	})
	d.Reload(c)
	return d
}

func (d *quotaDoor) Name() string { return Name }

func (d *quotaDoor) Register(r grpc.ServiceRegistrar) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(r, d)
}

func (d *quotaDoor) Services() []string {
	return []string{rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName}
}

// On is true while c turns the rate limit door on and it has published
// limits (files, or a feed's first push).
func (d *quotaDoor) On(c *door.Config) bool {
	src, _ := d.board.Current()
	return Spec.On(c) && src != nil
}

// AnswerUnread has nothing: a stream's report that cannot be read within
// the budget of request bytes ends the stream (RESOURCE_EXHAUSTED), which
// Envoy reopens at its next report.
func (d *quotaDoor) AnswerUnread() map[string]func(context.Context) (any, error) { return nil }

// Reload takes c's rls.shadow_mode and drain delay and pushes every
// stream the assignments under them; the limits come from the board
// (a reload of the rate limit door publishes them first).
func (d *quotaDoor) Reload(c *door.Config) {
	d.shadow.Store(c.RLS.ShadowMode)
	d.drainDelay.Store(int64(c.Listen.DrainDelay.Duration))
	d.pushAll()
}

// Run ends every stream once ctx ends and the drain delay has passed
// (serve keeps answering for listen.drain_delay while Envoy moves away,
// then stops gracefully, which a stream that never ends would hold for the
// whole drain timeout): each Envoy reopens its stream, on another replica,
// at its next report.
func (d *quotaDoor) Run(ctx context.Context) {
	t := time.NewTicker(d.fleet.window)
	defer t.Stop()
	for done := false; !done; {
		select {
		case <-t.C:
			d.refresh(d.o.Clock.Now())
		case <-ctx.Done():
			done = true
		}
	}
	time.Sleep(time.Duration(d.drainDelay.Load()))
	d.mu.Lock()
	d.draining = true
	for st := range d.streams {
		st.cancel(errDraining)
	}
	d.mu.Unlock()
}

// Wait lets serve listen at once.
func (d *quotaDoor) Wait(context.Context) bool { return true }

// Pages is /debug/rlqs: every bucket this replica follows, its fleet and
// its Envoys' demand and shares.
func (d *quotaDoor) Pages() map[string]http.Handler {
	return map[string]http.Handler{"/debug/rlqs": http.HandlerFunc(d.debugPage)}
}

// pushAll has every stream send the assignments that changed.
func (d *quotaDoor) pushAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for st := range d.streams {
		st.dmu.Lock()
		st.all = true
		st.dmu.Unlock()
		d.signal(st)
	}
}

// poke has st send the assignments that changed of the buckets marked.
func (d *quotaDoor) poke(st *stream) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.streams[st]; ok {
		d.signal(st)
	}
}

// signal wakes st's push (d.mu held).
func (d *quotaDoor) signal(st *stream) {
	select {
	case st.push <- struct{}{}:
		d.queued.Add(1)
	default:
	}
}

// MaxRefresh bounds the buckets one refresh reads.
const MaxRefresh = 1024

// refresh reads, in one call to the store, the current epoch's registers
// of the buckets this replica's Envoys report (at most MaxRefresh of them,
// the least recently read first), and pushes the Envoys whose shares the
// fleet's move changed: a shift of demand reported on another replica
// reaches this one's Envoys within a window, not at their next reports.
func (d *quotaDoor) refresh(now time.Time) {
	ls := d.fleet.all()
	sort.Slice(ls, func(i, j int) bool { return ls[i].readAt.Before(ls[j].readAt) })
	var reqs []limiter.Request
	var parts []part
	for _, l := range ls {
		if len(parts) == MaxRefresh {
			break
		}
		var p part
		var ok bool
		if reqs, p, ok = l.lookPlan(d.fleet, now, reqs); ok {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return
	}
	res := make([]limiter.Result, len(reqs))
	ctx, cancel := context.WithTimeout(context.Background(), d.o.StoreTimeout)
	_, err := d.store.Take(ctx, reqs, res)
	cancel()
	ok := err == nil
	for i := range res {
		ok = ok && !res[i].Degraded
	}
	if !ok {
		d.metrics.storeErrors.Inc()
		for i := range parts {
			parts[i].absorb(d.fleet, now, res, false)
		}
		return // the reports will say, and log
	}
	for i := range parts {
		parts[i].absorb(d.fleet, now, res, true)
		parts[i].l.pushOthers(nil, now, d.o.Interval)
	}
}

// tally is the recorder's tally of name, resolved once.
func (d *quotaDoor) tally(name string, shadow bool) decide.Tally {
	if d.rec == nil || name == "" {
		return nil
	}
	k := tallyKey{name, shadow}
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.tallies[k]
	if !ok {
		t = d.rec.Tally(name, shadow)
		d.tallies[k] = t
	}
	return t
}

// ttl is an assignment's time to live, whole seconds (Envoy reads only
// assignment_time_to_live.seconds: startActionExpirationTimer).
func (d *quotaDoor) ttl() time.Duration {
	t := TTLReports * d.o.Interval
	return max((t + time.Second - 1).Truncate(time.Second), time.Second)
}

// String names the door in messages.
func (d *quotaDoor) String() string { return fmt.Sprintf("rlqs (interval %s)", d.o.Interval) }
