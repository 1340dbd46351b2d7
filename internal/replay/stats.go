package replay

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/floodgate/floodgate/extauthz"
)

// callerTable names every caller seen, once, whatever policies it met:
// an identity is a keyed hash of a key source and its value, so it is the
// same caller in every policy keyed alike. Its index and rows hold no
// pointers (the names and identities apart), so the collector never walks
// them: a replay holds hundreds of thousands of callers while it allocates
// for every line.
type callerTable struct {
	index    map[uint64]int32 // identity hash → row
	names    []caller
	ids      []string // the bucket identity (a keyed hash; --redact shows it)
	sets     []int32  // 1 + index into behindOf, for a client address
	behindOf []collateralSets
	overflow []map[uint64]struct{}
}

// of returns the row of e's i-th caller, adding it when new.
func (t *callerTable) of(e *entry, i int) int32 {
	g, ok := t.index[e.ids[i]]
	if !ok {
		g = int32(len(t.names))
		t.index[e.ids[i]] = g
		t.names = append(t.names, e.callers[i])
		t.ids = append(t.ids, e.plan.Buckets[i].Request.ID)
		t.sets = append(t.sets, 0)
	}
	return g
}

// collateralSets counts who was behind one client address.
type collateralSets struct {
	userAgents, apiKeys hashSet
}

// behind counts a user agent and an API key seen behind client address g.
func (t *callerTable) behind(g int32, ua, key uint64) {
	if t.sets[g] == 0 {
		t.behindOf = append(t.behindOf, collateralSets{})
		t.sets[g] = int32(len(t.behindOf))
	}
	cs := &t.behindOf[t.sets[g]-1]
	t.add(&cs.userAgents, ua)
	t.add(&cs.apiKeys, key)
}

// policyStats counts one policy's decisions.
type policyStats struct {
	p                         *extauthz.Policy
	requests, allowed, denied int64
	local                     []int32 // caller row → 1 + index into callers
	callers                   []callerStats
	series                    series
	collateral                bool // keyed by client_ip: count who was behind each address
	unitsPerToken             int64
}

// callerStats is one caller at one policy.
type callerStats struct {
	g                int32 // the caller's row in the callerTable
	requests, denied int64
	// backlog is the caller's peak-backlog recurrence in the limit's units:
	// B ← max(0, B − G·Δt) + cost·K at each request (Δt in the limit's
	// steps, on Redis' grid from the Unix epoch); peak is its maximum.
	// Under a quota, backlog is the tokens asked in the current window, last
	// that window's end (microseconds), peak the most asked in any window:
	// the limit the caller would have needed.
	backlog, last, peak int64
}

func newPolicyStats(p *extauthz.Policy) *policyStats {
	k, _ := p.Limit.Units()
	if p.Quota != nil {
		k = 1 // a quota counts tokens
	}
	return &policyStats{p: p, collateral: p.KeyedByClientIP(), unitsPerToken: k}
}

