package ratelimit

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
)

// Request is the RateLimitRequest Envoy's rate limit filter sends for
// domain, descriptors (each "key=value[,key=value...]", as `floodgate check
// --rls --descriptor` takes them) and the request's hits_addend.
func Request(domain string, descriptors []string, hits uint64) (*rlsv3.RateLimitRequest, error) {
	return buildRLSRequest(domain, descriptors, hits)
}

// Explain plans req against c's limits (rls.config's files) exactly as
// the door plans it, identities hashed as the door hashes them, deciding
// nothing: what each descriptor meets and the bucket it draws from. Limits
// that rls.xds pushes live in the running door's feed, not in c.
func Explain(c *door.Config, req *rlsv3.RateLimitRequest) (rls.Plan, error) {
	return Limits(c).Plan(req, c.Engine.HashIdentity)
}
