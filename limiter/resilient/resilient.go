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
//
// A primary whose buckets live on servers that fail independently (the
// masters of a Redis Cluster) says so by implementing Sharded: each server
// then has a breaker of its own, and one master down sends to the failure
// mode only the decisions whose buckets live on it.
package resilient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
)

// Options configure a Store. The numbers are taken as given (New refuses
// those out of range); Floodgate's configuration holds the values it runs
// with (internal/config).
type Options struct {
	// Timeout bounds each decision's store work; it must be positive. A
	// caller's deadline that is sooner wins (less a margin, so the answer
	// still arrives in time).
	Timeout time.Duration
	// Breaker tunes every circuit breaker the Store keeps.
	Breaker BreakerOptions
	// Fallback decides while the store cannot (on_failure: local); nil
	// makes those decisions fail with limiter.ErrUnavailable.
	Fallback limiter.Store
	// FallbackShare scales every limit the fallback applies, so N replicas
	// deciding alone admit about what one shared bucket would: 1/N. Each
	// capacity becomes its share rounded down (at least 1 token) and the
	// rate is scaled in the same proportion as the capacity, so a local
	// bucket refills from empty in the policy's own window. With a
	// Fallback it must be in (0, 1] (1: the whole limit); without one it is
	// not used, and may be left zero.
	FallbackShare Share
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

// Sharded is a primary store whose buckets live on servers that fail
// independently, such as the masters of a Redis Cluster
// (redisstore.Store). Shards appends to dst a name for each server holding
// a bucket of reqs, each once, and returns it; it must not wait for the
// network. The Store keeps a circuit breaker per name: a decision goes to
// the failure mode when the breaker of any server it needs is open, and a
// failure counts against the servers it happened on (an error whose chain
// holds one with a Shard() string method names its server; otherwise every
// server of the decision is blamed). A decision for which Shards names no
// server (outside a Cluster, or before the slot map is known) answers to
// the store-wide breaker, Breaker. Sharded reports whether the store is
// sharded at all (a Redis store is only on a Cluster); when it is not,
// Shards is never called.
type Sharded interface {
	Sharded() bool
	Shards(ctx context.Context, reqs []limiter.Request, dst []string) []string
}

// Store is the resilient limiter.Store.
type Store struct {
	primary  limiter.Store
	bounded  limiter.DeadlineStore // primary, when it takes a deadline of its own
	fallback limiter.Store
	opts     Options
	clock    limiter.Clock
	log      *zap.Logger
	breaker  *Breaker      // store-wide: decisions no shard claims
	wide     *shardBreaker // breaker, as the shard ""
	sharded  Sharded       // primary, when its buckets live on several servers
	shards   sync.Map      // shard name → *shardBreaker
	// exactMu serialises the bookkeeping of breaker transitions across
	// breakers, and so the calls of OnExactChange; degraded counts the
	// breakers not closed.
	exactMu  sync.Mutex
	degraded int
	cache    *overLimitCache
	scaled   sync.Map // limiter.Limit → limiter.Limit for the fallback

	probeCtx  context.Context // cancelled by Close: ends the loop and a probe in flight
	stopProbe context.CancelFunc
	probeDone chan struct{}
	problem   atomic.Pointer[string] // the last permanent error's fix, while degraded

	stateGauge  prometheus.Gauge
	shardGauge  *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	cacheHits   prometheus.Counter
	fallbacks   prometheus.Counter
	failures    *prometheus.CounterVec
	permanent   *prometheus.CounterVec
}

// New wraps primary. It refuses a Timeout that is not positive, breaker
// options NewBreaker refuses, and a Fallback without a FallbackShare (the
// zero Share is for a store without a Fallback).
func New(primary limiter.Store, o Options) (*Store, error) {
	if o.Timeout <= 0 {
		return nil, fmt.Errorf("resilient: Options.Timeout must be positive: it bounds each decision's store work (got %v)", o.Timeout)
	}
	if err := o.Breaker.check(); err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = limiter.SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Fallback != nil && o.FallbackShare.IsZero() {
		return nil, fmt.Errorf("resilient: a fallback needs its share of every limit, a fraction in (0, 1] (Whole: the fallback applies whole limits)")
	}
	s := &Store{primary: primary, fallback: o.Fallback, opts: o, clock: o.Clock, log: o.Logger}
	s.bounded, _ = primary.(limiter.DeadlineStore)
	if sh, ok := primary.(Sharded); ok && sh.Sharded() {
		s.sharded = sh
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	counterVec := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	s.stateGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_breaker_state", Help: "Circuit breaker on the store: 0 closed (exact), 1 half-open, 2 open (degraded); on a Redis Cluster, the most open of the masters' breakers.",
	})
	s.shardGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "floodgate_breaker_shard_state", Help: "Circuit breaker on one Redis Cluster master, by address: 0 closed (exact), 1 half-open, 2 open (decisions on its keys degraded).",
	}, []string{"shard"})
	s.transitions = counterVec("floodgate_breaker_transitions_total", "Circuit breaker transitions, by the state entered.", "to")
	s.cacheHits = counter("floodgate_overlimit_cache_hits_total", "Denials answered by the over-limit cache without a store call.")
	s.fallbacks = counter("floodgate_fallback_decisions_total", "Decisions made by the per-replica fallback while the store was unavailable.")
	s.failures = counterVec("floodgate_store_failures_total", "Store calls that failed, by reason (timeout, error, misconfigured, breaker_open).", "reason")
	s.permanent = counterVec("floodgate_store_misconfigured_total",
		"Store errors that retrying cannot cure (wrong password, missing ACL permission, cluster mode against a standalone server...), by kind; the log says what to fix.",
		"kind")
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.stateGauge, s.shardGauge, s.transitions, s.cacheHits, s.fallbacks, s.failures, s.permanent)
	}
	s.wide = &shardBreaker{b: NewBreaker(o.Breaker, func(from, to State) { s.onBreakerChange(nil, from, to) })}
	s.breaker = s.wide.b
	if o.OverLimitEntries > 0 {
		s.cache = newOverLimitCache(o.OverLimitEntries, o.Timeout)
	}
	if o.ProbeInterval > 0 {
		s.probeCtx, s.stopProbe = context.WithCancel(context.Background())
		s.probeDone = make(chan struct{})
		go s.probeLoop()
	}
	return s, nil
}

