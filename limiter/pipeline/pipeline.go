// Package pipeline is what every door runs between its plan and its
// render: a door turns its wire request into decide.Buckets (its plan),
// hands them to a Pipeline, and renders the Outcome it gets back on its
// own wire. Everything in between is here, once: the decide step, the
// failure mode (answered here, rendered by the door), how each counted
// unit of a decision is classified (a typed Result, computed once and read
// by the render, the metrics and the report of who is limited), a door-wide
// shadow mode, the degraded mark, the store error count and the logs.
//
// A door's metrics keep their own names (dashboards and alerts depend on
// them): it resolves its counters into Families and Outcomes once per
// configuration, and the pipeline feeds them.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// Answer is what a request came to, for its door to render.
type Answer uint8

const (
	// Unmatched: no bucket applied; the request passes untouched.
	Unmatched Answer = iota
	// ShadowOnly: only shadow buckets applied, which never deny; the
	// request passes untouched.
	ShadowOnly
	// Allow: the request passes with what its buckets say.
	Allow
	// Deny: the request is over a limit.
	Deny
	// Error: the store could not decide and the failure mode is
	// decide.Error: the door answers with its transport's error, so that
	// its caller's own failure mode decides.
	Error
)

// Outcome is a request's decision, ready to render.
type Outcome struct {
	Answer Answer
	// Failed: the store could not decide (or the request could not be
	// read or planned) and the failure mode gave the answer; the
	// buckets' results are zero.
	Failed bool
	// Degraded: the answer is marked x-ratelimit-degraded: Failed, or an
	// enforced bucket was decided by the per-replica fallback.
	Degraded bool
	// Shadowed: a door-wide shadow mode (rls.shadow_mode) turned a Deny
	// into this Allow: the door renders the over-limit details and admits
	// the request.
	Shadowed bool
	// RetryAfter is a failed Deny's wait (store.failure_retry_after).
	RetryAfter time.Duration
}

// Denied reports whether the decision was a denial before a shadow mode
// admitted it: what a door's request counter counts.
func (o Outcome) Denied() bool { return o.Answer == Deny || o.Shadowed }

// Options configure a Pipeline. Stores and failure mode are every door's
// own setting; the store error counter and the log are the door's.
type Options struct {
	// Store decides the enforced buckets; ShadowStore the shadow ones
	// (default: Store).
	Store, ShadowStore limiter.Store
	// OnFailure is what a request gets when the store cannot decide.
	OnFailure decide.OnFailure
	// FailureRetryAfter is a failed Deny's Retry-After: positive with
	// decide.Deny.
	FailureRetryAfter time.Duration
	// ShadowMode admits every request a decision denies (rls.shadow_mode):
	// the buckets are charged and counted as they are without it.
	ShadowMode bool
	// StoreErrors counts decisions the store could not make (nil: none).
	StoreErrors prometheus.Counter
	Logger      *zap.Logger
}

// Pipeline is one door's way from a plan to an outcome. It is safe for
// concurrent use; the Decider it is handed is the caller's, for one
// decision at a time.
type Pipeline struct {
	o Options
}

// New returns a pipeline on o. It panics on a decide.Deny failure mode
// without a positive FailureRetryAfter, a door's programming error.
func New(o Options) *Pipeline {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.ShadowStore == nil {
		o.ShadowStore = o.Store
	}
	switch o.OnFailure {
	case decide.Allow, decide.Error:
	case decide.Deny:
		if o.FailureRetryAfter <= 0 {
			panic(fmt.Sprintf("pipeline: a failure mode of deny needs a positive FailureRetryAfter (got %v)", o.FailureRetryAfter))
		}
	default:
		panic(fmt.Sprintf("pipeline: unknown failure mode %v", o.OnFailure))
	}
	return &Pipeline{o: o}
}

// Failure is the outcome of a request the store could not decide, or the
// door could not read or plan: the failure mode's answer, marked
// degraded.
func (p *Pipeline) Failure() Outcome {
	switch p.o.OnFailure {
	case decide.Deny:
		out := Outcome{Answer: Deny, Failed: true, Degraded: true, RetryAfter: p.o.FailureRetryAfter}
		if p.o.ShadowMode {
			out.Answer, out.Shadowed = Allow, true
		}
		return out
	case decide.Error:
		return Outcome{Answer: Error, Failed: true, Degraded: true}
	}
	return Outcome{Answer: Allow, Failed: true, Degraded: true}
}

// Decide decides plan with d on the pipeline's stores, writing each
// bucket's result to res (len(plan)). A store that could not decide the
// enforced buckets is counted and logged with about (the request, for an
// operator: its path, its domain). The outcome's answer is the enforced
// buckets' (Allow when there are none): the door settles Unmatched and
// ShadowOnly, which only it can tell, and adds what its plan decides
// without a bucket (Decided).
func (p *Pipeline) Decide(ctx context.Context, d *decide.Decider, plan []decide.Bucket, res []limiter.Result, about zap.Field) (decide.Decision, Outcome) {
	d.Store, d.Shadow = p.o.Store, p.o.ShadowStore
	dec := d.Decide(ctx, plan, res)
	d.Store, d.Shadow = nil, nil
	if dec.ShadowErr != nil {
		var sp *decide.ShadowPanic
		if errors.As(dec.ShadowErr, &sp) {
			p.o.Logger.Error("shadow decision panicked", zap.Any("panic", sp.Value), zap.ByteString("stack", sp.Stack))
		} else {
			p.inc(p.o.StoreErrors)
		}
	}
	if dec.Err != nil {
		p.inc(p.o.StoreErrors)
		p.o.Logger.Warn("store could not decide; failure mode answers", zap.Error(dec.Err), about)
		return dec, p.Failure()
	}
	return dec, p.Decided(dec.Allowed, dec.Degraded)
}

// Decided is the outcome of a decision that allowed or not, marked
// degraded or not, with the door-wide shadow mode applied.
func (p *Pipeline) Decided(allowed, degraded bool) Outcome {
	switch {
	case allowed:
		return Outcome{Answer: Allow, Degraded: degraded}
	case p.o.ShadowMode:
		return Outcome{Answer: Allow, Degraded: degraded, Shadowed: true}
	}
	return Outcome{Answer: Deny, Degraded: degraded}
}

func (p *Pipeline) inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

// WithShadowMode is p with rls.shadow_mode as on says, sharing the rest.
func (p *Pipeline) WithShadowMode(on bool) *Pipeline {
	if p.o.ShadowMode == on {
		return p
	}
	q := *p
	q.o.ShadowMode = on
	return &q
}
