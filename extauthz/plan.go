package extauthz

import (
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// Plan is what a request draws from: the buckets handed to the decide step
// (decide.Decider), in policy order, and each one's policy (Policies[i] is
// Buckets[i]'s).
type Plan struct {
	Buckets  []decide.Bucket
	Policies []*Policy
}

// Reset empties p, keeping its capacity and dropping its references.
func (p *Plan) Reset() {
	clear(p.Buckets)
	clear(p.Policies)
	p.Buckets, p.Policies = p.Buckets[:0], p.Policies[:0]
}

// Plan appends to p the buckets the request in v draws from, in policy
// order: every policy whose match fits and that found a key for it (or fell
// back to its shared bucket).
func (e *Engine) Plan(v *View, p *Plan) {
	if !v.HTTP && !e.anyTCP {
		return
	}
	for _, pol := range e.Policies {
		if r, ok := e.request(pol, v); ok {
			p.Buckets = append(p.Buckets, decide.Bucket{Request: r, Shadow: pol.Shadow})
			p.Policies = append(p.Policies, pol)
		}
	}
}

// request is p's bucket request for v: false when p does not match v or
// finds no key for it.
func (e *Engine) request(p *Policy, v *View) (limiter.Request, bool) {
	if !p.match.matches(v) {
		return limiter.Request{}, false
	}
	id, ok := e.identity(p, v)
	if !ok {
		return limiter.Request{}, false
	}
	return limiter.Request{Name: p.Name, ID: id, Limit: p.Limit, Cost: p.costOf(v), Lease: p.Lease, Quota: p.Quota}, true
}
