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

// Breaker is a circuit breaker on the store: after Failures consecutive
// failures it opens and no call reaches the store; after OpenFor it lets one
// probe through (half-open); the probe's success closes it, its failure
// opens it again. Time is passed in, so tests drive it with a manual clock.
// Safe for concurrent use; the closed path is one atomic load.
type Breaker struct {
	opts     BreakerOptions
	state    atomic.Int32
	failures atomic.Int32

	mu       sync.Mutex
	openedAt time.Time
	probing  bool
	onChange func(from, to State)
}

// NewBreaker returns a closed breaker. onChange, if not nil, is called on
// every transition (under the breaker's lock: keep it short).
func NewBreaker(o BreakerOptions, onChange func(from, to State)) *Breaker {
	if o.Failures <= 0 {
		o.Failures = 5
	}
	if o.OpenFor <= 0 {
		o.OpenFor = 500 * time.Millisecond
	}
	return &Breaker{opts: o, onChange: onChange}
}

// State returns the current state.
func (b *Breaker) State() State { return State(b.state.Load()) }

// Allow reports whether a call may go to the store at now. In the half-open
// state exactly one caller (the probe) is allowed until it reports back.
func (b *Breaker) Allow(now time.Time) bool {
	if State(b.state.Load()) == Closed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case Closed:
		return true
	case Open:
		if now.Sub(b.openedAt) < b.opts.OpenFor {
			return false
		}
		b.set(HalfOpen)
		b.probing = true
		return true
	default: // half-open: one probe at a time
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
}

// Success records a call that worked.
func (b *Breaker) Success() {
	if State(b.state.Load()) == Closed {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures.Store(0)
	b.probing = false
	if State(b.state.Load()) != Closed {
		b.set(Closed)
	}
}

// Failure records a call that failed or timed out at now.
func (b *Breaker) Failure(now time.Time) {
	if State(b.state.Load()) == Closed && int(b.failures.Add(1)) < b.opts.Failures {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case Closed:
		if int(b.failures.Load()) >= b.opts.Failures {
			b.openedAt = now
			b.set(Open)
		}
	case HalfOpen:
		b.probing = false
		b.openedAt = now
		b.set(Open)
	}
}

// Release ends a probe that neither succeeded nor failed (the caller gave
// up), so another caller may probe.
func (b *Breaker) Release() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *Breaker) set(to State) {
	from := State(b.state.Swap(int32(to)))
	if from != to && b.onChange != nil {
		b.onChange(from, to)
	}
}
