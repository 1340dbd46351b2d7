package rls

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/pipeline"
	"github.com/floodgate/floodgate/limiter/respond"
)

// ServiceOptions configure a Service.
type ServiceOptions struct {
	Hash Hasher
	// Store decides the enforced limits; ShadowStore the shadow ones
	// (default: Store), through the pipeline every door shares
	// (limiter/pipeline).
	Store, ShadowStore limiter.Store
	// OnFailure is what a request answers when the store cannot decide:
	// decide.Allow (OK), decide.Deny (OVER_LIMIT) or decide.Error (the
	// RPC fails with UNAVAILABLE, so that the failure_mode_deny of Envoy's
	// rate limit filter decides). Allowed and denied answers are marked
	// x-ratelimit-degraded, as a Check's are.
	OnFailure decide.OnFailure
	// FailureRetryAfter is the Retry-After of a decide.Deny answer
	// (store.failure_retry_after; default 1s).
	FailureRetryAfter time.Duration
	Response          ResponseOptions
	Logger            *zap.Logger
	// Registerer receives the service's metrics (nil: none).
	Registerer prometheus.Registerer
	// Recorder, when set, hears every configured limit's decisions, for
	// the report of who is being limited (/debug/limited): one tally per
	// limit, named by ReportName.
	Recorder decide.Recorder
}

// Service answers Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from a
// configuration in envoyproxy/ratelimit's format. A decision is never an RPC
// error, unless OnFailure is decide.Error and the store could not decide.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	state    atomic.Pointer[serving]
	opts     ServiceOptions
	metrics  metrics
	pipe     *pipeline.Pipeline // without rls.shadow_mode: the request gate's
	deciders sync.Pool          // *decide.Decider: each keeps buffers for one goroutine
}

// NewService returns a service deciding with cfg.
func NewService(cfg *Limits, o ServiceOptions) *Service {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.FailureRetryAfter <= 0 {
		o.FailureRetryAfter = time.Second
	}
	s := &Service{opts: o, metrics: newMetrics(o.Registerer)}
	s.pipe = pipeline.New(pipeline.Options{Store: o.Store, ShadowStore: o.ShadowStore, OnFailure: o.OnFailure,
		FailureRetryAfter: o.FailureRetryAfter, StoreErrors: s.metrics.storeErrors, Logger: o.Logger})
	s.deciders.New = func() any { return &decide.Decider{Concurrent: true} }
	s.state.Store(&serving{pipe: s.pipe})
	s.SetLimits(cfg)
	return s
}

// serving is a configuration, its families (counters and tallies) and
// the pipeline with the shadow mode in use, swapped together.
type serving struct {
	cfg      *Limits
	families *families
	pipe     *pipeline.Pipeline
	lease    bool // rls.lease: auto
	fixed    bool // rls.windows: fixed
}

// SetConfig swaps in a new configuration: requests in flight finish on the
// old one.
func (s *Service) SetLimits(cfg *Limits) {
	st := s.state.Load()
	s.state.Store(&serving{cfg: cfg, families: s.newFamilies(cfg), pipe: st.pipe, lease: st.lease, fixed: st.fixed})
}

// SetLease turns rls.lease on or off: on, the enforced limits' buckets
// may be decided from a lease when hot (limiter/lease).
func (s *Service) SetLease(on bool) {
	st := *s.state.Load()
	st.lease = on
	s.state.Store(&st)
}

// SetFixedWindows turns rls.windows: fixed on or off: on, every limit
// counts as envoyproxy/ratelimit's binary does, in fixed windows (see
// Limits.PlanFixed).
func (s *Service) SetFixedWindows(on bool) {
	st := *s.state.Load()
	st.fixed = on
	s.state.Store(&st)
}

// SetShadowMode turns rls.shadow_mode on or off: on, every answer is OK,
// the statuses still saying which descriptors are over their limits, as
// envoyproxy/ratelimit's SHADOW_MODE answers (src/service/ratelimit.go,
// shouldRateLimitWorker: the overall code only), without what only a
// denial carries (its body and content-type), which Envoy would otherwise
// add to the upstream's response.
func (s *Service) SetShadowMode(on bool) {
	st := *s.state.Load()
	st.pipe = s.pipe.WithShadowMode(on)
	s.state.Store(&st)
}

// Limits returns the configuration in use.
func (s *Service) Limits() *Limits { return s.state.Load().cfg }

