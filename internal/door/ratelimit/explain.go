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

// Explain plans req exactly as the door plans it, identities hashed as the
// door hashes them, deciding nothing: what each descriptor meets and the
// bucket it draws from. The limits are those the running door among
// doors serves (rls.config's files, or rls.xds's last push), else c's
// files'.
func Explain(doors []door.Door, c *door.Config, req *rlsv3.RateLimitRequest) (rls.Plan, error) {
	limits := Limits(c)
	for _, d := range doors {
		if rd, ok := d.(*rateLimitDoor); ok && rd.ready.Load() {
			limits = rd.s.Limits()
		}
	}
	if c.RLS.Windows == "fixed" {
		return limits.PlanFixed(req, c.Engine.HashIdentity) // the quotas the door counts in
	}
	return limits.Plan(req, c.Engine.HashIdentity)
}
