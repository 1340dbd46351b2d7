// Package memory is the in-process limiter.Store: Floodgate's embedded default
// and, behind the resilience layer, its per-replica fallback when Redis is
// unreachable. Same arithmetic as the Redis script, exact to the microsecond
// (to the limit's step, for the few limits counted in coarser ones).
//
// Buckets live in shards, each a map behind its own mutex, so parallel
// decisions on different callers rarely meet on a lock. A bucket that has
// refilled completely is indistinguishable from one never seen, so it is
// reclaimed at no cost to accuracy (in amortized sweeps as new buckets
// arrive, and by Reclaim). When a shard still reaches its share of
// MaxBuckets, the bucket family (policy) holding the most of that shard gives
// up the sampled bucket of its own closest to full: a flood of unique
// identities on one policy costs bounded memory and makes room out of its own
// buckets, never out of a policy that holds fewer (docs/failure-modes.md,
// "In-memory store: what is forgotten first"). Forgetting a bucket can only
// err in its caller's favour.
package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// Options tune a Store. MaxBuckets and Shards are taken as given and must
// be at least 1; Floodgate's configuration holds the values it runs with
// (store.memory.max_buckets, and its MemoryShards).
type Options struct {
	// Clock is where the store reads time (nil: the system clock); tests
	// inject a limiter.ManualClock.
	Clock limiter.Clock
	// MaxBuckets bounds the buckets held at once.
	MaxBuckets int
	// Shards is the number of independently locked maps, rounded up to a
	// power of two (and down to at most MaxBuckets).
	Shards int
}

// Store is an in-memory limiter.Store. Safe for concurrent use.
type Store struct {
	clock    limiter.Clock
	epoch    time.Time
	seed     maphash.Seed
	mask     uint64
	shardCap int
	shards   []shard
	limits   limits
	families families
}

// limits numbers the limits the store has seen, so that a bucket records the
// limit it was written under in four bytes (a changed limit converts the
// bucket: limiter.Limit.Convert). Limits come from the configuration, so
// they are few; a reload that changes a policy's numbers adds one.
//
// A bucket's lim holds the limit's number in its low 28 bits and its
// resolution (a step is 10^exp µs) in the top 4, so that the table reads
// the instant a bucket is full without the limit.
type limits struct {
	ids sync.Map // limiter.Limit → uint32 (number and resolution, as a bucket holds them)
	mu  sync.Mutex
	all []limiter.Limit // by number, under mu
}

// limNumber masks the limit's number in a bucket's lim.
const limNumber = 1<<28 - 1

