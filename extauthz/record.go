package extauthz

import (
	"time"

	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/limiter"
)

// Recording who is limited (internal/limited, served as /debug/limited):
// after a batch is decided, record hands each policy's outcome to the
// policy's handle, resolved once per engine (tallies). It is a single call
// beside the metrics, so the decision path does not depend on it.

// tallies are an engine's policies' handles in the recorder (nil: no
// recorder).
type tallies map[*Policy]*limited.Policy

func newTallies(r *limited.Recorder, e *Engine) tallies {
	if r == nil {
		return nil
	}
	t := make(tallies, len(e.Policies))
	for _, p := range e.Policies {
		t[p] = r.Policy(p.Name, p.Shadow)
	}
	return t
}

// record tells the recorder how each policy of the decided plan answered
// at time now (the Check's start) for the request in v: allowed, when its
// decision (the enforced one, or the shadow one for a shadow policy)
// passed; denied, for each policy whose bucket was short. The other
// policies of a denied decision paid nothing and are not counted, as in
// floodgate_decisions_total; a decision the store could not make is not
// counted at all. name is scratch space for the caller's label.
func (t tallies) record(now time.Time, e *Engine, plan []Bucket, res []limiter.Result, d *Decision, v *View, name *callerName) {
	if t == nil {
		return
	}
	for i := range plan {
		p := plan[i].Policy
		allowed, err := d.Allowed, d.Err
		if p.Shadow {
			allowed, err = d.ShadowAllowed, d.ShadowErr
		}
		denied := !allowed && !res[i].Allowed
		if err != nil || (!allowed && !denied) {
			continue
		}
		*name = callerName{e: e, p: p, v: v, id: plan[i].Request.ID}
		t[p].Record(now, plan[i].Request.ID, name, denied)
	}
	*name = callerName{}
}

// callerName labels a caller for the report, only when the recorder starts
// following it (limited.Namer), in a form safe to show an operator.
type callerName struct {
	e  *Engine
	p  *Policy
	v  *View
	id string
}

// Name returns the key source that identified the caller and its label:
// for a header source (API keys, Authorization) and a fingerprint, the
// hashed identity the logs show, never the value; for client_ip the
// address, or the network (a /64 by default for IPv6) when ipv4_prefix or
// ipv6_prefix group several, as the bucket is keyed; for context, metadata
// and source_principal, which Envoy sets and the client does not hold as a
// secret, the value. The shared bucket of requests without a key is "-"
// with no key.
func (c *callerName) Name() (key, caller string) {
	if c.id == sharedID {
		return "", sharedID
	}
	for i := range c.p.keys {
		k := &c.p.keys[i]
		switch val, ip := c.e.keyValue(c.p, k, c.v); {
		case ip.IsValid() && ip.IsSingleIP():
			return k.tag, ip.Addr().String()
		case ip.IsValid():
			return k.tag, ip.String()
		case val == "":
			continue
		case k.kind == srcHeader || k.kind == srcFingerprint:
			return k.tag, c.id
		default:
			return k.tag, val
		}
	}
	return "", c.id
}
