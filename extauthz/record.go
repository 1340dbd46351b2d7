package extauthz

import (
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// Recording who is limited (decide.Recorder; /debug/limited): after a
// request is decided, record hands each policy's outcome to the policy's
// tally, resolved once per engine (tallies). It is a single call
// beside the metrics, so the decision path does not depend on it.

// tallies are an engine's policies' tallies in the recorder (nil: no
// recorder).
type tallies map[*Policy]decide.Tally

func newTallies(r decide.Recorder, e *Engine) tallies {
	if r == nil {
		return nil
	}
	t := make(tallies, len(e.Policies))
	for _, p := range e.Policies {
		t[p] = r.Tally(p.Name, p.Shadow)
	}
	return t
}

// record tells the recorder how each policy of the decided plan answered
// at time now (the Check's start) for the request in v: allowed, when its
// decision passed (the enforced one; for a shadow policy, its own bucket's,
// each shadow policy deciding on its own); denied, for each policy whose
// bucket was short. The other
// policies of a denied decision paid nothing and are not counted, as in
// floodgate_decisions_total; a decision the store could not make is not
// counted at all. name is scratch space for the caller's label.
func (t tallies) record(now time.Time, e *Engine, plan *Plan, res []limiter.Result, d *decide.Decision, v *View, name *callerName) {
	if t == nil {
		return
	}
	for i, p := range plan.Policies {
		allowed, err := d.Allowed, d.Err
		if p.Shadow {
			allowed, err = res[i].Allowed, d.ShadowErr // each shadow policy decides on its own
		}
		denied := !allowed && !res[i].Allowed
		if err != nil || (!allowed && !denied) {
			continue
		}
		id := plan.Buckets[i].Request.ID
		*name = callerName{e: e, p: p, v: v, id: id}
		t[p].Record(now, id, name, denied)
	}
	*name = callerName{}
}

// callerName labels a caller for the report, only when the recorder starts
// following it (decide.Namer), in a form safe to show an operator.
type callerName struct {
	e  *Engine
	p  *Policy
	v  *View
	id string
}

// Name returns the key source that identified the caller and its label
// as an operator may see it (Engine.caller, not in the clear): never a
// header's value, which may be a secret, but the hashed identity the logs
// show. The shared bucket of requests without a key is "-" with no key.
func (c *callerName) Name() (key, caller string) {
	if c.id == sharedID {
		return "", sharedID
	}
	if key, caller = c.e.caller(c.p, c.v, false); key == "" {
		return "", c.id
	}
	return key, caller
}