func (ls *limits) id(l limiter.Limit) uint32 {
	if id, ok := ls.ids.Load(l); ok {
		return id.(uint32)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if id, ok := ls.ids.Load(l); ok {
		return id.(uint32)
	}
	ls.all = append(ls.all, l)
	id := uint32(len(ls.all)-1)&limNumber | uint32(resolutionExp(l))<<28
	ls.ids.Store(l, id)
	return id
}

// resolutionExp is l's step as a power of ten of microseconds.
func resolutionExp(l limiter.Limit) int {
	e := 0
	for r := l.Resolution().Microseconds(); r >= 10; r /= 10 {
		e++
	}
	return e
}

// pow10 is 10^e for the resolutions a limit may have.
var pow10 = [...]int64{1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000}

// families numbers the bucket families (Request.Name: policies) the store
// has seen, so that a bucket records its family in four bytes and eviction
// can tell one policy's buckets from another's. Names come from the
// configuration, so they are few.
type families struct {
	ids sync.Map // string → uint32
	mu  sync.Mutex
	n   uint32 // under mu
}

func (fs *families) id(name string) uint32 {
	if id, ok := fs.ids.Load(name); ok {
		return id.(uint32)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if id, ok := fs.ids.Load(name); ok {
		return id.(uint32)
	}
	id := fs.n
	fs.n++
	fs.ids.Store(name, id)
	return id
}

// limit returns the limit of a bucket's lim.
func (ls *limits) limit(id uint32) limiter.Limit {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.all[id&limNumber]
}

// key identifies a bucket: a 64-bit keyed hash of its name and identity.
// Holding no strings keeps the maps pointer-free (the garbage collector never
// scans them) and each entry at 32 bytes. The seed is random per process, so
// no caller can aim for a collision; by chance, two of n buckets share a key
// with probability about n²/2⁶⁵ (3·10⁻⁸ for a million).
type key uint64

func (s *Store) key(name, id string) key { return s.keyOf(name, id, 0) }

// quotaKey identifies a calendar quota's count: never a token bucket's key,
// so a policy that turns from one into the other starts afresh.
func (s *Store) quotaKey(name, id string) key { return s.keyOf(name, id, 1) }

func (s *Store) keyOf(name, id string, sep byte) key {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(name)
	h.WriteByte(sep)
	h.WriteString(id)
	if k := key(h.Sum64()); k != 0 {
		return k
	}
	return 1 // 0 marks an empty slot
}

func (s *Store) shard(k key) int { return int(uint64(k) >> 32 & s.mask) }

// bucket is one bucket's exact state: missing units (above the capacity's
// units while in debt), counted in limit lim, at the step full −
// ceil(missing/G), full being the step at which it is full again (steps of
// the limit's resolution from the store's epoch). Storing full rather than
// that step lets the table sweep without the limit, and counting steps
// rather than microseconds keeps the far future of a slow bucket with a
// large capacity (a billion years for 2^32 tokens a year) within 64 bits.
// fam is its family (policy), for eviction; it fits in what would be
// padding.
type bucket struct {
	missing, full int64
	lim, fam      uint32
}

// at is the microsecond (the start of a step) at which b missed b.missing
// units, given its limit. It never overflows: it is not after now.
func (b *bucket) at(l limiter.Limit) int64 {
	_, g := l.Units()
	return (b.full - ceilDiv(b.missing, g)) * l.Resolution().Microseconds()
}

// fullMicros is the first microsecond at which b is full again, or the
// largest int64 when that is beyond it.
func (b *bucket) fullMicros() int64 {
	r := pow10[b.lim>>28]
	if b.full > math.MaxInt64/r {
		return math.MaxInt64
	}
	return b.full * r
}

type shard struct {
	mu         sync.Mutex
	t          table
	untilSweep int      // new buckets to take before the next sweep
	_          [24]byte // keep neighbouring shards' locks off one cache line
}

// New returns an empty store. It panics when o.MaxBuckets or o.Shards is
// below 1: a programmer's mistake, as a configuration's values are checked
// before they get here.
func New(o Options) *Store {
	if o.Clock == nil {
		o.Clock = limiter.SystemClock{}
	}
	n, shardCap := layout(o)
	s := &Store{
		clock:    o.Clock,
		epoch:    o.Clock.Now(),
		seed:     maphash.MakeSeed(),
		mask:     uint64(n - 1),
		shardCap: shardCap,
		shards:   make([]shard, n),
	}
	for i := range s.shards {
		s.shards[i].t = newTable()
	}
	return s
}

// layout returns the shards New makes for o, a power of two, and each
// one's share of MaxBuckets (rounded down: the total never exceeds it).
// It panics on options New refuses.
func layout(o Options) (shards, shardCap int) {
	if o.MaxBuckets < 1 {
		panic(fmt.Sprintf("memory: Options.MaxBuckets must be at least 1 (got %d)", o.MaxBuckets))
	}
	if o.Shards < 1 {
		panic(fmt.Sprintf("memory: Options.Shards must be at least 1 (got %d)", o.Shards))
	}
	n := 1
	for n < o.Shards {
		n <<= 1
	}
	for n > 1 && n > o.MaxBuckets {
		n >>= 1 // every shard holds at least one bucket
	}
	return n, o.MaxBuckets / n
}

// maxInline is how many buckets one decision handles without allocating.
const maxInline = 8

// Take implements limiter.Store.
func (s *Store) Take(_ context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	if err := limiter.Validate(reqs, res); err != nil {
		return false, err
	}
	at := s.clock.Now()
	now := at.Sub(s.epoch).Microseconds()

	var pendBuf [maxInline]pending
	var idxBuf, orderBuf [maxInline]int
	pend, idx, order := pendBuf[:0], idxBuf[:0], orderBuf[:0]
	if len(reqs) > maxInline {
		pend, idx, order = make([]pending, 0, len(reqs)), make([]int, 0, len(reqs)), make([]int, 0, len(reqs))
	}
	for i := range reqs {
		var p pending
		if reqs[i].Quota == nil {
			k := s.key(reqs[i].Name, reqs[i].ID)
			p = pending{k: k, shard: s.shard(k), slot: -1, lim: s.limits.id(reqs[i].Limit), fam: s.families.id(reqs[i].Name)}
		} else {
			k := s.quotaKey(reqs[i].Name, reqs[i].ID)
			p = pending{k: k, shard: s.shard(k), slot: -1, lim: quotaLim, fam: s.families.id(reqs[i].Name)}
		}
		pend, idx = append(pend, p), append(idx, p.shard)
	}
	order = s.locked(idx, order)

	allowed := true
	for i := range reqs {
		r, p := &reqs[i], &pend[i]
		t := &s.shards[p.shard].t
		if r.Quota != nil {
			s.readQuota(r, p, t, at)
			if r.Kind == limiter.Take {
				allowed = allowed && r.Quota.Fits(p.missing, r.Cost)
			}
			continue
		}
		if j, ok := t.find(p.k); ok {
			b := &t.slots[j].b
			p.slot = j
			if b.lim == p.lim {
				p.missing = r.Limit.Refilled(b.missing, b.at(r.Limit), now)
			} else {
				// The bucket's limit changed (a reload): it keeps its tokens.
				old := s.limits.limit(b.lim)
				p.missing = r.Limit.Convert(old, old.Refilled(b.missing, b.at(old), now))
				p.converted = true
			}
		}
		if r.Kind == limiter.Take {
			allowed = allowed && r.Limit.Fits(p.missing, r.Cost)
		}
	}
	// Charges and refunds apply whatever the Takes decided; the Takes pay
	// only when all of them can. Known buckets are written in place first:
	// inserting a new bucket may move entries of its table, which would
	// make the recorded slots stale.
	for pass := 0; pass < 2; pass++ {
		for i := range reqs {
			r, p := &reqs[i], &pend[i]
			if (pass == 0) != (p.slot >= 0) {
				continue
			}
			if r.Quota != nil {
				s.writeQuota(r, p, &res[i], allowed, now)
				continue
			}
			m := p.missing
			if r.Kind != limiter.Take || allowed {
				m = r.Limit.Apply(m, r.Kind, r.Cost)
			}
			if r.Kind == limiter.Take && !allowed {
				res[i] = r.Limit.Result(m, r.Kind, r.Cost, r.Limit.Fits(m, r.Cost))
			} else {
				res[i] = r.Limit.Result(m, r.Kind, r.Cost, true)
			}
			if m == p.missing && !p.converted {
				continue // nothing to write (a converted bucket is held under the new limit from now on, charged or not)
			}
			b := bucket{missing: m, full: fullAt(r.Limit, m, now), lim: p.lim, fam: p.fam}
			if sh := &s.shards[p.shard]; p.slot >= 0 {
				sh.t.slots[p.slot].b = b
			} else {
				s.insert(sh, p.k, b, now)
			}
		}
	}
	s.unlock(order)
	return allowed, nil
}

// pending is one bucket of a decision in progress.
type pending struct {
	k         key
	shard     int
	slot      int    // index in the shard's table, -1 for a bucket not held
	missing   int64  // units missing now
	lim       uint32 // the request's limit's id
	fam       uint32 // the request's family's id
	converted bool   // held under another limit until now

	// A quota's window: its start and end, microseconds from the store's
	// epoch.
	start, end int64
}

// quotaLim is the lim of a quota's count, which no limit's number is: a
// quota's entry holds its count as missing and its window's end as full
// (a resolution of one microsecond), so a sweep forgets it when its window
// is over.
const quotaLim = limNumber

// readQuota reads into p the count of r's quota in the window holding at:
// zero when the store holds none, or holds one of another window.
func (s *Store) readQuota(r *limiter.Request, p *pending, t *table, at time.Time) {
	start, end := r.Quota.Windows.Window(at)
	p.start, p.end = start.Sub(s.epoch).Microseconds(), end.Sub(s.epoch).Microseconds()
	if j, ok := t.find(p.k); ok {
		p.slot = j
		if b := &t.slots[j].b; b.lim == quotaLim && b.full == p.end {
			p.missing = b.missing
		}
	}
}

// writeQuota applies r to its quota's count, read into p, fills its
// result and writes the count back.
func (s *Store) writeQuota(r *limiter.Request, p *pending, res *limiter.Result, allowed bool, now int64) {
	q := r.Quota
	m := p.missing
	if r.Kind != limiter.Take || allowed {
		m = q.Apply(m, r.Kind, r.Cost)
	}
	left, length := time.Duration(p.end-now)*time.Microsecond, time.Duration(p.end-p.start)*time.Microsecond
	if r.Kind == limiter.Take && !allowed {
		*res = q.Result(m, r.Kind, r.Cost, q.Fits(m, r.Cost), left, length)
	} else {
		*res = q.Result(m, r.Kind, r.Cost, true, left, length)
	}
	sh := &s.shards[p.shard]
	if p.slot >= 0 {
		if b := &sh.t.slots[p.slot].b; b.lim != quotaLim || b.full != p.end || b.missing != m {
			*b = bucket{missing: m, full: p.end, lim: quotaLim, fam: p.fam}
		}
		return
	}
	if m != 0 { // below zero: a credit an operator's Add gave
		s.insert(sh, p.k, bucket{missing: m, full: p.end, lim: quotaLim, fam: p.fam}, now)
	}
}

// Len returns the number of buckets held (for tests and metrics).
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.n
		sh.mu.Unlock()
	}
	return n
}

