package proxytest

import "testing"

// DoorConfig is the part of a Floodgate configuration for the HTTP door that
// a recipe's tests set: the keys of shared/DESIGN's http_authz section, the
// client_ip setting and the policies, spelled as Floodgate's YAML spells
// them, so that a real Floodgate can be configured from it word for word.
type DoorConfig struct {
	// PathPrefix is http_authz.path_prefix: stripped from the request path
	// before policies match (Envoy's http_service path_prefix).
	PathPrefix string
	// OriginalURIHeader and OriginalMethodHeader are
	// http_authz.original_uri_header and original_method_header: where a
	// proxy that sends a fixed authorization URI puts the original request's
	// URI and method (nginx's recipe: X-Original-URI, X-Original-Method).
	OriginalURIHeader, OriginalMethodHeader string
	// TrustedHops is client_ip.trusted_hops: the client is the
	// (TrustedHops+1)-th address from the right of X-Forwarded-For.
	TrustedHops int
	// Policies are Floodgate's policies; each refills one token an hour
	// (refill_per_second: 1/3600), so a test's burst never refills.
	Policies []Policy
}

// Policy is one Floodgate policy as DoorConfig needs it.
type Policy struct {
	Name string
	// PathPrefix or Path is match.path_prefix or match.path.
	PathPrefix, Path string
	// Methods is match.methods (empty: every method).
	Methods []string
	// Key is the policy's key sources in order: "header:NAME", "client_ip".
	Key []string
	// Capacity is the bucket's size: the burst that passes.
	Capacity int64
}

// RefillSeconds is how long a policy of DoorConfig takes to refill one
// token: Retry-After on a denial is this, give or take the second the test
// took.
const RefillSeconds = 3600

// Door is Floodgate's HTTP authorization door as the recipes' tests drive
// it: an address a proxy sends its authorization requests to, and the
// faults a test puts it through.
type Door interface {
	// Addr is the 127.0.0.1 host:port the door listens on.
	Addr() string
	// Pause makes the door hang: connections are accepted, requests are
	// read, nothing is answered until Resume (a stopped process).
	Pause()
	// Resume ends Pause.
	Resume()
	// Stop ends the door: from now on connections are refused.
	Stop()
	// StoreDown makes the door's store fail (Redis stopped): from now on
	// the door answers by store.on_failure, which is allow: 200, marked
	// x-ratelimit-degraded: true.
	StoreDown()
}

// StartDoor starts the door the recipes' tests run against, configured by
// cfg, and ends it when the test ends. This is the one place the stand-in
// (StartStandIn) is chosen; when Floodgate serves listen.http, this starts
// Floodgate instead (a serve on a real redis-server, whose Pause/Resume are
// SIGSTOP/SIGCONT, Stop a kill, StoreDown a kill of the redis-server), and
// every recipe's suite runs against the real door unchanged.
func StartDoor(t *testing.T, cfg DoorConfig) Door {
	t.Helper()
	return StartStandIn(t, cfg)
}
