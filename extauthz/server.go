package extauthz

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/pipeline"
	"github.com/floodgate/floodgate/limiter/respond"
)

// ServerOptions configure a Server. The zero value works: no logs, no
// metrics, fail open.
type ServerOptions struct {
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	// OnFailure is what a Check answers when the store cannot decide:
	// decide.Allow (marked x-ratelimit-degraded) or decide.Deny (429 with
	// FailureRetryAfter). Never decide.Error: Envoy's ext_authz filter
	// takes an RPC error for an outage, not a decision.
	OnFailure decide.OnFailure
	// FailureRetryAfter is the Retry-After of a decide.Deny answer, positive
	// with it (serve passes store.failure_retry_after).
	FailureRetryAfter time.Duration
	// ShadowStore decides shadow policies (default: the main store). The
	// resilient store offers an uncached view for it, so an over-limit
	// cache does not hide would-be denials.
	ShadowStore limiter.Store
	// Recorder, when set, hears every policy's decision, for the report of
	// who is being limited.
	Recorder decide.Recorder
}

// Server implements Envoy's Authorization service. It never answers with an
// RPC error: Envoy would treat that as an outage, and with failure_mode_allow
// let everything through.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	state    atomic.Pointer[serverState]
	store    limiter.Store
	pipe     *pipeline.Pipeline
	outcomes *pipeline.Outcomes
	log      *zap.Logger
	metrics  *Metrics
	opts     ServerOptions
	missing  missingReporter // logs the policies whose key sources were all empty
}

// serverState is what a reload swaps: the engine and its policies'
// families (their counters and tallies) and identity counters.
type serverState struct {
	engine   *Engine
	families map[*Policy]*pipeline.Family
	counters map[*Policy]identityCounters
}

// NewServer returns a server deciding with e's policies in store.
func NewServer(e *Engine, store limiter.Store, o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.OnFailure != decide.Allow && o.OnFailure != decide.Deny {
		panic(fmt.Sprintf("extauthz: OnFailure %v: a Check answers by allow or deny, never an RPC error", o.OnFailure))
	}
	if o.OnFailure == decide.Deny && o.FailureRetryAfter <= 0 {
		panic(fmt.Sprintf("extauthz: a server that denies on failure needs a positive FailureRetryAfter (got %v)", o.FailureRetryAfter))
	}
	if o.ShadowStore == nil {
		o.ShadowStore = store
	}
	m := NewMetrics(o.Registerer)
	s := &Server{store: store, log: o.Logger, metrics: m, opts: o,
		outcomes: pipeline.NewOutcomes(m.Checks, pipeline.OutcomeAllowed, pipeline.OutcomeDenied, pipeline.OutcomeUnmatched,
			pipeline.OutcomeDegradedAllowed, pipeline.OutcomeDegradedDenied)}
	s.pipe = s.pipeline(o.OnFailure)
	s.SetEngine(e)
	return s
}

// pipeline is the way from plan to outcome of a door deciding s's
// policies with failure mode f: s's stores, store error count and log.
func (s *Server) pipeline(f decide.OnFailure) *pipeline.Pipeline {
	return pipeline.New(pipeline.Options{Store: s.store, ShadowStore: s.opts.ShadowStore, OnFailure: f,
		FailureRetryAfter: s.opts.FailureRetryAfter, StoreErrors: s.metrics.StoreErrors, Logger: s.log})
}

// SetEngine switches to a new engine atomically: Checks in flight finish on
// the old one, new Checks use the new one.
func (s *Server) SetEngine(e *Engine) { s.state.Store(s.newState(e)) }

// newState is e with its policies' families and counters resolved.
// Another door deciding the same policies (the HTTP door) resolves its
// own: they are looked up by policy name, so both count alike.
func (s *Server) newState(e *Engine) *serverState {
	st := &serverState{engine: e, families: make(map[*Policy]*pipeline.Family, len(e.Policies)),
		counters: make(map[*Policy]identityCounters, len(e.Policies))}
	for _, p := range e.Policies {
		st.families[p] = pipeline.NewFamily(p.Name, p.Shadow, s.metrics.Decisions, []string{p.Name}, s.opts.Recorder, p.Name)
		st.counters[p] = s.metrics.forPolicy(p.Name)
	}
	return st
}

// Engine returns the engine in use.
func (s *Server) Engine() *Engine { return s.state.Load().engine }

// Metrics returns the server's collectors.
func (s *Server) Metrics() *Metrics { return s.metrics }

// scratch is one Check's working memory, pooled so that a decision over up
// to maxInline enforced and maxInline shadow policies allocates none of it:
// the request view, the plan and its results, the Decider, and the enforced
// policies and results gathered for the response, all on inline arrays.
// Nothing in it outlives the Check: stores copy what they keep (strings are
// shared, never the slices) and the response is rendered from copies.
type scratch struct {
	view     View
	plan     Plan
	dec      decide.Decider
	bktArr   [2 * decide.MaxInline]decide.Bucket
	polArr   [2 * decide.MaxInline]*Policy
	resArr   [2 * decide.MaxInline]limiter.Result
	policies [decide.MaxInline]*Policy
	results  [decide.MaxInline]limiter.Result
	name     callerName // the caller's label for the recorder
}

var scratchPool = sync.Pool{New: func() any {
	sc := &scratch{dec: decide.Decider{Concurrent: true}}
	sc.reset()
	return sc
}}

