package decide

import "fmt"

// OnFailure is what a front end answers when the store cannot decide (Redis
// unreachable, too slow, or the circuit breaker open), and when it could
// not even read a request (the server had no memory to spare for it in
// time): the same choice for every front end and for the request gate.
type OnFailure int

const (
	// Allow lets the request through, marked degraded (a header and a
	// metric say the limit was not applied).
	Allow OnFailure = iota
	// Deny answers over the limit, marked degraded, with a short
	// Retry-After.
	Deny
	// Error answers with an RPC error, so that the caller's own failure
	// mode decides: only for a front end whose caller has one worth
	// deferring to (Envoy's rate limit filter and its failure_mode_deny).
	// Envoy's ext_authz filter takes an error for an outage, never a
	// decision, so Check is never configured with it.
	Error
)

// String names the mode as the configuration spells it.
func (f OnFailure) String() string {
	switch f {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	case Error:
		return "error"
	}
	return fmt.Sprintf("OnFailure(%d)", int(f))
}
