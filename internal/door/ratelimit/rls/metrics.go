package rls

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/pipeline"
)

// metrics are the rate limit service's counters. Their labels name
// outcomes and configured limits only (domain and the limit's name, or its
// place in the tree when unnamed): never a descriptor's value.
type metrics struct {
	requests    *prometheus.CounterVec // by outcome
	outcomes    *pipeline.Outcomes
	limits      *prometheus.CounterVec // by domain, limit, result: the limits' families
	storeErrors prometheus.Counter
	unplanned   *prometheus.CounterVec // by reason
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rls_requests_total",
			Help: "Rate limit service requests (ShouldRateLimit), by outcome: allowed, denied, degraded_allowed, degraded_denied, error.",
		}, []string{"outcome"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rls_decisions_total",
			Help: "Rate limit service decisions per configured limit (domain, and the limit's name or place in the tree), by result: allowed, denied, shadow_allowed, shadow_denied.",
		}, []string{"domain", "limit", "result"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_rls_store_errors_total",
			Help: "Rate limit service requests the store could not decide (the failure mode answered).",
		}),
		unplanned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rls_unplanned_requests_total",
			Help: "Rate limit service requests the failure mode answered without a decision, by reason: descriptors or entries (more than a request may hold), limit (a limit of its own that cannot be counted exactly).",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.limits, m.storeErrors, m.unplanned)
	}
	m.outcomes = pipeline.NewOutcomes(m.requests)
	return m
}

// classify writes how each descriptor of a decided plan is counted to
// results (len(p.Items)) and reports whether the answer denies (before a
// shadow mode): a descriptor is over its limit when its take could not pay
// or its charge overdrew the bucket (Plan.outcome); a denial's enforced
// takes that were not short paid nothing and go uncounted, as Check's
// policies do, while charges and refunds applied whatever the answer; a
// shadow limit counts shadow_denied when it would have denied,
// shadow_allowed otherwise, each on its own, and nothing when the shadow
// store failed. Descriptors that meet no limit, or an unlimited one, are
// not counted.
func (p *Plan) classify(res []limiter.Result, d *decide.Decision, results []pipeline.Result) (denied bool) {
	// First whether each counted descriptor is over (kept in results as
	// Denied for now) and so whether the answer denies; then each one's
	// result, which depends on it.
	for i := range p.Items {
		if it := &p.Items[i]; it.Meets == Bucketed || it.Meets == Never {
			if over, _, _ := p.outcome(it, res); over {
				results[i] = pipeline.Denied
				denied = denied || !it.Shadow
			}
		}
	}
	for i := range p.Items {
		it := &p.Items[i]
		if it.Meets != Bucketed && it.Meets != Never {
			continue
		}
		u := pipeline.Unit{Shadow: it.Shadow, Failed: it.Shadow && it.Meets == Bucketed && d.ShadowErr != nil,
			Over: results[i] == pipeline.Denied, Kind: p.requestOf(it)}
		results[i] = pipeline.Classify(u, denied)
	}
	return denied
}

// requestOf is what item asks of its bucket, as decided (several
// descriptors of one bucket are one request).
func (p *Plan) requestOf(it *Item) limiter.Kind {
	if it.Meets == Bucketed {
		return p.Buckets[it.Bucket].Request.Kind
	}
	return it.Request
}

// metricName is a limit's limit label: its name, or its place in the tree
// when unnamed.
func metricName(lim *Limit) string {
	if lim.Name != "" {
		return lim.Name
	}
	return lim.Key
}