// ShouldRateLimit decides one request of Envoy's rate limit filter. A
// request past MaxDescriptors or MaxEntries, or bringing a limit of its
// own that cannot be counted, is answered by the failure mode without a
// decision, counted and logged.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, err error) {
	st := s.state.Load()
	if n, e := Size(req); n > MaxDescriptors || e > MaxEntries {
		reason := "descriptors"
		if n <= MaxDescriptors {
			reason = "entries"
		}
		s.metrics.unplanned.WithLabelValues(reason).Inc()
		s.opts.Logger.Warn("rate limit request too large to decide; the failure mode answers", zap.String("domain", req.GetDomain()),
			zap.Int("descriptors", n), zap.Int("max_descriptors", MaxDescriptors), zap.Int("entries", e), zap.Int("max_entries", MaxEntries))
		return s.failed(st.pipe, 0)
	}
	plan, err := st.cfg.plan(req, s.opts.Hash, st.fixed)
	if err != nil {
		s.metrics.unplanned.WithLabelValues("limit").Inc()
		s.opts.Logger.Warn("rate limit request cannot be counted; the failure mode answers", zap.String("domain", req.GetDomain()), zap.Error(err))
		return s.failed(st.pipe, len(plan.Items))
	}
	if st.lease && !st.fixed {
		for i := range plan.Buckets {
			plan.Buckets[i].Request.Lease = !plan.Buckets[i].Shadow
		}
	}
	d := decide.Decision{Allowed: true, ShadowAllowed: true}
	var res []limiter.Result
	if len(plan.Buckets) > 0 {
		res = make([]limiter.Result, len(plan.Buckets))
		dec := s.deciders.Get().(*decide.Decider)
		var out pipeline.Outcome
		d, out = st.pipe.Decide(ctx, dec, plan.Buckets, res, zap.String("domain", req.GetDomain()))
		s.deciders.Put(dec)
		if out.Failed {
			return s.failed(st.pipe, len(plan.Items))
		}
	}
	results := make([]pipeline.Result, len(plan.Items))
	denied := plan.classify(res, &d, results)
	out := st.pipe.Decided(!denied, d.Degraded)
	resp = plan.Respond(res, results, out, s.opts.Response)
	s.metrics.outcomes.Count(out)
	st.families.count(req.GetDomain(), &plan, results)
	return resp, nil
}

// Unread answers, by the failure mode, a request that was not read (the
// server had no memory to spare for it in time), as when the store cannot
// decide: it has no descriptor statuses, since its descriptors are unknown.
// rls.shadow_mode does not apply: the request was not decided.
func (s *Service) Unread() (*rlsv3.RateLimitResponse, error) {
	return s.failed(s.pipe, 0)
}

// failed answers, and counts, the failure mode's outcome for a request of
// n descriptors that was not decided: an RPC error (decide.Error), or OK
// or OVER_LIMIT marked x-ratelimit-degraded, the denial with the
// Retry-After, content-type and JSON body a denied Check has. n is 0 for a
// request whose descriptors are not read, or too many to answer one by
// one.
func (s *Service) failed(pl *pipeline.Pipeline, n int) (*rlsv3.RateLimitResponse, error) {
	out := pl.Failure()
	s.metrics.outcomes.Count(out)
	if out.Answer == pipeline.Error {
		return nil, status.Error(codes.Unavailable, "floodgate: the rate limit store could not decide")
	}
	degraded := header(respond.HeaderDegraded, "true")
	if !out.Denied() {
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: allStatuses(n, rlsv3.RateLimitResponse_OK, 0),
			ResponseHeadersToAdd: []*corev3.HeaderValue{degraded}}, nil
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: allStatuses(n, rlsv3.RateLimitResponse_OVER_LIMIT, out.RetryAfter)}
	if out.Shadowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	resp.ResponseHeadersToAdd, resp.RawBody = denial([]*corev3.HeaderValue{degraded}, out.RetryAfter, false, true, out.Shadowed)
	return resp, nil
}

// allStatuses is n statuses of code, each waiting wait when it is not 0.
func allStatuses(n int, code rlsv3.RateLimitResponse_Code, wait time.Duration) []*rlsv3.RateLimitResponse_DescriptorStatus {
	out := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range out {
		out[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: code}
		if wait > 0 {
			out[i].DurationUntilReset = &durationpb.Duration{Seconds: respond.Seconds(wait)}
		}
	}
	return out
}
