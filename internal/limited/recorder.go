// Package limited answers "who is being limited right now?": per policy,
// the callers denied most over a sliding window (by default the last 60 s),
// with their denied and allowed counts, kept in memory of a fixed size per
// policy, whatever the number of distinct callers.
//
// Recorder is the decide.Recorder every front end reports to: a front end
// hands each decided policy to the Tally it got from the Recorder once,
// when its configuration was installed. A Tally keeps a ring of per-interval heavy-hitters sketches
// (space-saving top-k, sketch.go) merged when read; Snapshot is that merge,
// and Handler serves it on the admin port as JSON or a small HTML page.
//
// The rate limit service (internal/door/ratelimit/rls) reports the same way: a Tally per
// configured limit (rls:DOMAIN/LIMIT), a descriptor's bucket identity as
// the id, and a Namer that shows an address as itself and anything else a
// client sends only hashed.
package limited

import (
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/floodgate/floodgate/limiter/decide"
)

// Options size a Recorder. DefaultOptions are what serve runs with.
type Options struct {
	// Window is how far back a report looks, positive. It is read in
	// Intervals steps: a report covers the current interval and the ones
	// before it, so between Window - Window/Intervals and Window.
	Window time.Duration
	// Intervals is how many sketches the window is cut into, at least 1.
	Intervals int
	// Size is how many callers each sketch follows, at least 1: the
	// callers of a report are exact when no more than Size distinct
	// callers were seen in each interval.
	Size int
	// Now is the clock a report reads (default time.Now); tests inject
	// one. Decisions bring their own time (Tally.Record).
	Now func() time.Time
}

// Recorder holds every policy's sketches. Its methods are safe for
// concurrent use.
type Recorder struct {
	window    time.Duration
	step      int64 // nanoseconds per interval
	intervals int
	size      int
	now       func() time.Time
	seed      maphash.Seed

	mu       sync.Mutex
	policies map[policyKey]*Tally
}

type policyKey struct {
	name   string
	shadow bool
}

// DefaultOptions are the last 60 s in 6 intervals of 10 s, 64 callers per
// policy and interval, on the system clock: what docs/limited.md
// describes.
func DefaultOptions() Options {
	return Options{Window: 60 * time.Second, Intervals: 6, Size: 64, Now: time.Now}
}

// New returns a Recorder sized by o. It panics on a window, interval
// count or size that is not positive: they are the caller's constants.
func New(o Options) *Recorder {
	if o.Window <= 0 || o.Intervals < 1 || o.Size < 1 {
		panic(fmt.Sprintf("limited: Options need a positive Window, Intervals and Size (got %v, %d, %d)", o.Window, o.Intervals, o.Size))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	step := int64(o.Window) / int64(o.Intervals)
	if step < 1 {
		step = 1
	}
	return &Recorder{window: o.Window, step: step, intervals: o.Intervals, size: o.Size, now: o.Now,
		seed: maphash.MakeSeed(), policies: map[policyKey]*Tally{}}
}

var _ decide.Recorder = (*Recorder)(nil)

// Tally returns the tally of the named policy (or rate limit), as
// decide.Recorder asks for it; shadow ones (which only say what they would
// have denied) are reported apart from enforced ones of the same name.
// Asking again for the same name and mode returns the same tally, so a
// reloaded configuration keeps its window. A front end asks when it
// installs a configuration, not per decision.
func (r *Recorder) Tally(name string, shadow bool) decide.Tally { return r.tally(name, shadow) }

func (r *Recorder) tally(name string, shadow bool) *Tally {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := policyKey{name, shadow}
	p := r.policies[k]
	if p == nil {
		p = &Tally{r: r, name: name, shadow: shadow}
		r.policies[k] = p
	}
	return p
}

// Namer names a caller for a report (decide.Namer). Record calls it only
// when a sketch starts following the caller, so a front end can build the
// label lazily; the label must be safe to show an operator (a hashed
// identity in place of an API key).
type Namer = decide.Namer

// Label is a Namer of labels known in advance.
type Label struct{ Key, Caller string }

// Name returns l's key and caller.
func (l Label) Name() (key, caller string) { return l.Key, l.Caller }

// Tally records one policy's decisions. Its lock is its own: decisions of
// different policies never wait on each other, and a decision holds it for
// a hash-table lookup and an increment (a scan of Size entries when a new
// caller displaces another).
type Tally struct {
	r      *Recorder
	name   string
	shadow bool

	mu   sync.Mutex
	ring []*sketch // by epoch % intervals; nil until the policy records, and again once idle a whole window
}

// Record counts one decision the policy made at time now for the caller id:
// denied (for a shadow policy: would have been denied) or allowed. id tells
// callers apart within the policy (a bucket identity: short, and equal for
// the same caller); name labels it when a sketch starts following it. The
// time is the front end's (the one it read for the decision): reading the
// clock again would cost more than the rest of Record.
func (p *Tally) Record(now time.Time, id string, name Namer, denied bool) {
	epoch := now.UnixNano() / p.r.step
	h := maphash.String(p.r.seed, id)
	p.mu.Lock()
	p.current(epoch).add(h, id, name, denied)
	p.mu.Unlock()
}

// RecordN counts, as Record does, allowed and denied decisions of the
// caller id at once: what a front end learns in bulk (Envoy's rate limit
// quota reports, which count the requests Envoy decided itself).
func (p *Tally) RecordN(now time.Time, id string, name Namer, allowed, denied int64) {
	if allowed <= 0 && denied <= 0 {
		return
	}
	epoch := now.UnixNano() / p.r.step
	h := maphash.String(p.r.seed, id)
	p.mu.Lock()
	p.current(epoch).addN(h, id, name, max(allowed, 0), max(denied, 0))
	p.mu.Unlock()
}

// current is the sketch of interval epoch, emptied if it last held an
// older one. p.mu is held.
func (p *Tally) current(epoch int64) *sketch {
	if p.ring == nil {
		p.ring = make([]*sketch, p.r.intervals)
	}
	i := int(epoch % int64(len(p.ring)))
	s := p.ring[i]
	if s == nil {
		s = newSketch(p.r.size)
		s.epoch = epoch
		p.ring[i] = s
	} else if s.epoch != epoch {
		s.reset(epoch)
	}
	return s
}

// live reports whether s holds an interval of the window ending at epoch.
func (p *Tally) live(s *sketch, epoch int64) bool {
	return s != nil && s.epoch <= epoch && s.epoch > epoch-int64(len(p.ring))
}

// MemoryBytes is the most memory one policy's sketches hold with o's sizes,
// counting each entry's strings at their bounds (a bucket identity of up to
// 32 bytes, a key and a label of MaxLabelBytes each).
// It does not depend on how many callers there are.
func MemoryBytes(o Options) int64 {
	r := New(o)
	s := newSketch(r.size)
	perSketch := int64(sketchBytes + len(s.entries)*entryBytes + len(s.index)*4)
	strings := int64(len(s.entries)) * (32 + 2*(MaxLabelBytes+16))
	return int64(r.intervals)*(perSketch+strings+8) + policyBytes
}

// Sizes used by MemoryBytes (unsafe.Sizeof on 64-bit platforms; the
// sketch test checks them).
const (
	sketchBytes = 88
	entryBytes  = 80
	policyBytes = 64
)
