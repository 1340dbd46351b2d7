// Package lease decides a hot bucket's requests without a round trip to
// the shared store, never admitting more than the bucket allows.
//
// A replica that sees a bucket hot (Options.Hot decisions of it within a
// lease's Length) takes a lease: a slice of the bucket's tokens, taken from
// the store in the decision's own call as a request costing that many more
// would take them. It spends the slice on local decisions and gives back
// what is left when the lease ends (its Length passed, the bucket's limit
// changed, Close), capped at capacity as any refund. So every request a
// replica admits spent a token that left the shared bucket: whatever the
// replicas hold, the requests admitted never exceed what the bucket
// allowed since it started. What a lease costs is the other way: tokens
// sitting in one replica's lease can deny another replica's request early,
// at most the leases' tokens, which follow each replica's own demand (a
// Length's worth, at most half the capacity and half what the store last
// held). And a lease's tokens left the bucket when it was taken: spent
// later, after the bucket refilled, they can make a burst above the
// capacity by at most the leases' tokens, never more than the bucket gave
// out since the start.
//
// A call asking for a lease whose reply never came in time (Redis slow)
// may have taken the lease's tokens nonetheless: nobody holds them, so they
// are lost to the bucket until it refills, one lease a replica each time
// Redis turns slow (the replica then asks for none until Redis answers),
// and counted.
//
// Denials come from the store's answer, never from a lease: a request its
// lease cannot pay goes to the store, and a call asking for a lease that
// the store denies is asked again without it. Only Takes of requests
// marked Lease are leased; charges, refunds and shadow decisions go to the
// store as they come.
package lease

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
)

// Options tune a Store. The zero value works.
type Options struct {
	// Clock is where the store reads time (nil: the system clock).
	Clock limiter.Clock
	// Length is how long a lease lasts before what is left of it goes
	// back (default DefaultLength).
	Length time.Duration
	// Hot is how many decisions of one bucket within a Length make it
	// hot enough to lease (default DefaultHot).
	Hot int
	// MaxBuckets bounds the buckets followed at once (default
	// DefaultMaxBuckets); past it a new bucket is decided by the store.
	MaxBuckets int
	// GiveBackTimeout bounds a give-back's call to the store (default 1s).
	GiveBackTimeout time.Duration
	// Registerer receives the store's metrics (nil: none).
	Registerer prometheus.Registerer
}

// Defaults.
const (
	DefaultLength     = 250 * time.Millisecond
	DefaultHot        = 8
	DefaultMaxBuckets = 4096
)

// Store is a limiter.Store leasing hot buckets of base. Safe for
// concurrent use.
type Store struct {
	base    limiter.Store
	o       Options
	metrics metrics

	mu        sync.Mutex
	buckets   map[key]*bucket
	lastSweep time.Time
	returns   sync.WaitGroup // give-backs in flight
}

type key struct{ name, id string }

// bucket is what a replica knows of one leased bucket: its demand and its
// lease.
type bucket struct {
	key   key
	limit limiter.Limit
	// Demand: decisions and tokens asked in the current window (a Length
	// from start) and the one before.
	start                time.Time
	asked, tokens        int64
	lastAsked, lastTaken int64
	// The lease: tokens left to spend until end; remaining, the bucket's
	// whole tokens left in the store besides it when it was taken.
	left, remaining int64
	end             time.Time
	// known is the whole tokens the store's last answer left in the
	// bucket: a lease asks for no more than half of it, so the other
	// replicas find some, and a bucket drained by its demand is decided
	// by the store, one call a decision, as without leases.
	known int64
}