// shardBreaker is one shard's breaker. gone (under exactMu) marks one
// forgotten (its server left the topology): its late transitions count no
// more. failedAt is when its last failure was counted (Unix nanoseconds
// by the Store's clock); see failed.
type shardBreaker struct {
	name     string
	b        *Breaker
	gone     bool
	failedAt atomic.Int64
}

// breakerFor returns the breaker of shard, made closed on first use.
func (s *Store) breakerFor(shard string) *shardBreaker {
	if v, ok := s.shards.Load(shard); ok {
		return v.(*shardBreaker)
	}
	sb := &shardBreaker{name: shard}
	sb.b = NewBreaker(s.opts.Breaker, func(from, to State) { s.onBreakerChange(sb, from, to) })
	if v, loaded := s.shards.LoadOrStore(shard, sb); loaded {
		return v.(*shardBreaker)
	}
	return sb
}

// onBreakerChange is every breaker's callback (sb nil for the store-wide
// one): it runs without the breaker's lock, one transition of that breaker
// at a time, in order. Decisions are exact while every breaker is closed;
// OnExactChange hears when that starts and stops being so.
func (s *Store) onBreakerChange(sb *shardBreaker, from, to State) {
	s.exactMu.Lock()
	defer s.exactMu.Unlock()
	if sb != nil && sb.gone {
		return
	}
	s.transitions.WithLabelValues(to.String()).Inc()
	fields := []zap.Field{zap.String("from", from.String()), zap.String("to", to.String())}
	if sb != nil {
		s.shardGauge.WithLabelValues(sb.name).Set(float64(to))
		fields = append(fields, zap.String("shard", sb.name))
	}
	s.log.Warn("store circuit breaker "+to.String(), fields...)
	if to == Closed && s.cache != nil {
		// Redis may have come back empty (restarted, failed over):
		// what the cache learned before may no longer hold.
		s.cache.clear()
	}
	switch {
	case from == Closed && to != Closed:
		s.degraded++
		s.exactChanged(s.degraded == 1, false)
	case from != Closed && to == Closed:
		s.degraded--
		s.exactChanged(s.degraded == 0, true)
	}
	s.stateGauge.Set(float64(s.worstState()))
}

