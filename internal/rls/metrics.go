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
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.limits, m.storeErrors)
	}
	return m
}

// count records one answered request and its decision.
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
		short := it.Kind == Never || !res[it.Bucket].Allowed
		result := "allowed"
		switch {
		case it.Shadow && short:
			result = "shadow_denied"
		case it.Shadow:
			result = "shadow_allowed"
		case resp.Statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			result = "denied"
		}
		m.limits.WithLabelValues(it.Limit.Domain, metricName(it.Limit), result).Inc()
	}
}

// metricName is a limit's limit label: its name, or its place in the tree
// when unnamed.
func metricName(lim *Limit) string {
	if lim.Name != "" {
		return lim.Name
	}
	return lim.Key
}
