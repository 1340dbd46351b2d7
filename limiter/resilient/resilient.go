// Package resilient keeps the limiter from becoming the outage. It wraps the
// shared store (Redis) with a deadline per decision, a circuit breaker, a
// failure mode for when the store cannot decide, and an over-limit cache
// that answers certain denials without a round trip.
//
// When the store fails (or the breaker is open) a decision goes to the
// fallback store when one is configured (per-replica in-memory buckets,
// results marked Degraded), and otherwise fails with limiter.ErrUnavailable
// so the caller applies its allow or deny mode. Either way the answer comes
// within the deadline.
//
// With Options.ProbeInterval the store is probed at start and, while
// degraded, in the background, so Exact tells the truth without traffic;
// with Options.Permanent, errors that retrying cannot cure (a wrong
// password, say) degrade at once and say what to fix (Problem).
package resilient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
)

// DefaultTimeout bounds a decision's store work when Options.Timeout is 0.
const DefaultTimeout = 50 * time.Millisecond

// Options configure a Store.
type Options struct {
	// Timeout bounds each decision's store work. A caller's deadline that
	// is sooner wins (less a margin, so the answer still arrives in time).
	Timeout time.Duration
	Breaker BreakerOptions
	// Fallback decides while the store cannot (on_failure: local); nil
	// makes those decisions fail with limiter.ErrUnavailable.
	Fallback limiter.Store
	// FallbackShare scales every limit the fallback applies, so N replicas
	// deciding alone admit about what one shared bucket would: 1/N. Each
	// capacity becomes its share rounded down (at least 1 token) and the
	// rate is scaled in the same proportion as the capacity, so a local
	// bucket refills from empty in the policy's own window. Zero means 1.
	FallbackShare limiter.Rate
	// OverLimitEntries bounds the over-limit cache; 0 disables it.
	OverLimitEntries int
	Clock            limiter.Clock
	Logger           *zap.Logger
	Registerer       prometheus.Registerer
	// OnExactChange, if set, hears when decisions switch between exact
	// (breaker closed) and degraded (open), e.g. to update health status.
	// Calls come in order, one at a time, without the breaker's lock held.
	OnExactChange func(exact bool)
	// ProbeInterval, when > 0, makes the store probe the primary once at
	// start and then, while degraded, every ProbeInterval (once the
	// breaker's OpenFor has passed), so that Exact tells the truth without
	// traffic. Close stops it.
	ProbeInterval time.Duration
	// Permanent, if set, recognises errors that retrying cannot cure (a
	// wrong password, say): kind names it for the metric, fix says what to
	// change. Such an error opens the breaker at once and is logged at
	// error level with the fix.
	Permanent func(error) (kind, fix string, ok bool)
}

// Store is the resilient limiter.Store.
type Store struct {
	primary  limiter.Store
	bounded  limiter.DeadlineStore // primary, when it takes a deadline of its own
	fallback limiter.Store
	opts     Options
	clock    limiter.Clock
	log      *zap.Logger
	breaker  *Breaker
	cache    *overLimitCache
	scaled   sync.Map // limiter.Limit → limiter.Limit for the fallback

	probeCtx  context.Context // cancelled by Close: ends the loop and a probe in flight
	stopProbe context.CancelFunc
	probeDone chan struct{}
	problem   atomic.Pointer[string] // the last permanent error's fix, while degraded

	stateGauge  prometheus.Gauge
	transitions *prometheus.CounterVec
	cacheHits   prometheus.Counter
	fallbacks   prometheus.Counter
	failures    *prometheus.CounterVec
	permanent   *prometheus.CounterVec
}

// New wraps primary.
func New(primary limiter.Store, o Options) (*Store, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Clock == nil {
		o.Clock = limiter.SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.FallbackShare.IsZero() {
		o.FallbackShare, _ = limiter.NewRate(1, 1)
	}
	if n, d := o.FallbackShare.Fraction(); n > d {
		return nil, fmt.Errorf("resilient: fallback share must be in (0, 1], got %v", o.FallbackShare)
	}
	s := &Store{primary: primary, fallback: o.Fallback, opts: o, clock: o.Clock, log: o.Logger}
	s.bounded, _ = primary.(limiter.DeadlineStore)
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	counterVec := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	s.stateGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_breaker_state", Help: "Circuit breaker on the store: 0 closed (exact), 1 half-open, 2 open (degraded).",
	})
	s.transitions = counterVec("floodgate_breaker_transitions_total", "Circuit breaker transitions, by the state entered.", "to")
	s.cacheHits = counter("floodgate_overlimit_cache_hits_total", "Denials answered by the over-limit cache without a store call.")
	s.fallbacks = counter("floodgate_fallback_decisions_total", "Decisions made by the per-replica fallback while the store was unavailable.")
	s.failures = counterVec("floodgate_store_failures_total", "Store calls that failed, by reason (timeout, error, misconfigured, breaker_open).", "reason")
	s.permanent = counterVec("floodgate_store_misconfigured_total",
		"Store errors that retrying cannot cure (wrong password, missing ACL permission, cluster mode against a standalone server...), by kind; the log says what to fix.",
		"kind")
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.stateGauge, s.transitions, s.cacheHits, s.fallbacks, s.failures, s.permanent)
	}
	s.breaker = NewBreaker(o.Breaker, s.onBreakerChange)
	if o.OverLimitEntries > 0 {
		s.cache = newOverLimitCache(o.OverLimitEntries)
	}
	if o.ProbeInterval > 0 {
		s.probeCtx, s.stopProbe = context.WithCancel(context.Background())
		s.probeDone = make(chan struct{})
		go s.probeLoop()
	}
	return s, nil
}

