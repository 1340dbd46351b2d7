package config

import "github.com/floodgate/floodgate/limiter/decide"

// OnFailure is what a front end answers when the store cannot decide, and
// what the request gate answers for it when a request cannot be read in
// time: one mapping of the configuration to decide.OnFailure for every
// front end. store.on_failure: deny denies; allow allows; local lets the
// per-replica fallback decide, and allows when even it cannot. The rate
// limit service alone may answer with an RPC error instead
// (rls.on_failure: error), so that Envoy's ratelimit filter's own
// failure_mode_deny decides; Check never does (Envoy's ext_authz filter
// takes an error for an outage). The HTTP door has its own switch
// (HTTPOnFailure: http_authz.on_failure: error answers 503).
func (c *Config) OnFailure(rateLimitService bool) decide.OnFailure {
	switch {
	case rateLimitService && c.RLS.OnFailure == "error":
		return decide.Error
	case c.Store.OnFailure == "deny":
		return decide.Deny
	}
	return decide.Allow
}
