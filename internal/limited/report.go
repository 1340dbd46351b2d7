package limited

import (
	"cmp"
	"slices"
)

// Report is who was limited over a window, as GET /debug/limited serves it:
// enforced policies (real denials) in Policies, shadow policies (would-be
// denials) in Shadow, each busiest first.
type Report struct {
	WindowSeconds int64          `json:"window_seconds"`
	Policies      []PolicyReport `json:"policies"`
	Shadow        []PolicyReport `json:"shadow"`
}

// PolicyReport is one policy's window: every denial it made (Denied), and
// the callers denied most, most first.
type PolicyReport struct {
	Name   string   `json:"name"`
	Denied int64    `json:"denied"`
	Top    []Caller `json:"top"`
}

// Caller is one caller's denials and allowed requests under a policy.
// Allowed counts the requests allowed while the caller was followed: from
// the start of each interval when the policy saw few enough callers, else
// from the caller's first denial in it. Overcount, when not zero, is how
// much Denied may exceed the truth: the caller displaced another whose
// count it inherited (space-saving's bound).
type Caller struct {
	Caller    string `json:"caller"`
	Key       string `json:"key"`
	Denied    int64  `json:"denied"`
	Allowed   int64  `json:"allowed"`
	Overcount int64  `json:"overcount,omitempty"`
}

// Snapshot merges every policy's sketches of the window ending now into a
// Report, keeping at most top callers per policy (top <= 0: all it
// follows). A policy is listed when it decided anything in the window;
// callers are listed when denied. Policies idle for the whole window give
// their sketches' memory back.
func (r *Recorder) Snapshot(top int) Report {
	epoch := r.now().UnixNano() / r.step
	rep := Report{WindowSeconds: int64((r.window + 999_999_999) / 1_000_000_000), Policies: []PolicyReport{}, Shadow: []PolicyReport{}}
	r.mu.Lock()
	ps := make([]*Tally, 0, len(r.policies))
	for _, p := range r.policies {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		pr, ok := p.snapshot(epoch)
		if !ok {
			continue
		}
		if p.shadow {
			rep.Shadow = append(rep.Shadow, pr)
		} else {
			rep.Policies = append(rep.Policies, pr)
		}
	}
	rep.sort()
	rep.Trim(top)
	return rep
}

// snapshot merges p's live sketches; false when none decided anything.
func (p *Tally) snapshot(epoch int64) (PolicyReport, bool) {
	pr := PolicyReport{Name: p.name, Top: []Caller{}}
	byID := map[string]int{}
	any := false
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.ring {
		if !p.live(s, epoch) {
			continue
		}
		any = any || s.denied+s.allowed > 0
		pr.Denied += s.denied
		for i := range s.entries[:s.n] {
			en := &s.entries[i]
			j, ok := byID[en.id]
			if !ok {
				j = len(pr.Top)
				byID[en.id] = j
				pr.Top = append(pr.Top, Caller{Caller: en.caller, Key: en.key})
			}
			c := &pr.Top[j]
			c.Denied += en.denied
			c.Allowed += en.allowed
			c.Overcount += en.over
		}
	}
	if !any {
		p.ring = nil // idle a whole window: its memory goes back
		return pr, false
	}
	pr.Top = slices.DeleteFunc(pr.Top, func(c Caller) bool { return c.Denied == 0 })
	return pr, true
}

// Merge adds o's counts to r's, policy by policy and caller by caller (the
// same caller has the same label on every replica sharing the hash
// secret): the view of several replicas. The window is the longer of the
// two.
func (r *Report) Merge(o Report) {
	r.WindowSeconds = max(r.WindowSeconds, o.WindowSeconds)
	r.Policies = mergePolicies(r.Policies, o.Policies)
	r.Shadow = mergePolicies(r.Shadow, o.Shadow)
	r.sort()
}

func mergePolicies(a, b []PolicyReport) []PolicyReport {
	if a == nil {
		a = []PolicyReport{}
	}
	for _, pb := range b {
		i := slices.IndexFunc(a, func(pa PolicyReport) bool { return pa.Name == pb.Name })
		if i < 0 {
			a = append(a, PolicyReport{Name: pb.Name, Top: []Caller{}})
			i = len(a) - 1
		}
		pa := &a[i]
		pa.Denied += pb.Denied
		for _, cb := range pb.Top {
			j := slices.IndexFunc(pa.Top, func(ca Caller) bool { return ca.Caller == cb.Caller && ca.Key == cb.Key })
			if j < 0 {
				pa.Top = append(pa.Top, Caller{Caller: cb.Caller, Key: cb.Key})
				j = len(pa.Top) - 1
			}
			c := &pa.Top[j]
			c.Denied += cb.Denied
			c.Allowed += cb.Allowed
			c.Overcount += cb.Overcount
		}
	}
	return a
}

// Trim keeps at most n callers per policy (n <= 0: all).
func (r *Report) Trim(n int) {
	for _, ps := range [][]PolicyReport{r.Policies, r.Shadow} {
		for i := range ps {
			ps[i].Top = trim(ps[i].Top, n)
		}
	}
}

func trim(cs []Caller, n int) []Caller {
	if n > 0 && len(cs) > n {
		return cs[:n]
	}
	return cs
}

// sort orders policies busiest first (then by name) and each policy's
// callers most denied first (then most allowed, then by label), so equal
// data always reads the same.
func (r *Report) sort() {
	for _, ps := range [][]PolicyReport{r.Policies, r.Shadow} {
		slices.SortFunc(ps, func(a, b PolicyReport) int {
			return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(a.Name, b.Name))
		})
		for i := range ps {
			slices.SortFunc(ps[i].Top, func(a, b Caller) int {
				return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(b.Allowed, a.Allowed),
					cmp.Compare(a.Caller, b.Caller), cmp.Compare(a.Key, b.Key))
			})
		}
	}
}
