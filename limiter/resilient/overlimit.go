package resilient

import (
	"sync"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// overLimitCache remembers buckets that the store found short, so that
// requests which cannot possibly pass are denied without asking the store.
//
// It is exact in the only direction that matters: it denies a request only
// when even the most generous reading of the bucket cannot pay. Tokens
// never appear faster than the refill rate, and other decisions can only
// take tokens away, so the tokens a bucket holds now are at most what the
// store reported plus rate × (time since the request that learned it was
// sent). When that upper bound cannot pay, the store would have denied too.
//
// A Refund breaks that rule: it gives tokens back. The cache never answers
// a decision holding a Charge or a Refund (both must reach the store), and
// a Refund decided here makes it forget the bucket; for a while after
// (refundGuard) it ignores what decisions sent before the refund report of
// that bucket, as their answers, arriving late, would describe it before
// the tokens came back. A Refund decided by another replica cannot be seen
// here: this replica's cache may deny its caller until the entry's own
// bound says the tokens are back (docs/design.md, "Charges and refunds").
//
// A Charge that leaves its bucket without a whole token (empty, or in
// debt) teaches the cache as a denial does: the next requests cannot pass
// until it has refilled.
type overLimitCache struct {
	mu    sync.Mutex
	m     map[cacheKey]cacheEntry
	max   int
	guard time.Duration
}

type cacheKey struct{ name, id string }

// cacheEntry is what the cache knows of one bucket: a bound, or (refunded
// set, limit zero) only that a refund was sent at refunded.
type cacheEntry struct {
	limit    limiter.Limit
	missing  int64     // a lower bound on the units missing at `at`
	at       time.Time // local time when the request that learned it was sent
	full     time.Time // from then on the bucket may be full: the entry says nothing
	refunded time.Time // when a refund of the bucket was sent; zero: none recently
}

// newOverLimitCache makes a cache of at most max entries. guard is how
// long after a refund the answers of decisions sent before it are not
// learned from: their deadline, the store timeout.
func newOverLimitCache(max int, guard time.Duration) *overLimitCache {
	return &overLimitCache{m: make(map[cacheKey]cacheEntry), max: max, guard: guard}
}

// deny decides reqs from the cache when it can prove the decision is a
// denial: every request a Take, every bucket known (so res can be filled)
// and at least one unable to pay. It returns false when the store must be
// asked.
func (c *overLimitCache) deny(reqs []limiter.Request, res []limiter.Result, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var missBuf [8]int64
	missing := missBuf[:0]
	short, known := false, true
	for i := range reqs {
		r := &reqs[i]
		if r.Kind != limiter.Take || r.Quota != nil {
			known = false // a charge or a refund must reach the store; a quota's window is the store's clock's
		}
		e, ok := c.m[cacheKey{r.Name, r.ID}]
		if ok && !now.Before(e.full) {
			// Full by now: the entry says nothing. Every bucket is looked
			// at, so no stale entry outlives a decision that named it.
			delete(c.m, cacheKey{r.Name, r.ID})
			ok = false
		}
		if ok && e.limit != r.Limit {
			// A refund's guard (no bound), or the policy's numbers changed
			// (the store carries the bucket over to the new limit, after
			// which the entry bounds nothing).
			if e.refunded.IsZero() {
				delete(c.m, cacheKey{r.Name, r.ID})
			}
			ok = false
		}
		if !ok {
			known = false
			continue
		}
		m := r.Limit.Refilled(e.missing, 0, refillSpan(r.Limit, now.Sub(e.at)))
		missing = append(missing, m)
		short = short || !r.Limit.Fits(m, r.Cost)
	}
	if !known || !short {
		return false
	}
	for i := range reqs {
		r := &reqs[i]
		res[i] = r.Limit.Result(missing[i], r.Kind, r.Cost, r.Limit.Fits(missing[i], r.Cost))
	}
	return true
}

// refillSpan is the span of microseconds, from 0 on the limit's grid of
// steps, whose steps are at least those a bucket of l crosses in dt (the
// store reads its own clock, whose step boundaries may fall anywhere in
// dt): dt itself at a step of a microsecond, one step more at a coarser one.
func refillSpan(l limiter.Limit, dt time.Duration) int64 {
	us := max(dt.Microseconds(), 0)
	if r := l.Resolution().Microseconds(); r > 1 {
		us += r
	}
	return us
}

// needsLearning reports whether a decision the store answered teaches the
// cache anything (learn): with bounds, a denial or a Charge; always a
// Refund.
func needsLearning(reqs []limiter.Request, allowed, bounds bool) bool {
	if !allowed && bounds {
		return true
	}
	for i := range reqs {
		if k := reqs[i].Kind; k == limiter.Refund || (k == limiter.Charge && bounds) {
			return true
		}
	}
	return false
}

// learn remembers what a decision sent at sent taught, the store having
// answered res (allowed): with bounds (the cache answers for these
// buckets), the bounds on its buckets when it was denied, and a Charge
// that left its bucket without a whole token (empty or in debt), whatever
// the decision; and always the refunds it sent, whose buckets it forgets.
func (c *overLimitCache) learn(reqs []limiter.Request, res []limiter.Result, sent time.Time, allowed, bounds bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range reqs {
		r := &reqs[i]
		if r.Quota != nil {
			continue // nothing of a quota is cached (see deny)
		}
		k := cacheKey{r.Name, r.ID}
		e, had := c.m[k]
		switch {
		case r.Kind == limiter.Refund:
			c.put(k, cacheEntry{refunded: sent, full: sent.Add(c.guard)}, sent)
			continue
		case had && !e.refunded.IsZero() && sent.Before(e.refunded):
			continue // sent before a refund of the bucket: it reports the bucket before the tokens came back
		case r.Kind == limiter.Charge && bounds && res[i].Remaining == 0:
		case !allowed && bounds:
		default:
			continue
		}
		steps := int64(res[i].ResetAfter / r.Limit.Resolution())
		if steps <= 0 {
			if had && !e.refunded.IsZero() {
				c.m[k] = cacheEntry{refunded: e.refunded, full: e.full} // keep the refund's guard
			} else {
				delete(c.m, k) // full: nothing to remember
			}
			continue
		}
		// Results carry the wait until full rounded up to a whole step; the
		// entry keeps the smallest missing count consistent with it, so it
		// can only under-state how empty the bucket is.
		_, g := r.Limit.Units()
		n := cacheEntry{limit: r.Limit, missing: (steps-1)*g + 1, at: sent, full: sent.Add(res[i].ResetAfter)}
		if had && !e.refunded.IsZero() && sent.Before(e.refunded.Add(c.guard)) {
			// Still guarding a refund: late answers may come in until then.
			n.refunded, n.full = e.refunded, maxTime(n.full, e.refunded.Add(c.guard))
		}
		c.put(k, n, sent)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// put sets k's entry, making room first when k is new and the cache full.
func (c *overLimitCache) put(k cacheKey, e cacheEntry, now time.Time) {
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		c.evict(now)
	}
	c.m[k] = e
}

// evict drops entries that can no longer say anything, or, when none can
// be found quickly, a few arbitrary ones (map iteration order is random).
func (c *overLimitCache) evict(now time.Time) {
	n := 0
	for k, e := range c.m {
		if !now.Before(e.full) || n < 1 {
			delete(c.m, k)
		}
		if n++; n >= 8 {
			return
		}
	}
}

func (c *overLimitCache) clear() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

func (c *overLimitCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