// onBreakerChange is the breaker's callback: it runs without the breaker's
// lock, one transition at a time, in order.
func (s *Store) onBreakerChange(from, to State) {
	s.stateGauge.Set(float64(to))
	s.transitions.WithLabelValues(to.String()).Inc()
	s.log.Warn("store circuit breaker "+to.String(), zap.String("from", from.String()), zap.String("to", to.String()))
	if to == Closed {
		s.problem.Store(nil)
		if s.cache != nil {
			// Redis may have come back empty (restarted, failed over):
			// what the cache learned before may no longer hold.
			s.cache.clear()
		}
	}
	if s.opts.OnExactChange != nil && (to == Closed || from == Closed) {
		s.opts.OnExactChange(to == Closed)
	}
}

// Close stops the background probe. Decisions keep working.
func (s *Store) Close() {
	if s.stopProbe == nil {
		return
	}
	s.stopProbe()
	<-s.probeDone
}

// Exact reports whether decisions currently come from the shared store
// (the breaker is closed) rather than the failure mode.
func (s *Store) Exact() bool { return s.breaker.State() == Closed }

// Problem is what to fix when the store last failed with an error retrying
// cannot cure, while decisions are degraded; "" otherwise.
func (s *Store) Problem() string {
	if p := s.problem.Load(); p != nil && !s.Exact() {
		return *p
	}
	return ""
}

// Breaker returns the store's circuit breaker.
func (s *Store) Breaker() *Breaker { return s.breaker }

// Take implements limiter.Store.
func (s *Store) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return s.take(ctx, reqs, res, true)
}

// Uncached returns a view of s whose Take skips the over-limit cache:
// shadow policies use it, so their would-be denials are all counted
// against the store.
func (s *Store) Uncached() limiter.Store { return uncached{s} }

type uncached struct{ s *Store }

func (u uncached) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return u.s.take(ctx, reqs, res, false)
}

func (s *Store) take(ctx context.Context, reqs []limiter.Request, res []limiter.Result, useCache bool) (bool, error) {
	if err := limiter.Validate(reqs, res); err != nil {
		return false, err
	}
	now := s.clock.Now()
	if useCache && s.cache != nil && s.cache.deny(reqs, res, now) {
		s.cacheHits.Inc()
		return false, nil
	}
	ticket, ok := s.breaker.Allow(now)
	if !ok {
		s.failures.WithLabelValues("breaker_open").Inc()
		return s.degrade(ctx, reqs, res, errBreakerOpen)
	}
	allowed, err := s.takePrimary(ctx, s.deadline(ctx), reqs, res)
	if err == nil {
		s.breaker.Success(ticket)
		if !allowed && useCache && s.cache != nil {
			s.cache.record(reqs, res, now)
		}
		return allowed, nil
	}
	if errors.Is(err, limiter.ErrDeniedDespite) {
		// The store denied; only its tidying up failed. The denial stands.
		s.failed(ticket, err)
		s.log.Warn("store denied but failed afterwards", zap.Error(err))
		return false, nil
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The caller went away: say nothing about the store's health.
		s.breaker.Release(ticket)
		return false, ctx.Err()
	}
	s.failed(ticket, err)
	return s.degrade(ctx, reqs, res, err)
}

// failed reports a failed store call to the metrics and the breaker. An
// error retrying cannot cure opens the breaker at once and is logged with
// what to fix.
func (s *Store) failed(t Ticket, err error) {
	if s.opts.Permanent != nil {
		if kind, fix, ok := s.opts.Permanent(err); ok {
			s.failures.WithLabelValues("misconfigured").Inc()
			s.permanent.WithLabelValues(kind).Inc()
			s.problem.Store(&fix)
			s.log.Error("the store refuses floodgate: "+fix, zap.String("kind", kind), zap.Error(err))
			t.probe = true // no need to wait for more failures: open now
			s.breaker.Failure(t, s.clock.Now())
			return
		}
	}
	reason := "error"
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		reason = "timeout"
	}
	s.failures.WithLabelValues(reason).Inc()
	s.breaker.Failure(t, s.clock.Now())
}

