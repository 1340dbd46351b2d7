package extauthz

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
)

// FailureMode is what a Check answers when the store cannot decide.
type FailureMode int

const (
	// FailOpen allows the request, marked with x-ratelimit-degraded.
	FailOpen FailureMode = iota
	// FailClosed denies it with 429 and a short Retry-After.
	FailClosed
)

// ServerOptions configure a Server. The zero value works: no logs, no
// metrics, fail open.
type ServerOptions struct {
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	OnError    FailureMode
	// ErrorRetryAfter is the Retry-After of a FailClosed denial (default 1s).
	ErrorRetryAfter time.Duration
	// ShadowStore decides shadow policies (default: the main store). The
	// resilient store offers an uncached view for it, so an over-limit
	// cache does not hide would-be denials.
	ShadowStore limiter.Store
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
	missing missingReporter // identitymissing.go
}

// serverState is what a reload swaps: the engine and its policies' counters.
type serverState struct {
	engine   *Engine
	counters map[*Policy]policyCounters
}

// NewServer returns a server deciding with e's policies in store.
func NewServer(e *Engine, store limiter.Store, o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.ErrorRetryAfter <= 0 {
		o.ErrorRetryAfter = time.Second
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
func (s *Server) SetEngine(e *Engine) {
	st := &serverState{engine: e, counters: make(map[*Policy]policyCounters, len(e.Policies))}
	for _, p := range e.Policies {
		st.counters[p] = s.metrics.forPolicy(p.Name)
	}
	s.state.Store(st)
}

// Engine returns the engine in use.
func (s *Server) Engine() *Engine { return s.state.Load().engine }

// Metrics returns the server's collectors.
func (s *Server) Metrics() *Metrics { return s.metrics }

// planned is one matched policy with its bucket request.
type planned struct {
	policy *Policy
	req    limiter.Request
}

// scratch is one Check's working memory, pooled so that a decision over up
// to maxInline policies allocates none of it: the request view, the planned
// policies and the store's requests and results. Nothing in it outlives the
// Check: stores copy what they keep (strings are shared, never the slices)
// and the response is rendered from copies.
type scratch struct {
	view     View
	plan     [maxInline]planned
	shadow   [maxInline]planned
	policies [maxInline]*Policy
	reqs     [maxInline]limiter.Request
	results  [maxInline]limiter.Result
}

// maxInline is how many matching policies a Check handles in pooled memory.
const maxInline = 8

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// reset drops every reference the scratch holds, so a pooled one keeps no
// request alive.
func (sc *scratch) reset(n int) {
	sc.view = View{}
	clear(sc.plan[:])
	clear(sc.shadow[:])
	clear(sc.policies[:n])
	clear(sc.reqs[:n])
	clear(sc.results[:n])
}

// Check decides one request. See the package comment for the contract.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (resp *authv3.CheckResponse, _ error) {
	start := time.Now()
	st := s.state.Load()
	defer func() {
		if p := recover(); p != nil {
			// A bug must not become an outage (or, with fail-open, a bypass).
			s.log.Error("check panicked", zap.Any("panic", p), zap.Stack("stack"))
			resp = s.failed(st.engine, nil)
		}
		s.metrics.Latency.Observe(time.Since(start).Seconds())
	}()

	sc := scratchPool.Get().(*scratch)
	used := 0
	defer func() { sc.reset(used); scratchPool.Put(sc) }()
	v := &sc.view
	v.Reset(req)

	plan := st.engine.plan(v, sc.plan[:0])
	if len(plan) == 0 {
		s.metrics.Checks.WithLabelValues(outcomeUnmatched).Inc()
		return plainOK(), nil
	}
	s.noteMissing(st, plan, v)

	// Enforced policies decide together; shadow policies decide on their own
	// and never deny.
	enforced, shadow := plan, sc.shadow[:0]
	for _, p := range plan {
		if p.policy.Shadow {
			shadow = append(shadow, p)
		}
	}
	if len(shadow) > 0 {
		enforced = plan[:0] // filtered in place: the shadow ones are copied out
		for _, p := range plan {
			if !p.policy.Shadow {
				enforced = append(enforced, p)
			}
		}
	}
	if len(shadow) > 0 {
		s.shadow(ctx, st, shadow, v)
	}
	if len(enforced) == 0 {
		s.metrics.Checks.WithLabelValues(outcomeAllowed).Inc()
		return plainOK(), nil
	}

	o := outcome{policies: sc.policies[:0], results: sc.results[:0], grpc: v.GRPC}
	reqs := sc.reqs[:0]
	if n := len(enforced); n <= maxInline {
		used = n
		o.policies, o.results, reqs = o.policies[:n], o.results[:n], reqs[:n]
	} else {
		o.policies, o.results, reqs = make([]*Policy, n), make([]limiter.Result, n), make([]limiter.Request, n)
	}
	for i, p := range enforced {
		o.policies[i], reqs[i] = p.policy, p.req
	}
	allowed, err := s.store.Take(ctx, reqs, o.results)
	if err != nil {
		s.metrics.StoreErrors.Inc()
		s.log.Warn("store could not decide; failure mode answers", zap.Error(err), zap.String("path", v.Path))
		return s.failed(st.engine, &o), nil
	}
	o.allowed = allowed
	for i := range o.results {
		o.degraded = o.degraded || o.results[i].Degraded
	}
	for i, p := range o.policies {
		c := st.counters[p]
		if allowed {
			c.allowed.Inc()
		} else if !o.results[i].Allowed {
			c.denied.Inc()
		}
	}
	if !v.HTTP {
		if allowed {
			s.metrics.Checks.WithLabelValues(outcomeAllowed).Inc()
			return plainOK(), nil
		}
		s.metrics.Checks.WithLabelValues(outcomeDenied).Inc()
		return tcpDeny(), nil
	}
	if allowed {
		s.metrics.Checks.WithLabelValues(pick(o.degraded, outcomeDegradedAllowed, outcomeAllowed)).Inc()
		return st.engine.okResponse(&o), nil
	}
	s.metrics.Checks.WithLabelValues(pick(o.degraded, outcomeDegradedDenied, outcomeDenied)).Inc()
	if d := denying(&o); d >= 0 && s.log.Core().Enabled(zap.DebugLevel) {
		s.log.Debug("denied", zap.String("policy", o.policies[d].Name), zap.String("identity", reqs[d].ID),
			zap.Duration("retry_after", limiter.RetryAfter(o.results)), zap.String("path", v.Path))
	}
	return st.engine.denyResponse(&o, limiter.RetryAfter(o.results)), nil
}

// failed answers by the failure mode when the store could not decide.
func (s *Server) failed(e *Engine, o *outcome) *authv3.CheckResponse {
	if o == nil {
		o = &outcome{}
	}
	o.policies, o.results, o.degraded = nil, nil, true
	if s.opts.OnError == FailClosed {
		s.metrics.Checks.WithLabelValues(outcomeDegradedDenied).Inc()
		return e.denyResponse(o, s.opts.ErrorRetryAfter)
	}
	s.metrics.Checks.WithLabelValues(outcomeDegradedAllowed).Inc()
	return e.okResponse(o)
}

// shadow decides the shadow policies and records what they would have done.
func (s *Server) shadow(ctx context.Context, st *serverState, plan []planned, v *View) {
	reqs := make([]limiter.Request, len(plan))
	for i, p := range plan {
		reqs[i] = p.req
	}
	res := make([]limiter.Result, len(plan))
	allowed, err := s.opts.ShadowStore.Take(ctx, reqs, res)
	if err != nil {
		s.metrics.StoreErrors.Inc()
		return
	}
	for i, p := range plan {
		c := st.counters[p.policy]
		if allowed {
			c.shadowAllowed.Inc()
			continue
		}
		c.shadowDenied.Inc()
		if !res[i].Allowed {
			s.log.Info("shadow policy would deny", zap.String("policy", p.policy.Name),
				zap.String("identity", p.req.ID), zap.Duration("retry_after", res[i].RetryAfter), zap.String("path", v.Path))
		}
	}
}

// plan returns the policies matching v, each with its bucket request.
func (e *Engine) plan(v *View, out []planned) []planned {
	if !v.HTTP && !e.anyTCP {
		return out
	}
	for _, p := range e.Policies {
		if !p.match.matches(v) {
			continue
		}
		id, ok := e.identity(p, v)
		if !ok {
			continue
		}
		out = append(out, planned{policy: p, req: limiter.Request{Name: p.Name, ID: id, Limit: p.Limit, Cost: p.costOf(v)}})
	}
	return out
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}
