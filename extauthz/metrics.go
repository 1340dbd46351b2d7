package extauthz

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the server's Prometheus collectors. Labels carry policy names
// and outcomes only, never identities: cardinality stays what the
// configuration makes it.
type Metrics struct {
	// Decisions counts policy decisions by policy and result: allowed,
	// denied, shadow_allowed, shadow_denied (would have been denied).
	Decisions *prometheus.CounterVec
	// Checks counts Check calls by outcome: allowed, denied, unmatched,
	// degraded_allowed, degraded_denied. A Check the server had no memory
	// to read in time is answered by the failure mode and counted as
	// degraded (Server.Unread); only one larger than listen.max_request_bytes
	// never reaches the handler: gRPC refuses it, and Envoy applies its own
	// failure mode.
	Checks *prometheus.CounterVec
	// Latency is the time to answer a Check.
	Latency prometheus.Histogram
	// StoreErrors counts decisions the store could not make.
	StoreErrors prometheus.Counter
	// IdentityMissing counts, by policy, requests a policy matched whose
	// key sources were all empty: they shared the policy's one bucket.
	IdentityMissing *prometheus.CounterVec
	// IdentityRepeated counts, by policy, requests whose deciding key
	// header was sent more than once: they shared the policy's one bucket
	// of repeated keys, so rotating a second copy mints no buckets.
	IdentityRepeated *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total",
			Help: "Rate-limit decisions by policy and result (shadow_denied: a shadow policy would have denied).",
		}, []string{"policy", "result"}),
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_checks_total",
			Help: "ext_authz Check calls by outcome.",
		}, []string{"outcome"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floodgate_check_duration_seconds",
			Help:    "Time to answer an ext_authz Check.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_store_errors_total",
			Help: "Decisions the store could not make (the failure mode answered instead).",
		}),
		IdentityMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_identity_missing_total",
			Help: "Requests a policy matched whose key sources were all empty, so they used the policy's shared bucket.",
		}, []string{"policy"}),
		IdentityRepeated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_identity_repeated_total",
			Help: "Requests whose key header was sent more than once, so they used the policy's one bucket of repeated keys.",
		}, []string{"policy"}),
	}
	if reg != nil {
		reg.MustRegister(m.Decisions, m.Checks, m.Latency, m.StoreErrors, m.IdentityMissing, m.IdentityRepeated)
	}
	return m
}

// identityCounters are one policy's identity counters, resolved once per
// engine so a decision does not hash label values (its decisions are
// counted by its pipeline.Family).
type identityCounters struct {
	identityMissing, identityRepeated prometheus.Counter
}

func (m *Metrics) forPolicy(name string) identityCounters {
	return identityCounters{

		identityMissing:  m.IdentityMissing.WithLabelValues(name),
		identityRepeated: m.IdentityRepeated.WithLabelValues(name),
	}
}
