// Package decide is the decide step every front end shares: the ext_authz
// server's Check, its HTTP door, the rate limit service and floodgate
// replay each turn a request into a plan of buckets (which bucket, which
// limit, what it costs, whether it is shadow) and hand it to a Decider,
// which takes the enforced buckets from the store all or nothing and each
// shadow bucket as if it were the only one, never denying. What a front end answers when
// the store cannot decide is its OnFailure; who it limited, it tells a
// Recorder.
package decide

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/floodgate/floodgate/limiter"
)

// Bucket is one bucket of a plan: the request the store is handed for it,
// and whether it is a shadow bucket (decided and counted, never denying).
type Bucket struct {
	Request limiter.Request
	Shadow  bool
}

// Decision is what Decide made of a plan.
type Decision struct {
	// Allowed: every enforced bucket could pay, and paid (true when the
	// plan has no enforced bucket). False with Err when the store could not
	// decide.
	Allowed bool
	// Err is the enforced store's error: nothing was taken from the
	// enforced buckets, and their results are zero.
	Err error
	// ShadowAllowed: every shadow bucket could pay (true when the plan has
	// none, or when the shadow store failed). Each shadow bucket decides on
	// its own, as if it were the only shadow bucket: its result's Allowed
	// says whether it paid, whatever the others did.
	ShadowAllowed bool
	// ShadowErr is the shadow store's error, or a *ShadowPanic: the shadow
	// buckets' results are zero. It never changes Allowed.
	ShadowErr error
	// Degraded: an enforced bucket was decided without the shared store
	// (the per-replica fallback while Redis is unreachable): the answer is
	// right in shape, not exact across replicas.
	Degraded bool
}

// ShadowPanic is the ShadowErr of a shadow decision that panicked on a
// goroutine of its own (Decider.Concurrent), caught there so that a bug
// in a shadow policy's store cannot take the process down.
type ShadowPanic struct {
	Value any
	Stack []byte
}

func (p *ShadowPanic) Error() string { return fmt.Sprintf("shadow decision panicked: %v", p.Value) }

// Decider takes a plan from the stores: the enforced buckets in one
// all-or-nothing Take, each shadow bucket in a Take of its own, so that it
// decides as if it were the only shadow bucket (a shadow bucket's would-be
// denial is its own, never caused by another's); the shadow Takes run at
// the same time, costing one round trip together. Its working memory is
// reused, and holds up to MaxInline buckets of each kind without
// allocating, so a Decider is for one decision at a time: keep one per
// goroutine, or pool them.
type Decider struct {
	Store limiter.Store
	// Shadow decides the shadow buckets (default: Store).
	Shadow limiter.Store
	// Concurrent decides the shadow buckets on a goroutine of their own
	// while the enforced ones are decided, so that a decision waits for at
	// most one store round trip (or timeout), whatever its policies: as
	// Check serves. Off, the two Takes run one after the other on the
	// caller's goroutine (replay, whose in-memory store answers at once).
	Concurrent bool

	enforced, shadow take
	inline           [2]takeArrays
	each             [MaxInline]shadowTake // the shadow buckets' Takes

	// The concurrent shadow Take: runShadow is takeShadow bound once, so
	// starting it allocates nothing; ctx is the decision's context while it
	// runs.
	runShadow func()
	ctx       context.Context
	done      sync.WaitGroup
}

// take is one Take's requests, their results, and where each came from in
// the plan.
type take struct {
	reqs    []limiter.Request
	res     []limiter.Result
	at      []int
	allowed bool
	err     error
}

// takeArrays back a take's slices for up to MaxInline buckets.
type takeArrays struct {
	reqs [MaxInline]limiter.Request
	res  [MaxInline]limiter.Result
	at   [MaxInline]int
}

// MaxInline is how many buckets of each kind (enforced, shadow) a Decider
// decides in memory it already has; a front end sizes its own inline
// arrays by it.
const MaxInline = 8

// Decide decides plan and writes each bucket's result to res (len(plan)),
// in plan order. The enforced and the shadow buckets are decided whatever
// the other's outcome.
func (d *Decider) Decide(ctx context.Context, plan []Bucket, res []limiter.Result) Decision {
	d.split(plan)
	if d.Concurrent && len(d.enforced.reqs) > 0 && len(d.shadow.reqs) > 0 {
		d.takeBoth(ctx)
	} else {
		d.enforced.run(ctx, d.Store)
		d.takeShadowBuckets(ctx)
	}
	dec := Decision{Allowed: d.enforced.allowed, Err: d.enforced.err,
		ShadowAllowed: d.shadow.allowed || d.shadow.err != nil, ShadowErr: d.shadow.err}
	for _, t := range []*take{&d.enforced, &d.shadow} {
		for j, i := range t.at {
			if t.err == nil {
				res[i] = t.res[j]
				dec.Degraded = dec.Degraded || (t == &d.enforced && res[i].Degraded)
			} else {
				res[i] = limiter.Result{}
			}
		}
		clear(t.reqs) // keep no request's strings alive between decisions
	}
	return dec
}