// exactChanged, under exactMu, tells OnExactChange that decisions turned
// exact (or degraded) when changed is true.
func (s *Store) exactChanged(changed, exact bool) {
	if !changed {
		return
	}
	if exact {
		s.problem.Store(nil)
	}
	if s.opts.OnExactChange != nil {
		s.opts.OnExactChange(exact)
	}
}

// worstState is the most open state among the breakers.
func (s *Store) worstState() State {
	worst := s.breaker.State()
	s.shards.Range(func(_, v any) bool {
		worst = max(worst, v.(*shardBreaker).b.State())
		return true
	})
	return worst
}

// forget drops the breaker of a shard that has left the topology (a
// master replaced by its promoted replica, say): no decision answers to it
// any more, so it must not keep decisions reported as degraded.
func (s *Store) forget(sb *shardBreaker) {
	s.exactMu.Lock()
	defer s.exactMu.Unlock()
	if sb.gone {
		return
	}
	sb.gone = true
	s.shards.Delete(sb.name)
	s.shardGauge.DeleteLabelValues(sb.name)
	if sb.b.State() != Closed {
		s.degraded--
		s.exactChanged(s.degraded == 0, true)
	}
	s.stateGauge.Set(float64(s.worstState()))
	s.log.Info("store shard left the topology: its breaker is dropped", zap.String("shard", sb.name))
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
// (every breaker is closed) rather than the failure mode. On a Redis
// Cluster with one master down it is false, although the decisions on the
// other masters' keys are exact.
func (s *Store) Exact() bool { return s.worstState() == Closed }

// ShardStates returns the state of each shard's breaker, by shard name (a
// Redis Cluster master's address); empty outside a Cluster.
func (s *Store) ShardStates() map[string]State {
	m := map[string]State{}
	s.shards.Range(func(k, v any) bool {
		m[k.(string)] = v.(*shardBreaker).b.State()
		return true
	})
	return m
}

// Problem is what to fix when the store last failed with an error retrying
// cannot cure, while decisions are degraded; "" otherwise.
func (s *Store) Problem() string {
	if p := s.problem.Load(); p != nil && !s.Exact() {
		return *p
	}
	return ""
}

// Breaker returns the store-wide circuit breaker: the one of decisions no
// shard claims (every decision, outside a Redis Cluster).
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
	var buf [4]pass
	passes, ok := s.admit(ctx, reqs, now, buf[:0])
	if !ok {
		s.failures.WithLabelValues("breaker_open").Inc()
		return s.degrade(ctx, reqs, res, errBreakerOpen)
	}
	allowed, err := s.takePrimary(ctx, s.deadline(ctx), reqs, res)
	if err == nil {
		for _, p := range passes {
			p.sb.b.Success(p.t)
		}
		if s.cache != nil && needsLearning(reqs, allowed, useCache) {
			s.cache.learn(reqs, res, now, allowed, useCache)
		}
		return allowed, nil
	}
	if errors.Is(err, limiter.ErrDeniedDespite) {
		// The store denied; only its tidying up failed. The denial stands.
		s.failed(passes, now, err)
		s.log.Warn("store denied but failed afterwards", zap.Error(err))
		return false, nil
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The caller went away: say nothing about the store's health.
		for _, p := range passes {
			p.sb.b.Release(p.t)
		}
		return false, ctx.Err()
	}
	s.failed(passes, now, err)
	return s.degrade(ctx, reqs, res, err)
}

// pass is a breaker's leave for one decision to call the store: the
// shard's breaker (the store-wide one for shard "") and the ticket to
// report the result with.
type pass struct {
	sb *shardBreaker
	t  Ticket
}