// record counts e's i-th bucket, whose caller is row g: allowed is whether
// its side of the decision (enforced or shadow) passed, short whether this
// bucket could not pay.
func (s *policyStats) record(e *entry, i int, g int32, allowed, short bool) {
	s.requests++
	if allowed {
		s.allowed++
	} else if short {
		s.denied++
	}
	s.series.add(e.at, short)

	for int(g) >= len(s.local) {
		s.local = append(s.local, 0)
	}
	if s.local[g] == 0 {
		s.callers = append(s.callers, callerStats{g: g, last: e.at})
		s.local[g] = int32(len(s.callers))
	}
	c := &s.callers[s.local[g]-1]
	c.requests++
	if short {
		c.denied++
	}
	if q := s.p.Quota; q != nil {
		if e.at >= c.last { // a new window (a new caller's last is its first line's time)
			_, end := q.Windows.Window(time.UnixMicro(e.at))
			c.backlog, c.last = 0, end.UnixMicro()
		}
		c.backlog = satAdd(c.backlog, e.plan.Buckets[i].Request.Cost)
		c.peak = max(c.peak, c.backlog)
		return
	}
	// Exact, as the store's own arithmetic: units and microseconds.
	c.backlog = s.p.Limit.Refilled(c.backlog, c.last, e.at)
	c.backlog = satAdd(c.backlog, satMul(e.plan.Buckets[i].Request.Cost, s.unitsPerToken))
	c.last = e.at
	c.peak = max(c.peak, c.backlog)
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// needed is the capacity with which c would never have been denied.
func (s *policyStats) needed(c *callerStats) int64 {
	return (c.peak + s.unitsPerToken - 1) / s.unitsPerToken
}

// maxHashSet bounds the distinct values a hashSet counts.
const maxHashSet = 1000

// hashSet counts distinct non-zero hashes, up to maxHashSet: a few inline,
// more in one of its callerTable's overflow maps.
type hashSet struct {
	few  [4]uint64
	n    int32
	many int32 // 1 + index into overflow; 0 while few suffice
}

func (s *callerTable) add(h *hashSet, x uint64) {
	if x == 0 {
		return
	}
	if h.many > 0 {
		if m := s.overflow[h.many-1]; len(m) < maxHashSet {
			m[x] = struct{}{}
		}
		return
	}
	if slices.Contains(h.few[:h.n], x) {
		return
	}
	if int(h.n) < len(h.few) {
		h.few[h.n] = x
		h.n++
		return
	}
	m := make(map[uint64]struct{}, 2*len(h.few))
	for _, y := range h.few {
		m[y] = struct{}{}
	}
	m[x] = struct{}{}
	s.overflow = append(s.overflow, m)
	h.many = int32(len(s.overflow))
}

func (s *callerTable) distinct(h *hashSet) int {
	if h.many > 0 {
		return len(s.overflow[h.many-1])
	}
	return int(h.n)
}

// maxBins bounds a series: when time runs past it, bins double in width.
const maxBins = 240

// series is requests and denials over time in bins of equal width.
type series struct {
	origin, width int64 // µs
	requests      []int64
	denied        []int64
}

func (s *series) add(at int64, denied bool) {
	if s.width == 0 {
		s.origin, s.width = at, int64(time.Second/time.Microsecond)
	}
	i := (at - s.origin) / s.width
	for i >= maxBins {
		for j := 0; j < len(s.requests); j += 2 {
			r, d := s.requests[j], s.denied[j]
			if j+1 < len(s.requests) {
				r, d = r+s.requests[j+1], d+s.denied[j+1]
			}
			s.requests[j/2], s.denied[j/2] = r, d
		}
		n := (len(s.requests) + 1) / 2
		s.requests, s.denied = s.requests[:n], s.denied[:n]
		s.width *= 2
		i = (at - s.origin) / s.width
	}
	for int64(len(s.requests)) <= i {
		s.requests, s.denied = append(s.requests, 0), append(s.denied, 0)
	}
	s.requests[i]++
	if denied {
		s.denied[i]++
	}
}

// Result is a replay's outcome; its JSON is `floodgate replay --json`.
type Result struct {
	Lines   int64 `json:"lines"`
	Decided int64 `json:"decided"`
	Skipped int64 `json:"skipped"`
	Late    int64 `json:"late"`
	// Ahead lines started more than the reorder window after the lines
	// around them (a wrong clock): set aside, not decided.
	Ahead int64 `json:"ahead"`
	// BeyondMaxCallers lines were not decided: they would have added a
	// caller past Options.MaxCallers (MaxCallers, 0 when unbounded).
	BeyondMaxCallers int64          `json:"beyond_max_callers"`
	MaxCallers       int            `json:"max_callers"`
	From             string         `json:"from"`
	To               string         `json:"to"`
	Policies         []PolicyResult `json:"policies"`

	stats   []*policyStats
	callers *callerTable
	window  time.Duration
}

// MaxUndecidedShare is the share of a log's dated lines that may be late
// or ahead before Undecided refuses the result.
const MaxUndecidedShare = 0.05

// Undecided returns an error, to be shown in place of the report, when more
// than MaxUndecidedShare of the dated lines could not be decided in start
// order (late or ahead): a table without them would be confidently wrong.
func (r *Result) Undecided() error {
	dated, n := r.Lines-r.Skipped, r.Late+r.Ahead
	if dated == 0 || float64(n) <= MaxUndecidedShare*float64(dated) {
		return nil
	}
	return fmt.Errorf("%d of %d dated lines (%.1f%%) could not be decided in start_time order (%d late, %d ahead), "+
		"more than the %.0f%% a report can leave out: the lines are further out of order than --reorder-window %s allows "+
		"(a log joined from files in the wrong order, or a wrong clock); give a larger --reorder-window or check the start_time values",
		n, dated, 100*float64(n)/float64(dated), r.Late, r.Ahead, 100*MaxUndecidedShare, r.window)
}

// PolicyResult is one policy's part of a Result.
type PolicyResult struct {
	Name            string `json:"name"`
	Mode            string `json:"mode"`
	Capacity        int64  `json:"capacity"`
	RefillPerSecond string `json:"refill_per_second"`
	// Quota, for a policy with a quota, is its calendar ("month from day
	// 15, Europe/Berlin"); Capacity is then its limit a window,
	// RefillPerSecond empty and capacity_needed the most tokens a caller
	// asked in one window.
	Quota string `json:"quota,omitempty"`
	// Requests matched the policy (and found a key, or fell back to its
	// shared bucket). Allowed passed; Denied found this policy's bucket
	// short; DeniedByOther were denied by another enforced policy's bucket
	// (all or nothing: this one paid nothing).
	Requests       int64       `json:"requests"`
	Allowed        int64       `json:"allowed"`
	Denied         int64       `json:"denied"`
	DeniedByOther  int64       `json:"denied_by_other"`
	Callers        int64       `json:"callers"`
	CallersDenied  int64       `json:"callers_denied"`
	CapacityNeeded Percentiles `json:"capacity_needed"`
	TopDenied      []TopCaller `json:"top_denied"`
	// Collateral, for a policy keyed by client_ip: the denied addresses
	// with the most denials, and how many distinct user agents and API
	// keys each carried (many behind one address: a NAT or a proxy).
	Collateral []Collateral `json:"collateral,omitempty"`

	needs  []int64 // capacity_needed of every caller, sorted
	series series
}

// Percentiles of capacity_needed over a policy's callers (nearest rank).
type Percentiles struct {
	P50 int64 `json:"p50"`
	P90 int64 `json:"p90"`
	P99 int64 `json:"p99"`
	Max int64 `json:"max"`
}

// TopCaller is a caller with denials.
type TopCaller struct {
	Caller   string `json:"caller"`
	Requests int64  `json:"requests"`
	Denied   int64  `json:"denied"`
	// CapacityNeeded is this caller's own capacity_needed.
	CapacityNeeded int64 `json:"capacity_needed"`
}

// Collateral is one denied client address and who was behind it.
type Collateral struct {
	Caller         string `json:"caller"`
	Requests       int64  `json:"requests"`
	Denied         int64  `json:"denied"`
	CapacityNeeded int64  `json:"capacity_needed"`
	UserAgents     int    `json:"user_agents"`
	APIKeys        int    `json:"api_keys"`
}

// ReportOptions shape the callers a Result shows.
type ReportOptions struct {
	Top    int  // callers in top_denied and collateral, 0 or more (floodgate replay --top: 10)
	Redact bool // show callers as their bucket identity's hash
}

func (d *sequencer) result() *Result {
	r := &Result{Lines: d.lines, Decided: d.decided, Skipped: d.skipped, Late: d.late, Ahead: d.ahead,
		BeyondMaxCallers: d.beyond, MaxCallers: d.o.MaxCallers, window: d.o.ReorderWindow}
	if d.decided > 0 {
		r.From, r.To = formatTime(d.from), formatTime(d.to)
	}
	r.stats, r.callers = d.stats, &d.callers
	return r
}

// Report fills r.Policies.
func (r *Result) Report(o ReportOptions) *Result {
	o.Top = max(o.Top, 0) // Job.Validate refuses a negative --top
	r.Policies = r.Policies[:0]
	for _, s := range r.stats {
		pr := PolicyResult{Name: s.p.Name, Mode: "enforce", Capacity: s.p.Limit.Capacity, RefillPerSecond: s.p.Limit.Rate.String(),
			Requests: s.requests, Allowed: s.allowed, Denied: s.denied, DeniedByOther: s.requests - s.allowed - s.denied,
			Callers: int64(len(s.callers)), TopDenied: []TopCaller{}, series: s.series}
		if q := s.p.Quota; q != nil {
			pr.Capacity, pr.RefillPerSecond, pr.Quota = q.Limit, "", fmt.Sprint(q.Windows)
		}
		if s.p.Shadow {
			pr.Mode = "shadow"
		}
		type kv struct {
			id string
			c  *callerStats
			n  caller
		}
		var denied []kv
		pr.needs = make([]int64, 0, len(s.callers))
		t := r.callers
		for j := range s.callers {
			c := &s.callers[j]
			pr.needs = append(pr.needs, s.needed(c))
			if c.denied > 0 {
				pr.CallersDenied++
				denied = append(denied, kv{t.ids[c.g], c, t.names[c.g]})
			}
		}
		slices.Sort(pr.needs)
		pr.CapacityNeeded = Percentiles{P50: rank(pr.needs, 50), P90: rank(pr.needs, 90), P99: rank(pr.needs, 99)}
		if n := len(pr.needs); n > 0 {
			pr.CapacityNeeded.Max = pr.needs[n-1]
		}
		slices.SortFunc(denied, func(a, b kv) int {
			return cmp.Or(cmp.Compare(b.c.denied, a.c.denied), cmp.Compare(b.c.requests, a.c.requests), strings.Compare(a.id, b.id))
		})
		for _, x := range denied[:min(o.Top, len(denied))] {
			pr.TopDenied = append(pr.TopDenied, TopCaller{Caller: show(x.n, x.id, o.Redact), Requests: x.c.requests, Denied: x.c.denied,
				CapacityNeeded: s.needed(x.c)})
		}
		if s.collateral {
			pr.Collateral = []Collateral{}
			n := 0
			for _, x := range denied {
				if n == o.Top {
					break
				}
				if x.n.source != "client_ip" || t.sets[x.c.g] == 0 {
					continue
				}
				cs := &t.behindOf[t.sets[x.c.g]-1]
				n++
				pr.Collateral = append(pr.Collateral, Collateral{Caller: show(x.n, x.id, o.Redact), Requests: x.c.requests,
					Denied: x.c.denied, CapacityNeeded: s.needed(x.c), UserAgents: t.distinct(&cs.userAgents), APIKeys: t.distinct(&cs.apiKeys)})
			}
		}
		r.Policies = append(r.Policies, pr)
	}
	return r
}

// rank is the nearest-rank p-th percentile of sorted values: the smallest
// value with at least p% of the values at or below it.
func rank(sorted []int64, p int) int64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	k := (p*n + 99) / 100 // ceil(p·n/100)
	return sorted[max(k, 1)-1]
}

// maxShown bounds a caller's value in a report; maxShownSecret one that is
// likely a credential (an API key, a token).
const (
	maxShown       = 24
	maxShownSecret = 12
)

// show renders a caller: its key source and value (truncated), or with
// redact the source and the start of its bucket identity (a keyed hash).
func show(c caller, id string, redact bool) string {
	if c.source == "" {
		return "(no key: the shared bucket)"
	}
	v := c.value
	limit := maxShown
	if h, ok := strings.CutPrefix(c.source, "header:"); ok && sensitive(h) {
		limit = maxShownSecret // enough to recognise a key, not to use it
	}
	if redact {
		v = "#" + id[:min(len(id), 12)]
	} else if len([]rune(v)) > limit {
		v = string([]rune(v)[:limit]) + "…"
	}
	return c.source + " " + v
}

func formatTime(us int64) string {
	return time.UnixMicro(us).UTC().Format(time.RFC3339Nano)
}