// reset drops every reference the scratch holds, so a pooled one keeps no
// request or store alive.
func (sc *scratch) reset() {
	sc.view = View{}
	sc.plan.Reset()
	sc.plan = Plan{Buckets: sc.bktArr[:0], Policies: sc.polArr[:0]}
	clear(sc.policies[:])
	sc.dec.Store, sc.dec.Shadow = nil, nil
}

// resultsFor returns room for n results, in the inline array when it fits.
func (sc *scratch) resultsFor(n int) []limiter.Result {
	if n <= len(sc.resArr) {
		return sc.resArr[:n]
	}
	return make([]limiter.Result, n)
}

// enforced gathers the enforced buckets' policies and results, in plan
// order, for the response.
func (sc *scratch) enforced(plan *Plan, res []limiter.Result) ([]*Policy, []limiter.Result) {
	policies, results := sc.policies[:0], sc.results[:0]
	for i, p := range plan.Policies {
		if !p.Shadow {
			policies, results = append(policies, p), append(results, res[i])
		}
	}
	return policies, results
}

// Check decides one request: Plan, then the pipeline (limiter/pipeline),
// then the response. See the package comment for the contract.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (resp *authv3.CheckResponse, _ error) {
	start := time.Now()
	st := s.state.Load()
	sc := scratchPool.Get().(*scratch)
	defer func() {
		if p := recover(); p != nil {
			// A bug must not become an outage (or, with fail-open, a bypass).
			s.log.Error("check panicked", zap.Any("panic", p), zap.Stack("stack"))
			resp = s.failed(st.engine, nil)
		}
		sc.reset()
		scratchPool.Put(sc)
		s.metrics.Latency.Observe(time.Since(start).Seconds())
	}()
	v := &sc.view
	v.Reset(req)
	out, o := s.decide(ctx, st, s.pipe, sc, start)
	switch {
	case out.Answer == pipeline.Unmatched || out.Answer == pipeline.ShadowOnly:
		s.outcomes.Count(out)
		return plainOK(), nil
	case out.Failed:
		return s.failed(st.engine, &o), nil
	case !v.HTTP:
		// A TCP connection has no headers to mark it degraded.
		out.Degraded = false
		s.outcomes.Count(out)
		if out.Answer == pipeline.Allow {
			return plainOK(), nil
		}
		return tcpDeny(), nil
	}
	s.outcomes.Count(out)
	if out.Answer == pipeline.Allow {
		return st.engine.okResponse(&o), nil
	}
	return st.engine.denyResponse(&o, limiter.RetryAfter(o.results)), nil
}

// decide is the part of answering a request that every door deciding the
// policies shares: it plans the request in sc.view under st and runs the
// plan through pl, which decides it (enforced policies together, shadow
// ones beside them); each policy's result is counted, logged and
// recorded. The door counts its own outcome and renders the answer. The
// rendering's slices are sc's.
func (s *Server) decide(ctx context.Context, st *serverState, pl *pipeline.Pipeline, sc *scratch, start time.Time) (pipeline.Outcome, outcome) {
	v := &sc.view
	plan := &sc.plan
	st.engine.Plan(v, plan)
	if len(plan.Buckets) == 0 {
		return pipeline.Outcome{Answer: pipeline.Unmatched}, outcome{}
	}
	s.noteMissing(st, plan, v)
	res := sc.resultsFor(len(plan.Buckets))
	d, out := pl.Decide(ctx, &sc.dec, plan.Buckets, res, zap.String("path", v.Path))
	for i, p := range plan.Policies {
		f := st.families[p]
		r := pipeline.ClassifyBucket(plan.Buckets[i], &res[i], &d)
		id := plan.Buckets[i].Request.ID
		sc.name = callerName{e: st.engine, p: p, v: v, id: id}
		f.Count(r, start, id, &sc.name)
		if r == pipeline.ShadowDenied {
			pl.LogShadowDenied(f, id, res[i].RetryAfter, zap.String("path", v.Path))
		}
	}
	sc.name = callerName{}
	o := outcome{degraded: out.Degraded, grpc: v.GRPC}
	o.policies, o.results = sc.enforced(plan, res)
	if len(o.policies) == 0 {
		return pipeline.Outcome{Answer: pipeline.ShadowOnly}, o
	}
	if out.Failed {
		return out, outcome{grpc: v.GRPC}
	}
	o.allowed = out.Answer == pipeline.Allow
	if i := respond.Denying(o.results); !o.allowed && i >= 0 && pl.Debugging() {
		pl.LogDenied(st.families[o.policies[i]], identityOf(plan, o.policies[i]), limiter.RetryAfter(o.results), zap.String("path", v.Path))
	}
	return out, o
}

// identityOf is the bucket identity plan gives p.
func identityOf(plan *Plan, p *Policy) string {
	for i, q := range plan.Policies {
		if q == p {
			return plan.Buckets[i].Request.ID
		}
	}
	return ""
}

// Unread answers, by the failure mode, a Check whose request was not read
// (the server had no memory to spare for it in time): as when the store
// cannot decide, allowed marked degraded, or denied with FailureRetryAfter.
func (s *Server) Unread() *authv3.CheckResponse {
	return s.failed(s.state.Load().engine, nil)
}

// failed answers, and counts, the failure mode's outcome.
func (s *Server) failed(e *Engine, o *outcome) *authv3.CheckResponse {
	if o == nil {
		o = &outcome{}
	}
	out := s.pipe.Failure()
	s.outcomes.Count(out)
	o.policies, o.results, o.degraded = nil, nil, true
	if out.Answer == pipeline.Deny {
		return e.denyResponse(o, out.RetryAfter)
	}
	return e.okResponse(o)
}
