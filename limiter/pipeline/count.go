package pipeline

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// Result is how one counted unit of a decided request (a policy's bucket,
// a descriptor) is counted: the label of a door's decisions metric, and
// what the report of who is limited hears.
type Result uint8

const (
	// Uncounted: the unit took part in a decision that did not count it:
	// an enforced take of a denial it did not cause (it paid nothing), or a
	// shadow unit whose store failed.
	Uncounted Result = iota
	Allowed
	Denied
	// ShadowAllowed and ShadowDenied: a shadow unit, which never denies,
	// could pay, or would have denied.
	ShadowAllowed
	ShadowDenied
)

// String is the result as metrics label it.
func (r Result) String() string {
	switch r {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case ShadowAllowed:
		return "shadow_allowed"
	case ShadowDenied:
		return "shadow_denied"
	}
	return "uncounted"
}

// Unit is what a door knows of one counted unit once its plan is decided.
type Unit struct {
	// Shadow: the unit is a shadow one. Failed: its store could not
	// decide it.
	Shadow, Failed bool
	// Over: its bucket could not pay, or its charge overdrew the bucket
	// (or, without a bucket, it can never pass).
	Over bool
	// Kind is what it asked of its bucket.
	Kind limiter.Kind
}

// Classify is how u is counted in a request whose enforced answer was
// denied or not. Each shadow unit decides on its own (decide.Decider);
// enforced charges, refunds and looks applied whatever the answer, so only
// an enforced take of a denial it did not cause goes uncounted.
func Classify(u Unit, denied bool) Result {
	switch {
	case u.Failed:
		return Uncounted
	case u.Shadow && u.Over:
		return ShadowDenied
	case u.Shadow:
		return ShadowAllowed
	case u.Over:
		return Denied
	case denied && u.Kind == limiter.Take:
		return Uncounted
	}
	return Allowed
}

// ClassifyBucket is Classify for a unit that is one bucket of a decided
// plan, with r its result and d the decision (a policy's bucket).
func ClassifyBucket(b decide.Bucket, r *limiter.Result, d *decide.Decision) Result {
	over := !r.Allowed
	if b.Request.Kind == limiter.Charge {
		over = r.InDebt
	}
	failed := d.Err != nil
	if b.Shadow {
		failed = d.ShadowErr != nil
	}
	return Classify(Unit{Shadow: b.Shadow, Failed: failed, Over: over, Kind: b.Request.Kind}, !d.Allowed)
}

// Family is a kind of unit a door counts and reports apart: a policy, a
// configured limit. A door resolves its families once per configuration,
// so a decision hashes no label.
type Family struct {
	// Name names the family in logs.
	Name   string
	Shadow bool
	// counts are the door's decisions metric's series, by Result, each
	// resolved when first counted unless NewFamily resolved it (nil vec:
	// not counted).
	counts [ShadowDenied + 1]atomic.Value // prometheus.Counter
	vec    *prometheus.CounterVec
	labels []string
	tally  decide.Tally
}

// NewFamily is a family counted in vec (nil: not counted), whose labels
// are labels then the result, and reported to r's tally name (nil r: not
// reported).
func NewFamily(name string, shadow bool, vec *prometheus.CounterVec, labels []string, r decide.Recorder, tally string) *Family {
	f := NewLazyFamily(name, shadow, vec, labels, r, tally)
	if vec != nil {
		for _, res := range []Result{Allowed, Denied, ShadowAllowed, ShadowDenied} {
			f.counter(res)
		}
	}
	return f
}

// NewLazyFamily is NewFamily with each series of vec made when first
// counted: for a door whose families run to thousands (the rate limit
// service's limits), most of them never met.
func NewLazyFamily(name string, shadow bool, vec *prometheus.CounterVec, labels []string, r decide.Recorder, tally string) *Family {
	f := &Family{Name: name, Shadow: shadow, vec: vec, labels: labels}
	if r != nil {
		f.tally = r.Tally(tally, shadow)
	}
	return f
}

