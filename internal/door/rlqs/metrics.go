package rlqs

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the quota door's. Their labels name outcomes and configured
// limits only (domain and the limit's name, or its place in the tree):
// never a bucket_id's value, which Envoy builds from the requests.
type metrics struct {
	streams     prometheus.Gauge
	reports     prometheus.Counter
	malformed   *prometheus.CounterVec // by reason
	assignments *prometheus.CounterVec // by strategy
	allowAll    *prometheus.CounterVec // by reason
	requests    *prometheus.CounterVec // by domain, limit, outcome
	storeErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, ls *ledgers) *metrics {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_rlqs_streams",
			Help: "Open rate limit quota streams (StreamRateLimitQuotas): one per Envoy and domain.",
		}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_rlqs_reports_total",
			Help: "Usage reports received on the rate limit quota streams.",
		}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rlqs_malformed_reports_total",
			Help: "Usage reports that ended their stream with INVALID_ARGUMENT, by reason: no_domain, domain_changed, empty_bucket_id.",
		}, []string{"reason"}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rlqs_assignments_total",
			Help: "Bucket actions sent to Envoys, by strategy: token_bucket, allow_all, deny_all (a limit of 0), abandon (a limit that disappeared).",
		}, []string{"strategy"}),
		allowAll: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rlqs_allow_all_total",
			Help: "Buckets answered with a blanket ALLOW_ALL, by reason: no_limit (no configured limit selects the bucket), unlimited, shadow (a shadow-mode limit), too_many_buckets.",
		}, []string{"reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rlqs_requests_total",
			Help: "Requests Envoys reported deciding under a configured limit, by domain, limit and outcome: allowed, denied, shadow_allowed, shadow_denied (what the share would have denied).",
		}, []string{"domain", "limit", "outcome"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_rlqs_store_errors_total",
			Help: "Reports the shared store could not count (or counted degraded, without the shared store): their shares divide the last fleet read.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.reports, m.malformed, m.assignments, m.allowAll, m.requests, m.storeErrors, fleetCollector{ls})
	}
	return m
}

// count adds one report's counts of a limit.
func (m *metrics) count(domain, limit string, shadow bool, allowed, denied uint64) {
	a, d := "allowed", "denied"
	if shadow {
		a, d = "shadow_allowed", "shadow_denied"
	}
	if allowed > 0 {
		m.requests.WithLabelValues(domain, limit, a).Add(float64(allowed))
	}
	if denied > 0 {
		m.requests.WithLabelValues(domain, limit, d).Add(float64(denied))
	}
}

var (
	demandDesc = prometheus.NewDesc("floodgate_rlqs_demand",
		"Requests a second the fleet's Envoys ask for under a limit (allowed and denied), its buckets added up, as this replica last read the shared store and its own Envoys' reports.",
		[]string{"domain", "limit"}, nil)
	admittedDesc = prometheus.NewDesc("floodgate_rlqs_admitted",
		"Requests a second the fleet's Envoys admitted under a limit, its buckets added up, as of each Envoy's latest report, as this replica last read the shared store.",
		[]string{"domain", "limit"}, nil)
	shareDesc = prometheus.NewDesc("floodgate_rlqs_share",
		"Requests a second this replica's Envoys are assigned under a limit, its buckets added up.",
		[]string{"domain", "limit"}, nil)
	envoysDesc = prometheus.NewDesc("floodgate_rlqs_envoys",
		"Envoys reporting a limit's buckets to this replica (an Envoy counted once per bucket).",
		[]string{"domain", "limit"}, nil)
	bucketsDesc = prometheus.NewDesc("floodgate_rlqs_buckets",
		"Buckets (distinct bucket_ids) of a limit this replica follows.",
		[]string{"domain", "limit"}, nil)
)

// fleetCollector reads the ledgers at each scrape.
type fleetCollector struct{ ls *ledgers }

func (fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{demandDesc, admittedDesc, shareDesc, envoysDesc, bucketsDesc} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ domain, limit string }
	type sum struct{ demand, admitted, share, envoys, buckets float64 }
	sums := map[key]*sum{}
	for _, l := range c.ls.all() {
		l.mu.Lock()
		k := key{l.domain, l.q.Name}
		s := sums[k]
		if s == nil {
			s = &sum{}
			sums[k] = s
		}
		s.buckets++
		local := 0.0
		for _, e := range l.envoys {
			s.share += e.share
			s.envoys++
			local += e.assumed
		}
		s.demand += l.elsewhere.Demand + local
		s.admitted += l.admitted
		l.mu.Unlock()
	}
	for k, s := range sums {
		ch <- prometheus.MustNewConstMetric(demandDesc, prometheus.GaugeValue, s.demand, k.domain, k.limit)
		ch <- prometheus.MustNewConstMetric(admittedDesc, prometheus.GaugeValue, s.admitted, k.domain, k.limit)
		ch <- prometheus.MustNewConstMetric(shareDesc, prometheus.GaugeValue, s.share, k.domain, k.limit)
		ch <- prometheus.MustNewConstMetric(envoysDesc, prometheus.GaugeValue, s.envoys, k.domain, k.limit)
		ch <- prometheus.MustNewConstMetric(bucketsDesc, prometheus.GaugeValue, s.buckets, k.domain, k.limit)
	}
}