// fullAt is the step at which a bucket of l missing missing units at
// microsecond now is full: now's step, plus whole steps.
func fullAt(l limiter.Limit, missing, now int64) int64 {
	_, g := l.Units()
	if r := l.Resolution().Microseconds(); r > 1 {
		now /= r
	}
	return now + ceilDiv(missing, g)
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

// minSweep is the fewest inserts between two sweeps of a shard.
const minSweep = 64

// insert stores b under a k the shard does not hold, making room first:
// once the shard has taken as many new buckets as it held after its last
// sweep, it drops its full ones, so reclamation costs O(1) per insert, amortized, and memory
// tracks the callers still refilling. When the shard is at its cap all the
// same, the family holding the most of it gives up a bucket (table.evict).
func (s *Store) insert(sh *shard, k key, b bucket, now int64) {
	t := &sh.t
	if sh.untilSweep--; sh.untilSweep <= 0 {
		t.sweep(now)
		sh.untilSweep = max(minSweep, t.n)
	}
	if t.n >= s.shardCap {
		t.evict(int(uint64(k)>>16), b.fam)
	}
	i, _ := t.find(k)
	t.insert(i, k, b)
}

// locked takes the locks of the shards named in idx, each once and in
// ascending order so decisions over several buckets cannot deadlock, and
// returns the shards to release. buf provides storage.
func (s *Store) locked(idx, buf []int) []int {
	order := append(buf[:0], idx...)
	if len(order) > maxInline {
		slices.Sort(order) // thousands of buckets (a rate limit request's descriptors) stay n log n
	} else {
		for i := 1; i < len(order); i++ { // insertion sort: a handful of entries
			for j := i; j > 0 && order[j] < order[j-1]; j-- {
				order[j], order[j-1] = order[j-1], order[j]
			}
		}
	}
	u := order[:0]
	for i, x := range order {
		if i == 0 || x != order[i-1] {
			u = append(u, x)
		}
	}
	for _, x := range u {
		s.shards[x].mu.Lock()
	}
	return u
}

func (s *Store) unlock(order []int) {
	for _, x := range order {
		s.shards[x].mu.Unlock()
	}
}

// Has reports whether the store holds state for bucket (name, id); a bucket
// it does not hold is full.
func (s *Store) Has(name, id string) bool {
	k := s.key(name, id)
	sh := &s.shards[s.shard(k)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.t.find(k)
	return ok
}

// Reclaim drops every bucket that has refilled completely and returns how
// many it dropped. Take reclaims as it goes; a periodic Reclaim returns the
// memory of callers that went idle all at once.
func (s *Store) Reclaim() int {
	now := s.clock.Now().Sub(s.epoch).Microseconds()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.sweep(now)
		sh.untilSweep = max(minSweep, sh.t.n)
		sh.mu.Unlock()
	}
	return n
}