// split sorts plan's buckets into the two takes.
func (d *Decider) split(plan []Bucket) {
	for k, t := range []*take{&d.enforced, &d.shadow} {
		a := &d.inline[k]
		*t = take{reqs: a.reqs[:0], res: a.res[:0], at: a.at[:0]}
	}
	for i := range plan {
		t := &d.enforced
		if plan[i].Shadow {
			t = &d.shadow
		}
		t.reqs, t.at = append(t.reqs, plan[i].Request), append(t.at, i)
	}
}

func (d *Decider) shadowStore() limiter.Store {
	if d.Shadow != nil {
		return d.Shadow
	}
	return d.Store
}

// takeBoth runs the shadow Take beside the enforced one, and returns when
// both are done, panic or not: the shadow Take reads d.
func (d *Decider) takeBoth(ctx context.Context) {
	if d.runShadow == nil {
		d.runShadow = d.takeShadow
	}
	d.ctx = ctx
	d.done.Add(1)
	go d.runShadow()
	defer func() {
		d.done.Wait()
		d.ctx = nil
	}()
	d.enforced.run(ctx, d.Store)
}

// takeShadow is the shadow Take on a goroutine of its own.
func (d *Decider) takeShadow() {
	defer d.done.Done()
	defer func() {
		if p := recover(); p != nil {
			sp, ok := p.(*ShadowPanic) // raised again from a bucket's own Take
			if !ok {
				sp = &ShadowPanic{Value: p, Stack: debug.Stack()}
			}
			d.shadow.allowed, d.shadow.err = true, sp
		}
	}()
	d.takeShadowBuckets(d.ctx)
}

// takeShadowBuckets takes each shadow bucket in a Take of its own, so that
// each decides as if it were the only one. With more than one and
// Concurrent, the Takes run at the same time, each on a goroutine: a
// decision waits for one store round trip however many shadow buckets it
// has (a pipelining store sends Takes in flight together in one). A panic
// in one is raised again here once all are done. t.allowed is "every
// shadow bucket paid"; t.err the first error.
func (d *Decider) takeShadowBuckets(ctx context.Context) {
	t := &d.shadow
	store := d.shadowStore()
	n := len(t.reqs)
	if n <= 1 {
		t.run(ctx, store)
		return
	}
	t.sizeResults()
	each := d.each[:]
	if n > len(each) {
		each = make([]shadowTake, n)
	}
	each = each[:n]
	one := func(j int) { // on a goroutine of its own
		defer func() {
			if p := recover(); p != nil {
				each[j].panicked = &ShadowPanic{Value: p, Stack: debug.Stack()}
			}
		}()
		each[j].ok, each[j].err = store.Take(ctx, t.reqs[j:j+1], t.res[j:j+1])
	}
	if d.Concurrent {
		var wg sync.WaitGroup
		wg.Add(n)
		for j := range n {
			go func() { defer wg.Done(); one(j) }()
		}
		wg.Wait()
	} else {
		for j := range n {
			each[j].ok, each[j].err = store.Take(ctx, t.reqs[j:j+1], t.res[j:j+1])
		}
	}
	t.allowed, t.err = true, nil
	for j := range each {
		if p := each[j].panicked; p != nil {
			clear(each)
			panic(p)
		}
		if each[j].err != nil && t.err == nil {
			t.err = each[j].err
		}
		t.allowed = t.allowed && each[j].ok
	}
	if t.err != nil {
		t.allowed = false
	}
	clear(each)
}

// shadowTake is one shadow bucket's Take of its own.
type shadowTake struct {
	ok       bool
	err      error
	panicked *ShadowPanic
}

// sizeResults gives t a result for each request, in its own array when it
// has room.
func (t *take) sizeResults() {
	if n := len(t.reqs); cap(t.res) >= n {
		t.res = t.res[:n]
	} else {
		t.res = make([]limiter.Result, n)
	}
}

// run takes t's buckets from store: allowed with no error when it has none.
func (t *take) run(ctx context.Context, store limiter.Store) {
	t.allowed, t.err = true, nil
	if len(t.reqs) == 0 {
		return
	}
	t.sizeResults()
	ok, err := store.Take(ctx, t.reqs, t.res)
	if err != nil {
		t.allowed, t.err = false, err
		return
	}
	t.allowed = ok
}