// admit asks the breakers of every shard holding a bucket of reqs (or the
// store-wide one, when no shard claims them) for leave to call the store,
// appending their passes to dst. When any refuses, the passes granted are
// released and ok is false: the decision is all-or-nothing, so it cannot
// be exact on some of its buckets alone.
func (s *Store) admit(ctx context.Context, reqs []limiter.Request, now time.Time, dst []pass) ([]pass, bool) {
	if s.sharded != nil {
		var nbuf [4]string
		for _, shard := range s.sharded.Shards(ctx, reqs, nbuf[:0]) {
			sb := s.breakerFor(shard)
			t, ok := sb.b.Allow(now)
			if !ok {
				for _, p := range dst {
					p.sb.b.Release(p.t)
				}
				return dst, false
			}
			dst = append(dst, pass{sb, t})
		}
		if len(dst) > 0 {
			return dst, true
		}
	}
	t, ok := s.breaker.Allow(now)
	return append(dst, pass{s.wide, t}), ok
}

// failed reports a failed store call, started at started, to the metrics
// and the breakers it is to blame on: of a decision over several shards,
// those the error names (the others' calls went through, or were not made),
// or all of them when it names none. An error retrying cannot cure opens
// those breakers at once and is logged with what to fix.
//
// A breaker counts one failure per wave: a call that started before the
// breaker last counted a failure was in flight with that call, and most
// likely shares its fate (one stall of the store, or of this process, times
// out every decision waiting on it at once, and with pipelining they even
// share one round trip), so its failure is not counted again. Failures
// therefore open the breaker only when they persist over that many rounds
// (with a store that hangs, about Failures × Timeout), not when one hiccup
// fails every decision in flight together.
func (s *Store) failed(passes []pass, started time.Time, err error) {
	blamed := passes
	if len(passes) > 1 {
		if named := shardsNamed(err, nil); len(named) > 0 {
			blamed = make([]pass, 0, len(passes))
			for _, p := range passes {
				if slices.Contains(named, p.sb.name) {
					blamed = append(blamed, p)
				} else {
					p.sb.b.Release(p.t)
				}
			}
		}
	}
	now := s.clock.Now()
	if s.opts.Permanent != nil {
		if kind, fix, ok := s.opts.Permanent(err); ok {
			s.failures.WithLabelValues("misconfigured").Inc()
			s.permanent.WithLabelValues(kind).Inc()
			s.problem.Store(&fix)
			s.log.Error("the store refuses floodgate: "+fix, zap.String("kind", kind), zap.Error(err))
			for _, p := range blamed {
				p.t.probe = true // no need to wait for more failures: open now
				p.sb.b.Failure(p.t, now)
				p.sb.failedAt.Store(now.UnixNano())
			}
			return
		}
	}
	reason := "error"
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		reason = "timeout"
	}
	s.failures.WithLabelValues(reason).Inc()
	for _, p := range blamed {
		if started.UnixNano() < p.sb.failedAt.Load() {
			p.sb.b.Release(p.t) // in the wave of a failure already counted
			continue
		}
		p.sb.failedAt.Store(now.UnixNano())
		p.sb.b.Failure(p.t, now)
	}
}

// shardsNamed appends to dst the shards that errors in err's chain (and
// joins) name with a Shard() string method.
func shardsNamed(err error, dst []string) []string {
	switch e := err.(type) {
	case nil:
		return dst
	case interface{ Shard() string }:
		return append(dst, e.Shard())
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			dst = shardsNamed(x, dst)
		}
		return dst
	}
	return shardsNamed(errors.Unwrap(err), dst)
}

// probeRequest is the decision a probe asks for: a bucket no policy can
// name (policy names start with a letter or digit) that is full again a
// microsecond after it pays, so its key in Redis expires at once. Probes of
// a Cluster master use identities "floodgate-N" until one lands on it.
var probeRequest = limiter.Request{Name: "_probe", ID: "floodgate", Limit: limiter.MustLimit(1, "1000000"), Cost: 1}

// startProbeTimeout bounds the start-up probe when Timeout is shorter: the
// first decision on a fresh connection may load the script, and a store
// that is merely slow to warm up should not start degraded. Later probes
// get Timeout, as requests do: a store too slow for requests stays
// degraded.
const startProbeTimeout = time.Second