// New returns a Store leasing base's hot buckets.
func New(base limiter.Store, o Options) *Store {
	if o.Clock == nil {
		o.Clock = limiter.SystemClock{}
	}
	if o.Length <= 0 {
		o.Length = DefaultLength
	}
	if o.Hot <= 0 {
		o.Hot = DefaultHot
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	if o.GiveBackTimeout <= 0 {
		o.GiveBackTimeout = time.Second
	}
	return &Store{base: base, o: o, metrics: newMetrics(o.Registerer), buckets: map[key]*bucket{}}
}

// plan is one decision's leased requests, by index: each one's bucket
// (nil: not leased), whether its lease pays it, and the lease asked for
// beside it (0: none).
type plan struct {
	bucket  []*bucket
	local   []bool
	surplus []int64
}

// Take decides reqs all or nothing, as limiter.Store says: from their
// leases when every request is a leased Take its lease can pay, else in
// one call to the store, leases asked for beside the hot buckets' requests
// and the requests leases can pay reserved, given back if the store denies.
func (s *Store) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	if !anyLeased(reqs) {
		return s.base.Take(ctx, reqs, res)
	}
	if err := limiter.Validate(reqs, res); err != nil {
		return false, err
	}
	now := s.o.Clock.Now()
	p, done := s.reserve(reqs, res, now)
	if done {
		return true, nil
	}
	// The requests no lease pays go to the store, each hot one asking for
	// a lease beside it.
	var sent []limiter.Request
	var at []int
	asked := false
	for i := range reqs {
		if p.local[i] {
			continue
		}
		r := reqs[i]
		if p.surplus[i] > 0 {
			r.Cost += p.surplus[i]
			asked = true
		}
		sent, at = append(sent, r), append(at, i)
	}
	got := make([]limiter.Result, len(sent))
	allowed, err := true, error(nil)
	if len(sent) > 0 {
		allowed, err = s.base.Take(ctx, sent, got)
		if err == nil && !allowed && asked {
			// Denied with leases asked for: ask again without them, so
			// the denial is the store's answer to the requests alone.
			for j, i := range at {
				sent[j].Cost = reqs[i].Cost
				p.surplus[i] = 0
			}
			allowed, err = s.base.Take(ctx, sent, got)
		}
	}
	s.settle(reqs, res, p, got, at, allowed && err == nil, now)
	if err != nil {
		if asked && unanswered(err) {
			// The call may have run in Redis, its reply late or lost: the
			// leases it asked for may have left the bucket, and nobody
			// holds them. settle forgot what the bucket held (known 0), so
			// the next calls ask for none until Redis answers again: at
			// most one lease a replica is lost so each time Redis is slow.
			for i := range p.surplus {
				s.metrics.unanswered.Add(float64(p.surplus[i]))
			}
		}
		clear(res)
		return false, err
	}
	return allowed, nil
}

// reserve counts each leased request's demand and takes, from live leases,
// the requests they can pay; done when they pay every request (res
// written). It ends the leases that are over, and says which hot buckets
// ask for one.
func (s *Store) reserve(reqs []limiter.Request, res []limiter.Result, now time.Time) (p plan, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	p = plan{bucket: make([]*bucket, len(reqs)), local: make([]bool, len(reqs)), surplus: make([]int64, len(reqs))}
	all := true
	for i := range reqs {
		r := &reqs[i]
		b := s.follow(r, now)
		p.bucket[i] = b
		if b == nil || r.Kind != limiter.Take {
			all = false
			continue
		}
		if b.leased(now) && b.left >= max(r.Cost, 1) && r.Cost <= r.Limit.Capacity {
			p.local[i] = true
			b.left -= r.Cost
			continue
		}
		all = false
		if b.hot(s.o.Hot) {
			// A lease smaller than a hot bucket's few decisions is not
			// worth the call it may cost (a drained bucket denies it, and
			// the request is asked again without it).
			if k := min(b.size(r, now, s.o.Length), (b.known-r.Cost)/2); k >= int64(s.o.Hot) {
				p.surplus[i] = k
			}
		}
	}
	if all {
		for i := range reqs {
			res[i] = p.bucket[i].result(&reqs[i])
		}
		s.metrics.served.Add(float64(len(reqs)))
	}
	return p, all
}

