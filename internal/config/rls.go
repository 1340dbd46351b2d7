package config

import "sort"

// RLS serves Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService) on listen.grpc beside
// Check, from limits written in envoyproxy/ratelimit's own format
// (docs/ratelimit.md), which internal/rls reads.
type RLS struct {
	// Config names a file, or a directory of *.yaml files, in
	// envoyproxy/ratelimit's format, read unchanged; "" serves no rate
	// limit service. Reloaded with the configuration.
	Config string `yaml:"config"`
	// OnFailure is what a request answers when the store cannot decide:
	// "store" (the default) as store.on_failure says; "error" an RPC error
	// (UNAVAILABLE), so that the failure_mode_deny of Envoy's rate limit
	// filter decides.
	OnFailure string `yaml:"on_failure"`
	// Headers adds the draft-ietf-httpapi-ratelimit-headers RateLimit and
	// RateLimit-Policy fields to every answer (off: Envoy's own
	// enable_x_ratelimit_headers builds X-RateLimit-* from the statuses).
	Headers bool `yaml:"headers"`
	// Burst gives a limit a capacity other than its requests_per_unit,
	// keeping its rate: the key is the limit's place in the tree, its
	// domain then each level's key or key_value joined by dots
	// (edge.generic_key_api.api_key), so the shared YAML stays as
	// envoyproxy/ratelimit reads it.
	Burst map[string]int64 `yaml:"burst"`
}

func (v *validator) checkRLS(r *RLS) {
	v.oneOf("rls.on_failure", &r.OnFailure, "store", "store", "error")
	keys := make([]string, 0, len(r.Burst))
	for k := range r.Burst {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if n := r.Burst[k]; n < 1 || n > 1<<32 {
			v.at("rls.burst."+k, "must be a whole number of requests from 1 to 4294967296 (got %d)", n)
		}
	}
	if r.Config == "" && (len(r.Burst) > 0 || r.Headers || r.OnFailure != "store") {
		v.at("rls", "config is required: it names the limits (a file or directory in envoyproxy/ratelimit's format) the other rls settings apply to")
	}
}