// probeLoop probes the primary once at start, then every ProbeInterval
// each breaker that is not closed, until Close.
func (s *Store) probeLoop() {
	defer close(s.probeDone)
	first := []limiter.Request{probeRequest}
	if shards := s.shardsOf(first); len(shards) == 1 {
		s.probe(s.breakerFor(shards[0]), probeRequest, max(s.opts.Timeout, startProbeTimeout), nil)
	} else {
		s.probe(s.wide, probeRequest, max(s.opts.Timeout, startProbeTimeout), nil)
	}
	t := time.NewTicker(s.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-s.probeCtx.Done():
			return
		case <-t.C:
			if s.breaker.State() != Closed {
				s.probe(s.wide, probeRequest, s.opts.Timeout, nil)
			}
			s.shards.Range(func(_, v any) bool {
				if sb := v.(*shardBreaker); sb.b.State() != Closed {
					s.probeShard(sb)
				}
				return true
			})
		}
	}
}

// shardsOf is the shards holding reqs' buckets: none outside a Cluster.
func (s *Store) shardsOf(reqs []limiter.Request) []string {
	if s.sharded == nil {
		return nil
	}
	return s.sharded.Shards(s.probeCtx, reqs, nil)
}

// probeIDs bounds the probe identities tried to find one whose bucket a
// shard holds: with m masters, each is missed by all of them with
// probability (1 − 1/m)^probeIDs (3·10⁻⁵ for 100 masters).
const probeIDs = 1024

// probeShard probes the shard of sb with a probe bucket it holds. A shard
// that holds none of probeIDs of them is no longer in the topology (its
// slots moved to another master: a failover): its breaker is dropped.
func (s *Store) probeShard(sb *shardBreaker) {
	req := probeRequest
	for i := 0; i < probeIDs; i++ {
		if i > 0 {
			req.ID = probeRequest.ID + "-" + strconv.Itoa(i)
		}
		if s.holds(sb, req) {
			// The probe counts for sb only if sb still held its bucket
			// once answered: slots that moved meanwhile (a failover) were
			// answered by another master, and sb is then dropped at the
			// next probe, not closed, for good, in its place.
			s.probe(sb, req, s.opts.Timeout, func() bool { return s.holds(sb, req) })
			return
		}
	}
	s.forget(sb)
}

// holds reports whether sb's shard holds req's bucket alone.
func (s *Store) holds(sb *shardBreaker, req limiter.Request) bool {
	shards := s.shardsOf([]limiter.Request{req})
	return len(shards) == 1 && shards[0] == sb.name
}

// probe makes one decision on a probe bucket, req, within timeout, when
// sb's breaker admits a probe, and reports its result to it like any
// call's; a success only when still (nil: always) says so, else the probe
// is let go as if never sent.
func (s *Store) probe(sb *shardBreaker, req limiter.Request, timeout time.Duration, still func() bool) {
	b := sb.b
	started := s.clock.Now()
	ticket, ok := b.Probe(started)
	if !ok {
		return
	}
	ctx := s.probeCtx
	var res [1]limiter.Result
	_, err := s.takePrimary(ctx, time.Now().Add(timeout), []limiter.Request{req}, res[:])
	switch {
	case err == nil && still != nil && !still():
		b.Release(ticket)
	case err == nil:
		b.Success(ticket)
	case ctx.Err() == context.Canceled:
		b.Release(ticket)
	default:
		s.log.Debug("store probe failed", zap.String("shard", sb.name), zap.Error(err))
		s.failed([]pass{{sb, ticket}}, started, err)
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
		if q := local[i].Quota; q != nil {
			// A quota's share, as a bucket's capacity: this replica's
			// window counts its own requests only.
			local[i].Quota = s.scaleQuota(q)
		}
		orig := local[i].Limit
		local[i].Limit = s.scale(orig)
		// A Charge or a Refund keeps its cost: it is what this replica's
		// own request cost, and the smaller bucket clamps it.
		if local[i].Kind == limiter.Take && local[i].Cost <= orig.Capacity {
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

// scaleQuota returns q as the fallback applies it: its limit's share,
// rounded down but at least 1, in the same windows.
func (s *Store) scaleQuota(q *limiter.Quota) *limiter.Quota {
	sn, sd := s.opts.FallbackShare.Fraction()
	if sn == sd || q.Limit > math.MaxInt64/sn {
		return q
	}
	return &limiter.Quota{Limit: max(1, q.Limit*sn/sd), Windows: q.Windows}
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
