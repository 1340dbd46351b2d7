package extauthz

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/internal/limited"
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
	// Limited, when set, hears every policy's decision, for the report of
	// who is being limited (record.go).
	Limited *limited.Recorder
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
	tallies  tallies // record.go
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
	st := &serverState{engine: e, counters: make(map[*Policy]policyCounters, len(e.Policies)), tallies: newTallies(s.opts.Limited, e)}
	for _, p := range e.Policies {
		st.counters[p] = s.metrics.forPolicy(p.Name)
	}
	s.state.Store(st)
}

// Engine returns the engine in use.
func (s *Server) Engine() *Engine { return s.state.Load().engine }

// Metrics returns the server's collectors.
func (s *Server) Metrics() *Metrics { return s.metrics }

// batch is one decision being built: the policies taking part, their
// bucket requests and, once decided, their results. The store and the
// response read it as it is.
type batch struct {
	policies []*Policy
	reqs     []limiter.Request
	results  []limiter.Result
}

// add appends one matched policy and its request.
func (b *batch) add(p *Policy, r limiter.Request) {
	b.policies = append(b.policies, p)
	b.reqs = append(b.reqs, r)
}

// sized makes room for the results, in the inline array when it fits.
func (b *batch) sized() {
	if n := len(b.reqs); cap(b.results) >= n {
		b.results = b.results[:n]
	} else {
		b.results = make([]limiter.Result, n)
	}
}

// scratch is one Check's working memory, pooled so that a decision over up
// to maxInline enforced and maxInline shadow policies allocates none of it:
// the request view and two batches, enforced and shadow, whose slices start
// on the inline arrays. Nothing in it outlives the Check: stores copy what
// they keep (strings are shared, never the slices) and the response is
// rendered from copies.
type scratch struct {
	view             View
	enforced, shadow batch

	enforcedPolicies, shadowPolicies [maxInline]*Policy
	enforcedReqs, shadowReqs         [maxInline]limiter.Request
	enforcedResults, shadowResults   [maxInline]limiter.Result

	// The shadow decision, when it runs beside the enforced one: run is
	// decideShadow bound once per scratch, so starting it allocates
	// nothing; done says it finished.
	run  func()
	done sync.WaitGroup
	ctx  context.Context
	srv  *Server
	st   *serverState

	// The caller's label for the recorder, one per goroutine, and the
	// Check's start, the time it records (record.go).
	name, shadowName callerName
	start            time.Time
}

// maxInline is how many matching policies of each kind a Check handles in
// pooled memory.
const maxInline = 8

var scratchPool = sync.Pool{New: func() any {
	sc := new(scratch)
	sc.run = func() {
		defer sc.done.Done()
		defer func() {
			if p := recover(); p != nil { // as Check's own recover: a bug must not become an outage
				sc.srv.log.Error("shadow decision panicked", zap.Any("panic", p), zap.Stack("stack"))
			}
		}()
		sc.decideShadow()
	}
	sc.reset()
	return sc
}}

// reset drops every reference the scratch holds, so a pooled one keeps no
// request alive, and points the batches at the inline arrays again.
func (sc *scratch) reset() {
	sc.view = View{}
	for _, b := range []*batch{&sc.enforced, &sc.shadow} {
		clear(b.policies)
		clear(b.reqs)
		clear(b.results)
	}
	sc.enforced = batch{sc.enforcedPolicies[:0], sc.enforcedReqs[:0], sc.enforcedResults[:0]}
	sc.shadow = batch{sc.shadowPolicies[:0], sc.shadowReqs[:0], sc.shadowResults[:0]}
	sc.ctx, sc.srv, sc.st, sc.start = nil, nil, nil, time.Time{}
}

