package resilient

import (
	"sync"
	"sync/atomic"
	"time"
)

// State is a circuit breaker's state.
type State int32

// Breaker states. The numbers are the floodgate_breaker_state gauge values.
const (
	Closed   State = 0 // calls go through
	HalfOpen State = 1 // one probe call goes through
	Open     State = 2 // no call goes through
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	}
	return "open"
}

// BreakerOptions tune a Breaker.
type BreakerOptions struct {
	// Failures is how many consecutive failures open the breaker (default 5).
	Failures int
	// OpenFor is how long it stays open before one probe (default 500ms).
	OpenFor time.Duration
}

// Ticket is what Allow hands a call it admits, and what the call reports its
// result with. It names the generation the call was admitted in: every state
// change starts a new generation, and a result from an earlier one says
// nothing about the store as it is now, so the breaker ignores it (as
// sony/gobreaker does). A call admitted before the breaker opened cannot
// close it, and a cancelled call cannot free a probe slot it never held.
type Ticket struct {
	gen   uint32
	probe bool // the call holds the half-open probe slot, or is a Probe
}

// Breaker is a circuit breaker on the store: after Failures consecutive
// failures it opens and no call reaches the store; after OpenFor it lets one
// probe through (half-open); the probe's success closes it, its failure
// opens it again. Time is passed in, so tests drive it with a manual clock.
// Safe for concurrent use; the closed path is atomic operations on one word.
//
// Locks: mu guards the open and half-open bookkeeping and every transition;
// notifyMu serialises the state-change callback, which runs with mu
// released, so the callback may take any lock of its own and call the
// breaker. notifyMu is only ever tried, never waited for; mu is taken
// under it briefly, to collect transitions.
type Breaker struct {
	opts BreakerOptions
	// word packs the state (bits 0–1), the consecutive failures in the
	// closed state (bits 2–31) and the generation (bits 32–63). Only
	// transitions change the state and the generation, under mu; the
	// closed path changes the failures with compare-and-swap.
	word atomic.Uint64

	mu       sync.Mutex
	openedAt time.Time
	probing  bool
	pending  []transition // transitions not yet told to onChange

	notifyMu sync.Mutex
	onChange func(from, to State)
}

type transition struct{ from, to State }

func pack(s State, failures, gen uint32) uint64 {
	return uint64(gen)<<32 | uint64(failures)<<2 | uint64(s)
}

func unpack(w uint64) (s State, failures, gen uint32) {
	return State(w & 3), uint32(w>>2) & (1<<30 - 1), uint32(w >> 32)
}

// NewBreaker returns a closed breaker. onChange, if not nil, is called on
// every transition, in order, without the breaker's lock held.
func NewBreaker(o BreakerOptions, onChange func(from, to State)) *Breaker {
	if o.Failures <= 0 {
		o.Failures = 5
	}
	o.Failures = min(o.Failures, 1<<30-1)
	if o.OpenFor <= 0 {
		o.OpenFor = 500 * time.Millisecond
	}
	return &Breaker{opts: o, onChange: onChange}
}

// State returns the current state.
func (b *Breaker) State() State {
	s, _, _ := unpack(b.word.Load())
	return s
}

// Allow reports whether a call may go to the store at now and, when it may,
// the ticket the call reports its result with. In the half-open state
// exactly one caller (the probe) is allowed until it reports back.
func (b *Breaker) Allow(now time.Time) (Ticket, bool) {
	if s, _, gen := unpack(b.word.Load()); s == Closed {
		return Ticket{gen: gen}, true
	}
	return b.admit(now, false)
}

// Probe is Allow for a call made to learn the store's health rather than to
// serve a request: in the closed state its failure alone opens the breaker
// (a store found unusable at start need not wait for Failures requests to
// fail). Otherwise it competes for the probe slot like any call.
func (b *Breaker) Probe(now time.Time) (Ticket, bool) {
	return b.admit(now, true)
}