// settle applies the store's answer (got, for the requests at): the
// reserved tokens spent when it allowed and given back to their leases
// when not, the leases it granted kept, every result written.
func (s *Store) settle(reqs []limiter.Request, res []limiter.Result, p plan, got []limiter.Result, at []int, allowed bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	served := 0
	for i, b := range p.bucket {
		if !p.local[i] {
			continue
		}
		served++
		if !allowed {
			b.left += reqs[i].Cost
			if !b.leased(now) {
				s.end(b) // it ended meanwhile: what came back goes back too
			}
		}
		res[i] = b.result(&reqs[i])
	}
	if allowed {
		s.metrics.served.Add(float64(served))
	}
	for j, i := range at {
		res[i] = got[j]
		r, b := &reqs[i], p.bucket[i]
		if b == nil {
			continue
		}
		b.known = got[j].Remaining
		if !got[j].Allowed {
			s.metrics.denied.Inc()
		}
		k := p.surplus[i]
		if k == 0 || !allowed {
			continue
		}
		if got[j].Degraded || s.buckets[b.key] != b {
			// Decided by the per-replica fallback, or no longer followed:
			// no lease from it; its tokens go back.
			s.giveBack(b.key, r.Limit, k)
			continue
		}
		// A lease renewed before its end keeps what it had left; one
		// over gives back what it had first.
		if !b.leased(now) {
			s.end(b)
		}
		b.left, b.remaining, b.end = b.left+k, got[j].Remaining, now.Add(s.o.Length)
		s.metrics.taken.Inc()
		res[i] = b.result(r)
	}
}

// follow is the bucket of r, its demand counted, nil when r is not leased
// or too many buckets are followed. A lease taken under another limit (a
// reload changed it) ends here.
func (s *Store) follow(r *limiter.Request, now time.Time) *bucket {
	if !r.Lease || r.Quota != nil { // a quota is never leased: its window is the store's clock's
		return nil
	}
	k := key{r.Name, r.ID}
	b := s.buckets[k]
	if b == nil {
		if len(s.buckets) >= s.o.MaxBuckets {
			return nil
		}
		b = &bucket{key: k, limit: r.Limit, start: now, known: r.Limit.Capacity}
		s.buckets[k] = b
	}
	if b.limit != r.Limit {
		s.end(b)
		b.limit = r.Limit
	}
	if now.Sub(b.start) >= s.o.Length {
		b.lastAsked, b.lastTaken = b.asked, b.tokens
		if now.Sub(b.start) >= 2*s.o.Length {
			b.lastAsked, b.lastTaken = 0, 0 // a window passed with no demand
		}
		b.start, b.asked, b.tokens = now, 0, 0
	}
	b.asked++
	b.tokens += r.Cost
	return b
}

// leased reports whether b holds a lease at now.
func (b *bucket) leased(now time.Time) bool { return now.Before(b.end) }

// hot reports whether b's demand is worth a lease.
func (b *bucket) hot(threshold int) bool {
	return b.asked >= int64(threshold) || b.lastAsked >= int64(threshold)
}

// size is the lease to ask for beside r: a Length's worth of the tokens
// the bucket was asked for lately (the window before, or the current one
// at its pace so far), at most half its capacity beyond r's cost (so other
// replicas may lease too), at least one request's cost.
func (b *bucket) size(r *limiter.Request, now time.Time, length time.Duration) int64 {
	elapsed := max(now.Sub(b.start), length/100)
	pace := int64(float64(b.tokens) * float64(length) / float64(elapsed))
	want := max(pace, b.lastTaken, max(r.Cost, 1))
	room := r.Limit.Capacity/2 - r.Cost
	return max(min(want, room), 0)
}

// result is a request's result from b's lease: allowed, the whole tokens
// left those the store had when the lease was taken plus those the lease
// still holds (what this replica knows; other replicas may have taken
// some since), and the time until full counted from them.
func (b *bucket) result(r *limiter.Request) limiter.Result {
	perToken, _ := r.Limit.Units()
	remaining := min(b.remaining+b.left, r.Limit.Capacity)
	return r.Limit.Result((r.Limit.Capacity-remaining)*perToken, limiter.Take, r.Cost, true)
}