// Check decides one request. See the package comment for the contract.
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
		sc.done.Wait() // the shadow decision reads the scratch
		sc.reset()
		scratchPool.Put(sc)
		s.metrics.Latency.Observe(time.Since(start).Seconds())
	}()
	v := &sc.view
	v.Reset(req)
	st.engine.plan(v, &sc.enforced, &sc.shadow)
	s.noteMissing(st, &sc.enforced, v)
	s.noteMissing(st, &sc.shadow, v)

	// Enforced policies decide together; shadow policies decide on their
	// own and never deny. Both wait on the store at the same time, so a
	// Check waits at most one store timeout whatever its policies.
	enforced := &sc.enforced
	if len(sc.shadow.reqs) > 0 {
		sc.ctx, sc.srv, sc.st, sc.start = ctx, s, st, start
		if len(enforced.reqs) == 0 {
			sc.decideShadow()
			s.metrics.outcomes.allowed.Inc()
			return plainOK(), nil
		}
		sc.done.Add(1)
		go sc.run()
	}
	if len(enforced.reqs) == 0 {
		s.metrics.outcomes.unmatched.Inc()
		return plainOK(), nil
	}
	enforced.sized()
	allowed, err := s.store.Take(ctx, enforced.reqs, enforced.results)
	if err != nil {
		s.metrics.StoreErrors.Inc()
		s.log.Warn("store could not decide; failure mode answers", zap.Error(err), zap.String("path", v.Path))
		return s.failed(st.engine, &outcome{grpc: v.GRPC}), nil
	}
	o := outcome{policies: enforced.policies, results: enforced.results, allowed: allowed, grpc: v.GRPC}
	st.tallies.record(start, st.engine, enforced, allowed, v, &sc.name)
	for i, p := range o.policies {
		o.degraded = o.degraded || o.results[i].Degraded
		c := st.counters[p]
		if allowed {
			c.allowed.Inc()
		} else if !o.results[i].Allowed {
			c.denied.Inc()
		}
	}
	oc := &s.metrics.outcomes
	switch {
	case !v.HTTP && allowed:
		oc.allowed.Inc()
		return plainOK(), nil
	case !v.HTTP:
		oc.denied.Inc()
		return tcpDeny(), nil
	case allowed:
		pickCounter(o.degraded, oc.degradedAllowed, oc.allowed).Inc()
		return st.engine.okResponse(&o), nil
	}
	pickCounter(o.degraded, oc.degradedDenied, oc.denied).Inc()
	retryAfter := limiter.RetryAfter(o.results)
	if d := denying(&o); d >= 0 && s.log.Core().Enabled(zap.DebugLevel) {
		s.log.Debug("denied", zap.String("policy", o.policies[d].Name), zap.String("identity", enforced.reqs[d].ID),
			zap.Duration("retry_after", retryAfter), zap.String("path", v.Path))
	}
	return st.engine.denyResponse(&o, retryAfter), nil
}

// Unread answers, by the failure mode, a Check whose request was not read
// (the server had no memory to spare for it in time): as when the store
// cannot decide, allowed marked degraded, or denied with ErrorRetryAfter.
func (s *Server) Unread() *authv3.CheckResponse {
	return s.failed(s.state.Load().engine, nil)
}

// failed answers by the failure mode when the store could not decide.
func (s *Server) failed(e *Engine, o *outcome) *authv3.CheckResponse {
	if o == nil {
		o = &outcome{}
	}
	o.policies, o.results, o.degraded = nil, nil, true
	if s.opts.OnError == FailClosed {
		s.metrics.outcomes.degradedDenied.Inc()
		return e.denyResponse(o, s.opts.ErrorRetryAfter)
	}
	s.metrics.outcomes.degradedAllowed.Inc()
	return e.okResponse(o)
}

// decideShadow decides the shadow batch and records what its policies
// would have done. It runs on the Check's goroutine, or beside it as run.
func (sc *scratch) decideShadow() {
	s, st, b := sc.srv, sc.st, &sc.shadow
	b.sized()
	allowed, err := s.opts.ShadowStore.Take(sc.ctx, b.reqs, b.results)
	if err != nil {
		s.metrics.StoreErrors.Inc()
		return
	}
	st.tallies.record(sc.start, st.engine, b, allowed, &sc.view, &sc.shadowName)
	for i, p := range b.policies {
		c := st.counters[p]
		if allowed {
			c.shadowAllowed.Inc()
			continue
		}
		c.shadowDenied.Inc()
		if res := &b.results[i]; !res.Allowed {
			s.log.Info("shadow policy would deny", zap.String("policy", p.Name),
				zap.String("identity", b.reqs[i].ID), zap.Duration("retry_after", res.RetryAfter), zap.String("path", sc.view.Path))
		}
	}
}

// plan appends every policy matching v, with its bucket request, to the
// enforced or the shadow batch.
func (e *Engine) plan(v *View, enforced, shadow *batch) {
	if !v.HTTP && !e.anyTCP {
		return
	}
	for _, p := range e.Policies {
		r, ok := e.request(p, v)
		if !ok {
			continue
		}
		b := enforced
		if p.Shadow {
			b = shadow
		}
		b.add(p, r)
	}
}

// request is p's bucket request for v: false when p does not match v or
// finds no key for it.
func (e *Engine) request(p *Policy, v *View) (limiter.Request, bool) {
	if !p.match.matches(v) {
		return limiter.Request{}, false
	}
	id, ok := e.identity(p, v)
	if !ok {
		return limiter.Request{}, false
	}
	return limiter.Request{Name: p.Name, ID: id, Limit: p.Limit, Cost: p.costOf(v)}, true
}

func pickCounter(cond bool, yes, no prometheus.Counter) prometheus.Counter {
	if cond {
		return yes
	}
	return no
}
