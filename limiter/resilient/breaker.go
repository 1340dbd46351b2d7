package resilient

import (
	"fmt"
	"sync"
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

// BreakerOptions tune a Breaker. Both are taken as given and must be
// positive; Floodgate's configuration holds the values it runs with
// (internal/config: store.breaker).
type BreakerOptions struct {
	// Failures is how many consecutive failures open the breaker.
	Failures int
	// OpenFor is how long it stays open before one probe.
	OpenFor time.Duration
}

// check reports options NewBreaker refuses.
func (o BreakerOptions) check() error {
	if o.Failures < 1 {
		return fmt.Errorf("resilient: BreakerOptions.Failures must be at least 1: the consecutive failures that open the breaker (got %d)", o.Failures)
	}
	if o.OpenFor <= 0 {
		return fmt.Errorf("resilient: BreakerOptions.OpenFor must be positive: how long the breaker stays open before a probe (got %v)", o.OpenFor)
	}
	return nil
}

// Ticket is what Allow hands a call it admits, and what the call reports its
// result with. It names the generation the call was admitted in: every state
// change starts a new generation, and a result from an earlier one says
// nothing about the store as it is now, so the breaker ignores it (as
// sony/gobreaker does). A call admitted before the breaker opened cannot
// close it, and a cancelled call cannot free a probe slot it never held.
type Ticket struct {
	gen   uint64
	probe bool // the call holds the half-open probe slot, or is a Probe
}

// Breaker is a circuit breaker on the store: after Failures consecutive
// failures it opens and no call reaches the store; after OpenFor it lets one
// probe through (half-open); the probe's success closes it, its failure
// opens it again. Time is passed in, so tests drive it with a manual clock.
// Safe for concurrent use.
//
// One mutex guards the state; a lock per call costs tens of nanoseconds
// against a store round trip of tens of microseconds (docs/performance.md,
// "Circuit breaker: mutex against atomics"). The state-change callback runs
// with the mutex released, so it may take any lock of its own and call the
// breaker; notifyMu keeps its calls in order (see notify).
type Breaker struct {
	opts BreakerOptions

	mu       sync.Mutex
	state    State
	failures int    // consecutive failures while closed
	gen      uint64 // bumped by every transition
	openedAt time.Time
	probing  bool
	pending  []transition // transitions not yet told to onChange

	notifyMu sync.Mutex
	onChange func(from, to State)
}

type transition struct{ from, to State }

// NewBreaker returns a closed breaker. onChange, if not nil, is called on
// every transition, in order, without the breaker's lock held. It panics
// when o.Failures or o.OpenFor is not positive: a programmer's mistake, as
// New (and a configuration) checks them first.
func NewBreaker(o BreakerOptions, onChange func(from, to State)) *Breaker {
	if err := o.check(); err != nil {
		panic(err.Error())
	}
	return &Breaker{opts: o, onChange: onChange}
}

// State returns the current state.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// Allow reports whether a call may go to the store at now and, when it may,
// the ticket the call reports its result with. In the half-open state
// exactly one caller (the probe) is allowed until it reports back.
func (b *Breaker) Allow(now time.Time) (Ticket, bool) {
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
	if b.state == Closed {
		t := Ticket{gen: b.gen, probe: probe}
		b.mu.Unlock()
		return t, true
	}
	defer b.notify()
	defer b.mu.Unlock()
	if b.state == Open {
		if now.Sub(b.openedAt) < b.opts.OpenFor {
			return Ticket{}, false
		}
		b.set(HalfOpen)
	} else if b.probing { // half-open: one probe at a time
		return Ticket{}, false
	}
	b.probing = true
	return Ticket{gen: b.gen, probe: true}, true
}

// Success records that the call holding t worked.
func (b *Breaker) Success(t Ticket) {
	b.mu.Lock()
	if t.gen != b.gen || b.state == Closed {
		// Another generation's result says nothing now; a closed
		// breaker's success resets the count.
		if t.gen == b.gen {
			b.failures = 0
		}
		b.mu.Unlock()
		return
	}
	defer b.notify()
	defer b.mu.Unlock()
	if b.state == HalfOpen && t.probe {
		b.probing = false
		b.set(Closed)
	}
}

// Failure records that the call holding t failed or timed out at now.
func (b *Breaker) Failure(t Ticket, now time.Time) {
	b.mu.Lock()
	if t.gen != b.gen || b.state == Open || (b.state == HalfOpen && !t.probe) {
		b.mu.Unlock()
		return
	}
	if b.state == Closed && !t.probe {
		if b.failures++; b.failures < b.opts.Failures {
			b.mu.Unlock()
			return
		}
	}
	defer b.notify()
	defer b.mu.Unlock()
	b.probing = false
	b.openedAt = now
	b.set(Open)
}

// Release ends a call that neither succeeded nor failed (the caller gave
// up). When it held the probe slot, another caller may probe.
func (b *Breaker) Release(t Ticket) {
	if !t.probe {
		return
	}
	b.mu.Lock()
	if t.gen == b.gen && b.state == HalfOpen {
		b.probing = false
	}
	b.mu.Unlock()
}

// set moves to a new state and generation, under mu, and queues the
// transition for onChange.
func (b *Breaker) set(to State) {
	from := b.state
	b.state, b.failures = to, 0
	b.gen++
	if b.onChange != nil && from != to {
		b.pending = append(b.pending, transition{from, to})
	}
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
