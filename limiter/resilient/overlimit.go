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
// never appear faster than the refill rate, and other replicas can only take
// tokens away, so the tokens a bucket holds now are at most what the store
// reported plus rate × (time since the request that learned it was sent).
// When that upper bound cannot pay, the store would have denied too.
type overLimitCache struct {
	mu  sync.Mutex
	m   map[cacheKey]cacheEntry
	max int
}

type cacheKey struct{ name, id string }

type cacheEntry struct {
	limit   limiter.Limit
	missing int64     // a lower bound on the units missing at `at`
	at      time.Time // local time when the request that learned it was sent
	full    time.Time // from then on the bucket may be full: the entry says nothing
}

func newOverLimitCache(max int) *overLimitCache {
	return &overLimitCache{m: make(map[cacheKey]cacheEntry), max: max}
}

// deny decides reqs from the cache when it can prove the decision is a
// denial: every bucket must be known (so res can be filled) and at least one
// must be unable to pay. It returns false when the store must be asked.
func (c *overLimitCache) deny(reqs []limiter.Request, res []limiter.Result, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var missBuf [8]int64
	missing := missBuf[:0]
	short, known := false, true
	for i := range reqs {
		r := &reqs[i]
		e, ok := c.m[cacheKey{r.Name, r.ID}]
		if ok && (e.limit != r.Limit || !now.Before(e.full)) {
			// Full by now, or the policy's numbers changed (the store
			// carries the bucket over to the new limit, after which the
			// entry bounds nothing): forget it. Every bucket is looked at,
			// so no stale entry outlives a decision that named it.
			delete(c.m, cacheKey{r.Name, r.ID})
			ok = false
		}
		if !ok {
			known = false
			continue
		}
		m := r.Limit.Refill(e.missing, now.Sub(e.at).Microseconds())
		missing = append(missing, m)
		short = short || !r.Limit.Fits(m, r.Cost)
	}
	if !known || !short {
		return false
	}
	for i := range reqs {
		r := &reqs[i]
		res[i] = r.Limit.Result(missing[i], r.Cost, r.Limit.Fits(missing[i], r.Cost))
	}
	return true
}

// record remembers the buckets of a denied decision whose request was sent
// at sent. Results carry the wait until full rounded up to a microsecond; the
// entry keeps the smallest missing count consistent with it, so it can only
// under-state how empty the bucket is.
func (c *overLimitCache) record(reqs []limiter.Request, res []limiter.Result, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range reqs {
		r := &reqs[i]
		us := res[i].ResetAfter.Microseconds()
		if us <= 0 {
			delete(c.m, cacheKey{r.Name, r.ID}) // full: nothing to remember
			continue
		}
		_, g := r.Limit.Units()
		k := cacheKey{r.Name, r.ID}
		if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
			c.evict(sent)
		}
		c.m[k] = cacheEntry{limit: r.Limit, missing: (us-1)*g + 1, at: sent, full: sent.Add(res[i].ResetAfter)}
	}
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
