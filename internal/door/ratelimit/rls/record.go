package rls

import (
	"strings"
	"time"

	"github.com/floodgate/floodgate/limiter/pipeline"
)

// Counting and recording who is limited (decide.Recorder, served as
// /debug/limited): after a request is answered, count hands each
// descriptor's result to the family of the limit it met, resolved once per
// configuration (families), as Check does for its policies.

// families are a configuration's: one per configured limit (its
// floodgate_rls_decisions_total series, made when first counted, and its
// tally), and one per domain for the limits requests bring themselves (a
// descriptor's `limit` override: a tally, no series).
type families struct {
	limits    map[*Limit]*pipeline.Family
	overrides map[string]*pipeline.Family // by domain
	reporting bool                        // a recorder listens
}

// ReportName is the name a limit's decisions are reported under in
// /debug/limited: rls:DOMAIN/LIMIT, LIMIT being the limit's name, or its
// place in the tree when unnamed (the limit label of
// floodgate_rls_decisions_total).
func ReportName(lim *Limit) string { return "rls:" + lim.Domain + "/" + metricName(lim) }

// overrideName is the name the decisions of requests' own limits in
// domain are reported under.
func overrideName(domain string) string { return "rls:" + domain + "/override" }

func (s *Service) newFamilies(c *Limits) *families {
	r := s.opts.Recorder
	f := &families{limits: make(map[*Limit]*pipeline.Family, len(c.limits)), reporting: r != nil}
	for _, lim := range c.limits {
		lr := r
		if lim.Unlimited {
			lr = nil // never decided
		}
		f.limits[lim] = pipeline.NewLazyFamily(metricName(lim), lim.ShadowMode, s.metrics.limits, []string{lim.Domain, metricName(lim)}, lr, ReportName(lim))
	}
	if r != nil {
		f.overrides = make(map[string]*pipeline.Family, len(c.domains))
		for d := range c.domains {
			f.overrides[d] = pipeline.NewLazyFamily("override", false, nil, nil, r, overrideName(d))
		}
	}
	return f
}

// count feeds each counted descriptor's result to its family (at the
// time of the first one a tally hears).
func (f *families) count(domain string, p *Plan, results []pipeline.Result) {
	var now time.Time
	var name callerName // one for the request: Record reads it before it returns
	for i, r := range results {
		if r == pipeline.Uncounted {
			continue
		}
		it := &p.Items[i]
		fam := f.overrides[domain]
		if it.Limit != nil {
			fam = f.limits[it.Limit]
		}
		if fam == nil {
			continue
		}
		if now.IsZero() && fam.Reporting() {
			now = time.Now()
		}
		name = callerName{entries: p.Entries[i], lim: it.Limit, id: it.ID}
		fam.Count(r, now, it.ID, &name)
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
