package memory

import (
	"context"

	"github.com/floodgate/floodgate/limiter"
)

// Adjust implements limiter.Adjuster on this store's buckets alone: the
// Balance is marked Local, since another replica's in-memory bucket for the
// same caller is another bucket. It takes the bucket's shard lock, so it is
// atomic with the decisions on the bucket. A quota's window is the one the
// store's clock is in, as for its decisions.
func (s *Store) Adjust(_ context.Context, req limiter.Request, a limiter.Adjustment) (limiter.Balance, error) {
	if err := limiter.CheckAdjust(req, a); err != nil {
		return limiter.Balance{}, err
	}
	if req.Quota != nil {
		return s.adjustQuota(req, a), nil
	}
	now := s.clock.Now().Sub(s.epoch).Microseconds()
	l := req.Limit
	k := s.key(req.Name, req.ID)
	lim := s.limits.id(l)
	sh := &s.shards[s.shard(k)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, slot := int64(0), -1
	if j, ok := sh.t.find(k); ok {
		b := &sh.t.slots[j].b
		slot = j
		if b.lim == lim {
			m = l.Refilled(b.missing, b.at(l), now)
		} else {
			old := s.limits.limit(b.lim)
			m = l.Convert(old, old.Refilled(b.missing, b.at(old), now))
		}
	}
	if a.Op != limiter.OpRead {
		m = l.Missing(m, a)
		switch {
		case m == 0 && slot >= 0:
			sh.t.remove(slot) // full: as a bucket never seen
		case m == 0:
		case slot >= 0:
			sh.t.slots[slot].b = bucket{missing: m, full: fullAt(l, m, now), lim: lim, fam: sh.t.slots[slot].b.fam}
		default:
			s.insert(sh, k, bucket{missing: m, full: fullAt(l, m, now), lim: lim, fam: s.families.id(req.Name)}, now)
		}
	}
	b := l.Balance(m)
	b.Local = true
	return b, nil
}

// adjustQuota is Adjust on req's quota, in the window the store's clock is
// in, as a decision reads it (readQuota): a count of another window is a
// count of zero.
func (s *Store) adjustQuota(req limiter.Request, a limiter.Adjustment) limiter.Balance {
	at := s.clock.Now()
	now := at.Sub(s.epoch).Microseconds()
	k := s.quotaKey(req.Name, req.ID)
	sh := &s.shards[s.shard(k)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := pending{k: k, slot: -1}
	s.readQuota(&req, &p, &sh.t, at)
	m := p.missing
	if a.Op != limiter.OpRead {
		m = req.Quota.Count(m, a)
		switch {
		case m == 0 && p.slot >= 0:
			sh.t.remove(p.slot)
		case m == 0:
		case p.slot >= 0:
			sh.t.slots[p.slot].b = bucket{missing: m, full: p.end, lim: quotaLim, fam: sh.t.slots[p.slot].b.fam}
		default:
			s.insert(sh, k, bucket{missing: m, full: p.end, lim: quotaLim, fam: s.families.id(req.Name)}, now)
		}
	}
	start, end := req.Quota.Windows.Window(at)
	b := req.Quota.Balance(m, start, end, at)
	b.Local = true
	return b
}
