package rls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// metrics are the rate limit service's counters. Their labels name
// outcomes and configured limits only (domain and the limit's name, or its
// place in the tree when unnamed): never a descriptor's value.
type metrics struct {
	requests    *prometheus.CounterVec // by outcome
	limits      *prometheus.CounterVec // by domain, limit, result
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
	return m
}

// count records one answered request and its decision: per configured
// limit, denied when its status is over the limit, allowed when the answer
// is OK; the limits a denied answer did not deny are not counted (their
// takes paid nothing), as Check's metric and /debug/limited count, except
// charges and refunds, which applied whatever the answer. A shadow limit
// counts shadow_denied when it would have denied, shadow_allowed otherwise,
// each on its own; nothing when the shadow store failed.
func (m metrics) count(p *Plan, resp *rlsv3.RateLimitResponse, res []limiter.Result, d *decide.Decision) {
	outcome := "allowed"
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		outcome = "denied"
	}
	if d.Degraded {
		outcome = "degraded_" + outcome
	}
	m.requests.WithLabelValues(outcome).Inc()
	for i := range p.Items {
		it := &p.Items[i]
		if it.Limit == nil || (it.Kind != Bucketed && it.Kind != Never) {
			continue
		}
		result, counted := p.result(i, resp, res, d)
		if counted {
			m.limits.WithLabelValues(it.Limit.Domain, metricName(it.Limit), result).Inc()
		}
	}
}

// result is how item i of an answered plan is counted (allowed, denied,
// shadow_allowed, shadow_denied), and whether it is: see metrics.count.
func (p *Plan) result(i int, resp *rlsv3.RateLimitResponse, res []limiter.Result, d *decide.Decision) (string, bool) {
	it := &p.Items[i]
	over, _, _ := p.outcome(it, res)
	switch {
	case it.Shadow && it.Kind == Bucketed && d.ShadowErr != nil:
		return "", false
	case it.Shadow && over:
		return "shadow_denied", true
	case it.Shadow:
		return "shadow_allowed", true
	case resp.Statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT:
		return "denied", true
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && p.requestOf(it) == limiter.Take:
		return "", false
	}
	return "allowed", true
}

// requestOf is what item asks of its bucket, as decided (several
// descriptors of one bucket are one request).
func (p *Plan) requestOf(it *Item) limiter.Kind {
	if it.Kind == Bucketed {
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
