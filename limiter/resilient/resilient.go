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
package resilient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
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
	// FallbackShare scales every limit the fallback applies (capacity and
	// rate), so N replicas deciding alone admit about what one shared
	// bucket would: 1/N. 0 means 1.
	FallbackShare float64
	// OverLimitEntries bounds the over-limit cache; 0 disables it.
	OverLimitEntries int
	Clock            limiter.Clock
	Logger           *zap.Logger
	Registerer       prometheus.Registerer
	// OnExactChange, if set, hears when decisions switch between exact
	// (breaker closed) and degraded (open), e.g. to update health status.
	OnExactChange func(exact bool)
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
	share    limiter.Rate

	stateGauge  prometheus.Gauge
	transitions *prometheus.CounterVec
	cacheHits   prometheus.Counter
	fallbacks   prometheus.Counter
	failures    *prometheus.CounterVec
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
	if o.FallbackShare == 0 {
		o.FallbackShare = 1
	}
	if math.IsNaN(o.FallbackShare) || o.FallbackShare <= 0 || o.FallbackShare > 1 {
		return nil, fmt.Errorf("resilient: fallback share must be in (0, 1], got %v", o.FallbackShare)
	}
	share, err := limiter.RateFromFloat(o.FallbackShare)
	if err != nil {
		return nil, fmt.Errorf("resilient: fallback share: %w", err)
	}
	s := &Store{primary: primary, fallback: o.Fallback, opts: o, clock: o.Clock, log: o.Logger, share: share}
	s.bounded, _ = primary.(limiter.DeadlineStore)
	s.stateGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_breaker_state", Help: "Circuit breaker on the store: 0 closed (exact), 1 half-open, 2 open (degraded).",
	})
	s.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_breaker_transitions_total", Help: "Circuit breaker transitions, by the state entered.",
	}, []string{"to"})
	s.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_overlimit_cache_hits_total", Help: "Denials answered by the over-limit cache without a store call.",
	})
	s.fallbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "floodgate_fallback_decisions_total", Help: "Decisions made by the per-replica fallback while the store was unavailable.",
	})
	s.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_store_failures_total", Help: "Store calls that failed, by reason (timeout, error, breaker_open).",
	}, []string{"reason"})
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.stateGauge, s.transitions, s.cacheHits, s.fallbacks, s.failures)
	}
	s.breaker = NewBreaker(o.Breaker, func(from, to State) {
		s.stateGauge.Set(float64(to))
		s.transitions.WithLabelValues(to.String()).Inc()
		s.log.Warn("store circuit breaker "+to.String(), zap.String("from", from.String()), zap.String("to", to.String()))
		if to == Closed && s.cache != nil {
			// Redis may have come back empty (restarted, failed over):
			// what the cache learned before may no longer hold.
			s.cache.clear()
		}
		if o.OnExactChange != nil && (to == Closed || from == Closed) {
			o.OnExactChange(to == Closed)
		}
	})
	if o.OverLimitEntries > 0 {
		s.cache = newOverLimitCache(o.OverLimitEntries)
	}
	return s, nil
}

// Exact reports whether decisions currently come from the shared store
// (the breaker is closed) rather than the failure mode.
func (s *Store) Exact() bool { return s.breaker.State() == Closed }

// Breaker returns the store's circuit breaker.
func (s *Store) Breaker() *Breaker { return s.breaker }

// Take implements limiter.Store.
func (s *Store) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return s.take(ctx, reqs, res, true)
}

// TakeUncached is Take without the over-limit cache: shadow policies use it,
// so their would-be denials are all counted against the store.
func (s *Store) TakeUncached(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return s.take(ctx, reqs, res, false)
}

// Uncached returns a view of s whose Take skips the over-limit cache.
func (s *Store) Uncached() limiter.Store { return uncached{s} }

type uncached struct{ s *Store }

func (u uncached) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return u.s.take(ctx, reqs, res, false)
}

func (s *Store) take(ctx context.Context, reqs []limiter.Request, res []limiter.Result, useCache bool) (bool, error) {
	if err := limiter.Check(reqs, res); err != nil {
		return false, err
	}
	now := s.clock.Now()
	if useCache && s.cache != nil && s.cache.deny(reqs, res, now) {
		s.cacheHits.Inc()
		return false, nil
	}
	if !s.breaker.Allow(now) {
		s.failures.WithLabelValues("breaker_open").Inc()
		return s.degrade(ctx, reqs, res, errBreakerOpen)
	}
	allowed, err := s.takePrimary(ctx, reqs, res)
	if err == nil {
		s.breaker.Success()
		if !allowed && useCache && s.cache != nil {
			s.cache.record(reqs, res, now)
		}
		return allowed, nil
	}
	if errors.Is(err, limiter.ErrDeniedDespite) {
		// The store denied; only its tidying up failed. The denial stands.
		s.failures.WithLabelValues("error").Inc()
		s.breaker.Failure(s.clock.Now())
		s.log.Warn("store denied but failed afterwards", zap.Error(err))
		return false, nil
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The caller went away: say nothing about the store's health.
		s.breaker.Release()
		return false, ctx.Err()
	}
	reason := "error"
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		reason = "timeout"
	}
	s.failures.WithLabelValues(reason).Inc()
	s.breaker.Failure(s.clock.Now())
	return s.degrade(ctx, reqs, res, err)
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

// scale returns l with capacity and rate multiplied by the fallback share.
func (s *Store) scale(l limiter.Limit) limiter.Limit {
	if s.opts.FallbackShare == 1 {
		return l
	}
	if v, ok := s.scaled.Load(l); ok {
		return v.(limiter.Limit)
	}
	sn, sd := s.share.Fraction()
	num, den := l.Rate.Fraction()
	out := l
	capacity := max(1, int64(float64(l.Capacity)*s.opts.FallbackShare))
	if num <= math.MaxInt64/sn && den <= math.MaxInt64/sd {
		if r, err := limiter.NewRate(num*sn, den*sd); err == nil {
			if sl, err := limiter.NewLimit(capacity, r); err == nil {
				out = sl
			}
		}
	}
	s.scaled.Store(l, out)
	return out
}

// takePrimary asks the primary store, bounded by deadline.
func (s *Store) takePrimary(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	d := s.deadline(ctx)
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