// counter is f's series for r, made the first time.
func (f *Family) counter(r Result) prometheus.Counter {
	if c, ok := f.counts[r].Load().(prometheus.Counter); ok {
		return c
	}
	c := f.vec.WithLabelValues(append(f.labels[:len(f.labels):len(f.labels)], r.String())...)
	f.counts[r].Store(c)
	return c
}

// Count feeds one unit's result to the family's counter and tally at now
// (for the tally; the zero time when there is none, Reporting). id is the
// unit's bucket identity and name labels its caller, read only if the
// tally starts following it.
func (f *Family) Count(r Result, now time.Time, id string, name decide.Namer) {
	if r == Uncounted {
		return
	}
	if f.vec != nil {
		f.counter(r).Inc()
	}
	if f.tally != nil {
		f.tally.Record(now, id, name, r == Denied || r == ShadowDenied)
	}
}

// Reporting reports whether the family has a tally to tell, so that a
// door reads the clock only when one listens.
func (f *Family) Reporting() bool { return f.tally != nil }

// LogShadowDenied logs a shadow unit's would-be denial: who, how long it
// would have waited, and about the request.
func (p *Pipeline) LogShadowDenied(f *Family, id string, retryAfter time.Duration, about zap.Field) {
	p.o.Logger.Info("shadow policy would deny", zap.String("policy", f.Name),
		zap.String("identity", id), zap.Duration("retry_after", retryAfter), about)
}

// Debugging reports whether the log takes debug lines, so that a door
// gathers what LogDenied says only when it is read.
func (p *Pipeline) Debugging() bool { return p.o.Logger.Core().Enabled(zap.DebugLevel) }

// LogDenied logs, at debug level, the denial unit f made.
func (p *Pipeline) LogDenied(f *Family, id string, retryAfter time.Duration, about zap.Field) {
	p.o.Logger.Debug("denied", zap.String("policy", f.Name), zap.String("identity", id),
		zap.Duration("retry_after", retryAfter), about)
}

// Outcomes are a door's requests metric's series, by what its requests
// came to.
type Outcomes struct {
	vec    *prometheus.CounterVec
	series [len(outcomeLabels)]atomic.Value // prometheus.Counter, made when first counted
}

// Outcome labels of a door's requests metric.
const (
	OutcomeAllowed         = "allowed"
	OutcomeDenied          = "denied"
	OutcomeUnmatched       = "unmatched"
	OutcomeDegradedAllowed = "degraded_allowed"
	OutcomeDegradedDenied  = "degraded_denied"
	OutcomeError           = "error"
)

var outcomeLabels = [...]string{OutcomeAllowed, OutcomeDenied, OutcomeUnmatched, OutcomeDegradedAllowed, OutcomeDegradedDenied, OutcomeError}

// NewOutcomes counts a door's requests in vec, whose one label is the
// outcome. The series of eager are made at once (the metric shows them
// at 0); the others when first counted.
func NewOutcomes(vec *prometheus.CounterVec, eager ...string) *Outcomes {
	o := &Outcomes{vec: vec}
	for _, l := range eager {
		for i, name := range outcomeLabels {
			if name == l {
				o.counter(i)
			}
		}
	}
	return o
}

func (o *Outcomes) counter(i int) prometheus.Counter {
	if c, ok := o.series[i].Load().(prometheus.Counter); ok {
		return c
	}
	c := o.vec.WithLabelValues(outcomeLabels[i])
	o.series[i].Store(c)
	return c
}

// Count counts one request's outcome. A shadow-only request counts as
// allowed, as a door-wide shadow mode's admitted denial counts as denied.
func (o *Outcomes) Count(out Outcome) {
	i := 0 // allowed
	switch {
	case out.Answer == Unmatched:
		i = 2
	case out.Answer == Error:
		i = 5
	case out.Denied() && out.Degraded:
		i = 4
	case out.Denied():
		i = 1
	case out.Degraded:
		i = 3
	}
	o.counter(i).Inc()
}
