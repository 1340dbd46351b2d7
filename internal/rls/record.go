package rls

import (
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// Recording who is limited (decide.Recorder, served as /debug/limited):
// after a request is answered, record hands each descriptor's outcome to
// the tally of the limit it met, resolved once per configuration
// (tallies), as Check does for its policies. It is a single call beside
// the metrics, so the decision path does not depend on it.

// tallies are a configuration's tallies in the recorder: one per
// configured limit, and one per domain for the limits requests bring
// themselves (a descriptor's `limit` override). nil: no recorder.
type tallies struct {
	limits    map[*Limit]decide.Tally
	overrides map[string]decide.Tally // by domain
}

// ReportName is the name a limit's decisions are reported under in
// /debug/limited: rls:DOMAIN/LIMIT, LIMIT being the limit's name, or its
// place in the tree when unnamed (the limit label of
// floodgate_rls_decisions_total).
func ReportName(lim *Limit) string { return "rls:" + lim.Domain + "/" + metricName(lim) }

// overrideName is the name the decisions of requests' own limits in
// domain are reported under.
func overrideName(domain string) string { return "rls:" + domain + "/override" }

func newTallies(r decide.Recorder, c *Config) *tallies {
	if r == nil {
		return nil
	}
	t := &tallies{limits: make(map[*Limit]decide.Tally, len(c.limits)), overrides: make(map[string]decide.Tally, len(c.domains))}
	for _, lim := range c.limits {
		if !lim.Unlimited {
			t.limits[lim] = r.Tally(ReportName(lim), lim.ShadowMode)
		}
	}
	for d := range c.domains {
		t.overrides[d] = r.Tally(overrideName(d), false)
	}
	return t
}

// record tells the recorder how each descriptor of the answered plan fared
// (at the time of the first one it records), as floodgate_rls_decisions_total
// counts it (Plan.result): denied when its status is over the limit (for a
// shadow limit: when it would have been), allowed otherwise; the other
// limits of a denied answer are not counted, as Check counts the policies
// of a denied request, nor are shadow limits whose store failed. res holds
// the buckets' results, x the decide step's outcome.
func (t *tallies) record(domain string, p *Plan, resp *rlsv3.RateLimitResponse, res []limiter.Result, x *decide.Decision) {
	if t == nil {
		return
	}
	var now time.Time
	var name callerName // one for the request: Record reads it before it returns
	for i := range p.Items {
		it := &p.Items[i]
		if it.Kind != Bucketed && it.Kind != Never {
			continue
		}
		result, counted := p.result(i, resp, res, x)
		if !counted {
			continue
		}
		h := t.overrides[domain]
		if it.Limit != nil {
			h = t.limits[it.Limit]
		}
		if h == nil {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		name = callerName{entries: p.Entries[i], lim: it.Limit, id: it.ID}
		h.Record(now, it.ID, &name, result == "denied" || result == "shadow_denied")
	}
}

// callerName labels a descriptor for the report, only when the recorder
// starts following it (decide.Namer), in a form safe to show an
// operator.
type callerName struct {
	entries []Entry
	lim     *Limit // nil for a request's own limit
	id      string
}

// Name returns the descriptor's keys and its label. The keys are the
// entries' keys in order, each with its value where the configuration
// names that value exactly (generic_key=api,api_key): those values are the
// operator's, not the client's. The label is the one entry the request
// brings when it is an address (remote_address, masked_remote_address:
// what Envoy saw, as client_ip is for Check); "-" when the configuration
// fixes every entry (one bucket shared by every request); else the
// descriptor's hashed bucket identity, never its values, which are often
// API keys.
func (c *callerName) Name() (key, caller string) {
	var b strings.Builder
	varying, at := 0, -1
	for i, e := range c.entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Key)
		if c.lim != nil && i < len(c.lim.Values) && c.lim.Values[i] != "" && !strings.Contains(c.lim.Values[i], "*") {
			b.WriteByte('=')
			b.WriteString(e.Value)
			continue
		}
		varying, at = varying+1, i
	}
	switch {
	case varying == 0:
		return b.String(), "-"
	case varying == 1 && (c.entries[at].Key == "remote_address" || c.entries[at].Key == "masked_remote_address"):
		return b.String(), c.entries[at].Value
	}
	return b.String(), c.id
}