// probeRequest is the decision a probe asks for: a bucket no policy can
// name (policy names start with a letter or digit) that is full again a
// microsecond after it pays, so its key in Redis expires at once.
var probeRequest = limiter.Request{Name: "_probe", ID: "floodgate", Limit: limiter.MustLimit(1, "1000000"), Cost: 1}

// startProbeTimeout bounds the start-up probe when Timeout is shorter: the
// first decision on a fresh connection may load the script, and a store
// that is merely slow to warm up should not start degraded. Later probes
// get Timeout, as requests do: a store too slow for requests stays
// degraded.
const startProbeTimeout = time.Second

// probeLoop probes the primary once at start, then every ProbeInterval
// while decisions are degraded, until Close.
func (s *Store) probeLoop() {
	defer close(s.probeDone)
	s.probe(max(s.opts.Timeout, startProbeTimeout))
	t := time.NewTicker(s.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.probeCtx.Done():
			return
		case <-t.C:
			if !s.Exact() {
				s.probe(s.opts.Timeout)
			}
		}
	}
}

// probe makes one decision on the probe bucket, within timeout, when the
// breaker admits a probe, and reports its result to the breaker like any
// call's.
func (s *Store) probe(timeout time.Duration) {
	ticket, ok := s.breaker.Probe(s.clock.Now())
	if !ok {
		return
	}
	ctx := s.probeCtx
	var res [1]limiter.Result
	_, err := s.takePrimary(ctx, time.Now().Add(timeout), []limiter.Request{probeRequest}, res[:])
	switch {
	case err == nil:
		s.breaker.Success(ticket)
	case ctx.Err() == context.Canceled:
		s.breaker.Release(ticket)
	default:
		s.log.Debug("store probe failed", zap.Error(err))
		s.failed(ticket, err)
	}
}

var errBreakerOpen = errors.New("circuit breaker open")

// degrade answers without the store: the fallback's decision, marked, or
// ErrUnavailable for the caller's failure mode.
func (s *Store) degrade(ctx context.Context, reqs []limiter.Request, res []limiter.Result, cause error) (bool, error) {
	if s.fallback == nil {
		return false, fmt.Errorf("%w: %w", limiter.ErrUnavailable, cause)
	}
	var buf [8]limiter.Request
	local := append(buf[:0], reqs...)
	for i := range local {
		orig := local[i].Limit
		local[i].Limit = s.scale(orig)
		if local[i].Cost <= orig.Capacity {
			// A cost the shared bucket could pay stays payable in the
			// smaller local one.
			local[i].Cost = min(local[i].Cost, local[i].Limit.Capacity)
		}
	}
	allowed, err := s.fallback.Take(ctx, local, res)
	if err != nil {
		return false, fmt.Errorf("%w: %w (fallback: %v)", limiter.ErrUnavailable, cause, err)
	}
	s.fallbacks.Inc()
	for i := range res {
		res[i].Degraded = true
	}
	return allowed, nil
}

// scale returns l as the fallback applies it: the capacity's share,
// rounded down but at least 1, and the rate in the same proportion as the
// capacity, so the window (the time to refill from empty) stays l's and a
// RateLimit-Policy header can describe the local bucket truthfully. A
// limit whose scaled numbers would overflow stays as it is.
func (s *Store) scale(l limiter.Limit) limiter.Limit {
	sn, sd := s.opts.FallbackShare.Fraction()
	if sn == sd {
		return l
	}
	if v, ok := s.scaled.Load(l); ok {
		return v.(limiter.Limit)
	}
	out := l
	if l.Capacity <= math.MaxInt64/sn {
		capacity := max(1, l.Capacity*sn/sd)
		num, den := l.Rate.Fraction()
		if num <= math.MaxInt64/capacity && den <= math.MaxInt64/l.Capacity {
			if r, err := limiter.NewRate(num*capacity, den*l.Capacity); err == nil {
				if sl, err := limiter.NewLimit(capacity, r); err == nil {
					out = sl
				}
			}
		}
	}
	s.scaled.Store(l, out)
	return out
}

// takePrimary asks the primary store, bounded by the deadline d.
func (s *Store) takePrimary(ctx context.Context, d time.Time, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	if s.bounded != nil {
		return s.bounded.TakeBy(ctx, d, reqs, res)
	}
	dctx, cancel := context.WithDeadline(ctx, d)
	defer cancel()
	return s.primary.Take(dctx, reqs, res)
}

// deadline is when a decision must end: the store timeout from now, or the
// caller's deadline less a margin (a tenth of what is left, at least a millisecond) so the
// failure-mode answer still reaches the caller in time. It reads the real
// clock: deadlines govern real I/O.
func (s *Store) deadline(ctx context.Context) time.Time {
	now := time.Now()
	d := now.Add(s.opts.Timeout)
	if cd, ok := ctx.Deadline(); ok {
		left := cd.Sub(now)
		if c := cd.Add(-max(left/10, time.Millisecond)); c.Before(d) {
			d = c
		}
	}
	return d
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
