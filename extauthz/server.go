package extauthz

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
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

	state   atomic.Pointer[serverState]
	store   limiter.Store
	log     *zap.Logger
	metrics *Metrics
	opts    ServerOptions
	missing missingReporter // logs the policies whose key sources were all empty
}

// serverState is what a reload swaps: the engine and its policies' counters.
type serverState struct {
	engine   *Engine
	counters map[*Policy]policyCounters
	tallies  tallies // the policies' tallies in the report of who is limited
}

// NewServer returns a server deciding with e's policies in store.
func NewServer(e *Engine, store limiter.Store, o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	switch o.OnFailure {
	case decide.Allow:
	case decide.Deny:
		if o.FailureRetryAfter <= 0 {
			panic(fmt.Sprintf("extauthz: a server that denies on failure needs a positive FailureRetryAfter (got %v)", o.FailureRetryAfter))
		}
	default:
		panic(fmt.Sprintf("extauthz: OnFailure %v: a Check answers by allow or deny, never an RPC error", o.OnFailure))
	}
	if o.ShadowStore == nil {
		o.ShadowStore = store
	}
	s := &Server{store: store, log: o.Logger, metrics: NewMetrics(o.Registerer), opts: o}
	s.SetEngine(e)
	return s
}

// SetEngine switches to a new engine atomically: Checks in flight finish on
// the old one, new Checks use the new one.
func (s *Server) SetEngine(e *Engine) { s.state.Store(s.newState(e)) }

// newState is e with its policies' counters and tallies resolved. Another
// door deciding the same policies (the HTTP door) resolves its own: the
// counters and tallies are looked up by policy name, so both count alike.
func (s *Server) newState(e *Engine) *serverState {
	st := &serverState{engine: e, counters: make(map[*Policy]policyCounters, len(e.Policies)), tallies: newTallies(s.opts.Recorder, e)}
	for _, p := range e.Policies {
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

// Check decides one request: Plan, then the decide step (limiter/decide),
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
	vd, o := s.decide(ctx, st, sc, start)
	oc := &s.metrics.outcomes
	switch {
	case vd == verdictUnmatched:
		oc.unmatched.Inc()
		return plainOK(), nil
	case vd == verdictShadowOnly:
		oc.allowed.Inc()
		return plainOK(), nil
	case vd == verdictFailed:
		return s.failed(st.engine, &o), nil
	case !v.HTTP && o.allowed:
		oc.allowed.Inc()
		return plainOK(), nil
	case !v.HTTP:
		oc.denied.Inc()
		return tcpDeny(), nil
	case o.allowed:
		pickCounter(o.degraded, oc.degradedAllowed, oc.allowed).Inc()
		return st.engine.okResponse(&o), nil
	}
	pickCounter(o.degraded, oc.degradedDenied, oc.denied).Inc()
	return st.engine.denyResponse(&o, limiter.RetryAfter(o.results)), nil
}

// verdict is what deciding a request came to, for its door to answer.
type verdict uint8

const (
	// verdictUnmatched: no policy applied; the request passes untouched.
	verdictUnmatched verdict = iota
	// verdictShadowOnly: only shadow policies applied, which never deny;
	// the request passes untouched.
	verdictShadowOnly
	// verdictFailed: the store could not decide; the failure mode answers.
	verdictFailed
	// verdictDecided: the outcome holds the enforced policies' decision.
	verdictDecided
)

// decide is the part of answering a request that every door deciding the
// policies shares: it plans the request in sc.view under st, decides the
// plan (enforced policies together, shadow ones beside them), and counts,
// logs and records the decision. The door counts its own outcome and
// renders the answer. The outcome's slices are sc's.
func (s *Server) decide(ctx context.Context, st *serverState, sc *scratch, start time.Time) (verdict, outcome) {
	v := &sc.view
	plan := &sc.plan
	st.engine.Plan(v, plan)
	if len(plan.Buckets) == 0 {
		return verdictUnmatched, outcome{}
	}
	s.noteMissing(st, plan, v)

	// Enforced policies decide together; shadow policies decide on their
	// own, beside them, and never deny.
	res := sc.resultsFor(len(plan.Buckets))
	sc.dec.Store, sc.dec.Shadow = s.store, s.opts.ShadowStore
	d := sc.dec.Decide(ctx, plan.Buckets, res)
	s.countShadow(st, plan, res, &d, v)
	st.tallies.record(start, st.engine, plan, res, &d, v, &sc.name)
	o := outcome{allowed: d.Allowed, degraded: d.Degraded, grpc: v.GRPC}
	o.policies, o.results = sc.enforced(plan, res)
	if len(o.policies) == 0 {
		return verdictShadowOnly, o
	}
	if d.Err != nil {
		s.metrics.StoreErrors.Inc()
		s.log.Warn("store could not decide; failure mode answers", zap.Error(d.Err), zap.String("path", v.Path))
		return verdictFailed, outcome{grpc: v.GRPC}
	}
	for i, p := range o.policies {
		c := st.counters[p]
		if o.allowed {
			c.allowed.Inc()
		} else if !o.results[i].Allowed {
			c.denied.Inc()
		}
	}
	if i := respond.Denying(o.results); !o.allowed && i >= 0 && s.log.Core().Enabled(zap.DebugLevel) {
		s.log.Debug("denied", zap.String("policy", o.policies[i].Name), zap.String("identity", identityOf(plan, o.policies[i])),
			zap.Duration("retry_after", limiter.RetryAfter(o.results)), zap.String("path", v.Path))
	}
	return verdictDecided, o
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

// countShadow records what the shadow policies of plan would have done.
func (s *Server) countShadow(st *serverState, plan *Plan, res []limiter.Result, d *decide.Decision, v *View) {
	if d.ShadowErr != nil {
		var p *decide.ShadowPanic
		if errors.As(d.ShadowErr, &p) {
			s.log.Error("shadow decision panicked", zap.Any("panic", p.Value), zap.ByteString("stack", p.Stack))
		} else {
			s.metrics.StoreErrors.Inc()
		}
		return
	}
	for i, p := range plan.Policies {
		if !p.Shadow {
			continue
		}
		// Each shadow policy decides as if it were the only one
		// (decide.Decider): its own bucket says how it fared.
		c := st.counters[p]
		if res[i].Allowed {
			c.shadowAllowed.Inc()
			continue
		}
		c.shadowDenied.Inc()
		s.log.Info("shadow policy would deny", zap.String("policy", p.Name),
			zap.String("identity", plan.Buckets[i].Request.ID), zap.Duration("retry_after", res[i].RetryAfter), zap.String("path", v.Path))
	}
}

// Unread answers, by the failure mode, a Check whose request was not read
// (the server had no memory to spare for it in time): as when the store
// cannot decide, allowed marked degraded, or denied with FailureRetryAfter.
func (s *Server) Unread() *authv3.CheckResponse {
	return s.failed(s.state.Load().engine, nil)
}

// failed answers by the failure mode when the store could not decide.
func (s *Server) failed(e *Engine, o *outcome) *authv3.CheckResponse {
	if o == nil {
		o = &outcome{}
	}
	o.policies, o.results, o.degraded = nil, nil, true
	if s.opts.OnFailure == decide.Deny {
		s.metrics.outcomes.degradedDenied.Inc()
		return e.denyResponse(o, s.opts.FailureRetryAfter)
	}
	s.metrics.outcomes.degradedAllowed.Inc()
	return e.okResponse(o)
}

func pickCounter(cond bool, yes, no prometheus.Counter) prometheus.Counter {
	if cond {
		return yes
	}
	return no
}
