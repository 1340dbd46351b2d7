package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/memory"
)

// TestClassify pins how every door counts a unit: the table is the one
// floodgate_decisions_total and floodgate_rls_decisions_total document.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name   string
		u      Unit
		denied bool
		want   Result
	}{
		{"an allowed take", Unit{Kind: limiter.Take}, false, Allowed},
		{"the take that denied", Unit{Kind: limiter.Take, Over: true}, true, Denied},
		{"a take beside the denial paid nothing", Unit{Kind: limiter.Take}, true, Uncounted},
		{"a charge beside a denial applied", Unit{Kind: limiter.Charge}, true, Allowed},
		{"a refund beside a denial applied", Unit{Kind: limiter.Refund}, true, Allowed},
		{"a charge that overdrew", Unit{Kind: limiter.Charge, Over: true}, true, Denied},
		{"a shadow unit that could pay, in a denial", Unit{Shadow: true, Kind: limiter.Take}, true, ShadowAllowed},
		{"a shadow unit that would deny", Unit{Shadow: true, Over: true, Kind: limiter.Take}, false, ShadowDenied},
		{"a shadow unit whose store failed", Unit{Shadow: true, Failed: true, Over: true}, false, Uncounted},
		{"an enforced unit whose store failed", Unit{Failed: true, Over: true}, true, Uncounted},
	} {
		if got := Classify(tc.u, tc.denied); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// failing is a store that cannot decide, as a Redis past its timeout.
type failing struct{}

func (failing) Take(context.Context, []limiter.Request, []limiter.Result) (bool, error) {
	return false, errors.New("redis: i/o timeout")
}

func limitOf(t *testing.T, capacity int64) limiter.Limit {
	t.Helper()
	r, err := limiter.PerSecond(1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.NewLimit(capacity, r)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFailureIsAnsweredOnce: the failure mode's outcome, per mode, with
// and without a door-wide shadow mode, and how a door's requests metric
// counts it.
func TestFailureIsAnsweredOnce(t *testing.T) {
	for _, tc := range []struct {
		f       decide.OnFailure
		shadow  bool
		want    Outcome
		counted string
	}{
		{decide.Allow, false, Outcome{Answer: Allow, Failed: true, Degraded: true}, OutcomeDegradedAllowed},
		{decide.Deny, false, Outcome{Answer: Deny, Failed: true, Degraded: true, RetryAfter: 3 * time.Second}, OutcomeDegradedDenied},
		{decide.Deny, true, Outcome{Answer: Allow, Failed: true, Degraded: true, Shadowed: true, RetryAfter: 3 * time.Second}, OutcomeDegradedDenied},
		{decide.Error, false, Outcome{Answer: Error, Failed: true, Degraded: true}, OutcomeError},
	} {
		p := New(Options{Store: failing{}, OnFailure: tc.f, FailureRetryAfter: 3 * time.Second, ShadowMode: tc.shadow})
		if got := p.Failure(); got != tc.want {
			t.Errorf("%v shadow %v: %+v, want %+v", tc.f, tc.shadow, got, tc.want)
		}
		vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"outcome"})
		NewOutcomes(vec).Count(p.Failure())
		if n := testutil.ToFloat64(vec.WithLabelValues(tc.counted)); n != 1 {
			t.Errorf("%v shadow %v: counted %v as %s, want 1", tc.f, tc.shadow, n, tc.counted)
		}
	}
}

// TestDecideCountsAndLogsAStoreThatCannotDecide: the enforced store's
// error is the failure mode's outcome, counted once and logged with what
// the door says about the request; nothing is charged.
func TestDecideCountsAndLogsAStoreThatCannotDecide(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "errors"})
	p := New(Options{Store: failing{}, OnFailure: decide.Deny, FailureRetryAfter: time.Second, StoreErrors: errs, Logger: zap.New(core)})
	plan := []decide.Bucket{{Request: limiter.Request{Name: "p", ID: "a", Limit: limitOf(t, 5), Cost: 1}}}
	res := make([]limiter.Result, 1)
	var d decide.Decider
	dec, out := p.Decide(context.Background(), &d, plan, res, zap.String("path", "/x"))
	if dec.Err == nil || !out.Failed || out.Answer != Deny || !out.Degraded {
		t.Fatalf("a failing store: %+v %+v", dec, out)
	}
	if n := testutil.ToFloat64(errs); n != 1 {
		t.Errorf("store errors %v, want 1", n)
	}
	l := logs.FilterMessage("store could not decide; failure mode answers").All()
	if len(l) != 1 || l[0].ContextMap()["path"] != "/x" {
		t.Errorf("logs: %v", logs.All())
	}
	if r := ClassifyBucket(plan[0], &res[0], &dec); r != Uncounted {
		t.Errorf("the failed bucket is counted %v", r)
	}
}

// TestDecideWithShadowModeAdmitsADenial: rls.shadow_mode's outcome is an
// admitted denial, counted as denied, the bucket charged as without it.
func TestDecideWithShadowModeAdmitsADenial(t *testing.T) {
	st := memory.New(memory.Options{MaxBuckets: 16, Shards: 1})
	p := New(Options{Store: st}).WithShadowMode(true)
	plan := []decide.Bucket{{Request: limiter.Request{Name: "p", ID: "a", Limit: limitOf(t, 1), Cost: 1}}}
	var d decide.Decider
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"outcome"})
	o := NewOutcomes(vec)
	fam := NewFamily("p", false, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decisions"}, []string{"policy", "result"}), []string{"p"}, nil, "")
	var got []string
	for range 2 {
		res := make([]limiter.Result, 1)
		dec, out := p.Decide(context.Background(), &d, plan, res, zap.Skip())
		o.Count(out)
		r := ClassifyBucket(plan[0], &res[0], &dec)
		fam.Count(r, time.Time{}, "a", nil)
		got = append(got, r.String())
		if out.Answer != Allow {
			t.Errorf("shadow mode refused a request: %+v", out)
		}
	}
	if got[0] != "allowed" || got[1] != "denied" {
		t.Errorf("results %v, want allowed then denied", got)
	}
	if a, d := testutil.ToFloat64(vec.WithLabelValues(OutcomeAllowed)), testutil.ToFloat64(vec.WithLabelValues(OutcomeDenied)); a != 1 || d != 1 {
		t.Errorf("requests counted allowed %v denied %v, want 1 and 1", a, d)
	}
}

// TestOutcomesMakeOnlyTheSeriesAsked: the eager labels show at 0, the
// others only once counted, so a door's metric shows the outcomes it can
// come to.
func TestOutcomesMakeOnlyTheSeriesAsked(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"outcome"})
	o := NewOutcomes(vec, OutcomeAllowed, OutcomeUnmatched)
	if n := testutil.CollectAndCount(vec); n != 2 {
		t.Errorf("%d series at start, want 2", n)
	}
	o.Count(Outcome{Answer: Deny})
	o.Count(Outcome{Answer: ShadowOnly})
	if n := testutil.CollectAndCount(vec); n != 3 {
		t.Errorf("%d series after a denial, want 3", n)
	}
	if n := testutil.ToFloat64(vec.WithLabelValues(OutcomeAllowed)); n != 1 {
		t.Errorf("a shadow-only request counted %v allowed, want 1", n)
	}
}

// TestNewPanicsOnDenyWithoutAWait: a failure mode of deny without a
// Retry-After is a door's programming error.
func TestNewPanicsOnDenyWithoutAWait(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	New(Options{OnFailure: decide.Deny})
}