// sweep ends the leases that are over, at most once a Length, and stops
// following buckets with neither a lease nor recent demand.
func (s *Store) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < s.o.Length {
		return
	}
	s.lastSweep = now
	for k, b := range s.buckets {
		if !b.leased(now) {
			s.end(b)
			if now.Sub(b.start) >= 2*s.o.Length {
				delete(s.buckets, k)
			}
		}
	}
}

// end ends b's lease, giving back what is left of it.
func (s *Store) end(b *bucket) {
	if b.left > 0 {
		s.giveBack(b.key, b.limit, b.left)
	}
	b.left, b.end = 0, time.Time{}
}

// giveBack refunds n tokens of a bucket to the store, on a goroutine of
// its own so no decision waits for it. A give-back that fails loses its
// tokens until the bucket refills: counted.
func (s *Store) giveBack(k key, limit limiter.Limit, n int64) {
	s.returns.Add(1)
	go func() {
		defer s.returns.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.o.GiveBackTimeout)
		defer cancel()
		res := make([]limiter.Result, 1)
		if _, err := s.base.Take(ctx, []limiter.Request{{Name: k.name, ID: k.id, Limit: limit, Cost: n, Kind: limiter.Refund}}, res); err != nil {
			s.metrics.lost.Add(float64(n))
			return
		}
		s.metrics.returned.Add(float64(n))
	}()
}

// Expire ends the leases that are over at the clock's now, as decisions
// do once a Length; Run calls it while no decision comes.
func (s *Store) Expire() {
	s.mu.Lock()
	s.lastSweep = time.Time{}
	s.sweep(s.o.Clock.Now())
	s.mu.Unlock()
}

// Run ends the leases that are over every Length until ctx ends, so that
// a bucket no longer asked for gives its tokens back.
func (s *Store) Run(ctx context.Context) {
	t := time.NewTicker(s.o.Length)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Expire()
		}
	}
}

// Close gives every lease back and waits for the give-backs (each bounded
// by GiveBackTimeout).
func (s *Store) Close() {
	s.mu.Lock()
	for _, b := range s.buckets {
		s.end(b)
	}
	s.mu.Unlock()
	s.returns.Wait()
}

// Wait waits for the give-backs in flight.
func (s *Store) Wait() { s.returns.Wait() }

func anyLeased(reqs []limiter.Request) bool {
	for i := range reqs {
		if reqs[i].Lease {
			return true
		}
	}
	return false
}

// unanswered reports whether err is a call's want of a reply in time (a
// deadline, a read timing out), after which Redis may still have run it;
// not a refusal before anything was sent (a breaker open, a connection
// refused).
func unanswered(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

type metrics struct {
	taken, served, returned, lost, unanswered, denied prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		taken: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_lease_taken_total",
			Help: "Leases taken: slices of a hot bucket's tokens this replica spends on local decisions."}),
		served: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_lease_decisions_total",
			Help: "Buckets' decisions served from a lease, without a call to the store."}),
		returned: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_lease_tokens_returned_total",
			Help: "Tokens given back to the store when a lease ended unspent."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_lease_tokens_lost_total",
			Help: "Tokens a lease could not give back (the store was unreachable): lost to their bucket until it refills."}),
		unanswered: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_lease_tokens_unanswered_total",
			Help: "Tokens asked for as leases in calls whose reply never came in time: Redis may have taken them (a script started in time, its reply late), lost to their bucket until it refills."}),
		denied: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_lease_denied_total",
			Help: "Leased buckets' requests the store denied: the early denials are among them, while tokens sat in other replicas' leases (a replica cannot tell which)."}),
	}
	if reg != nil {
		reg.MustRegister(m.taken, m.served, m.returned, m.lost, m.unanswered, m.denied)
	}
	return m
}