func (b *Breaker) admit(now time.Time, probe bool) (Ticket, bool) {
	b.mu.Lock()
	defer b.notify()
	defer b.mu.Unlock()
	s, _, gen := unpack(b.word.Load())
	switch s {
	case Closed:
		return Ticket{gen: gen, probe: probe}, true
	case Open:
		if now.Sub(b.openedAt) < b.opts.OpenFor {
			return Ticket{}, false
		}
		gen = b.set(HalfOpen)
	default: // half-open: one probe at a time
		if b.probing {
			return Ticket{}, false
		}
	}
	b.probing = true
	return Ticket{gen: gen, probe: true}, true
}

// Success records that the call holding t worked.
func (b *Breaker) Success(t Ticket) {
	for {
		w := b.word.Load()
		s, failures, gen := unpack(w)
		if gen != t.gen {
			return // admitted in another generation: says nothing now
		}
		if s != Closed {
			break
		}
		if failures == 0 || b.word.CompareAndSwap(w, pack(Closed, 0, gen)) {
			return
		}
	}
	b.mu.Lock()
	defer b.notify()
	defer b.mu.Unlock()
	if s, _, gen := unpack(b.word.Load()); gen == t.gen && s == HalfOpen && t.probe {
		b.probing = false
		b.set(Closed)
	}
}

// Failure records that the call holding t failed or timed out at now.
func (b *Breaker) Failure(t Ticket, now time.Time) {
	if b.countFailure(t) {
		return
	}
	b.mu.Lock()
	defer b.notify()
	defer b.mu.Unlock()
	if b.countFailure(t) { // a success reset the count meanwhile
		return
	}
	s, _, gen := unpack(b.word.Load())
	if gen != t.gen || s == Open || (s == HalfOpen && !t.probe) {
		return
	}
	b.probing = false
	b.openedAt = now
	b.set(Open)
}

// countFailure counts a failure in the closed state when it does not reach
// the threshold, and reports whether it is done with it: counted, or from
// another generation.
func (b *Breaker) countFailure(t Ticket) bool {
	for {
		w := b.word.Load()
		s, failures, gen := unpack(w)
		if gen != t.gen {
			return true
		}
		if s != Closed || t.probe || int(failures)+1 >= b.opts.Failures {
			return false
		}
		if b.word.CompareAndSwap(w, pack(Closed, failures+1, gen)) {
			return true
		}
	}
}

// Release ends a call that neither succeeded nor failed (the caller gave
// up). When it held the probe slot, another caller may probe.
func (b *Breaker) Release(t Ticket) {
	if !t.probe {
		return
	}
	b.mu.Lock()
	if s, _, gen := unpack(b.word.Load()); gen == t.gen && s == HalfOpen {
		b.probing = false
	}
	b.mu.Unlock()
}

// set moves to a new state and generation, under mu, and queues the
// transition for onChange. It returns the new generation.
func (b *Breaker) set(to State) uint32 {
	from, _, gen := unpack(b.word.Load())
	gen++
	b.word.Store(pack(to, 0, gen))
	if b.onChange != nil && from != to {
		b.pending = append(b.pending, transition{from, to})
	}
	return gen
}

// notify tells onChange the transitions queued so far, in order, with mu
// released. Deferred after mu's unlock by every method that may transition.
// Whoever holds notifyMu delivers; a caller that finds it held (another
// goroutine, or the callback itself calling the breaker) leaves its
// transitions to the holder, who looks again after letting go.
func (b *Breaker) notify() {
	if b.onChange == nil {
		return
	}
	for b.notifyMu.TryLock() {
		for {
			b.mu.Lock()
			ts := b.pending
			b.pending = nil
			b.mu.Unlock()
			if len(ts) == 0 {
				break
			}
			for _, t := range ts {
				b.onChange(t.from, t.to)
			}
		}
		b.notifyMu.Unlock()
		b.mu.Lock()
		more := len(b.pending) > 0
		b.mu.Unlock()
		if !more {
			return
		}
	}
}
