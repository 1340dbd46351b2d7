package rls

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// Meets is what one descriptor of a request meets.
type Meets uint8

const (
	// NoLimit: no configured limit applies (an unknown domain, a descriptor
	// outside the tree, or a limit another one `replaces`). Answered OK.
	NoLimit Meets = iota
	// Unlimited: the limit says unlimited: true. Answered OK with
	// limit_remaining 2³²−1, as envoyproxy/ratelimit answers it.
	Unlimited
	// Bucketed: decided in a token bucket, Bucket says which.
	Bucketed
	// Never: a limit of 0 requests per unit, which no request costing
	// anything can pass; no bucket can hold it, so it is answered without
	// one: over the limit, unless the descriptor only looks (a
	// hits_addend of 0) or gives back.
	Never
)

// MaxDescriptors and MaxEntries bound one request: past MaxDescriptors
// descriptors, or MaxEntries entries in all, it is answered by the failure
// mode at once, without a decision, counted (floodgate_rls_unplanned_
// requests_total) and logged. Envoy sends one descriptor per rate_limits
// action list of a route, a handful; the bounds leave room for generated
// configurations by the thousand while bounding what one request can make
// the server and the store do (one bucket per descriptor, in one script
// call).
const (
	MaxDescriptors = 32_768
	MaxEntries     = 65_536
)

// Item is one descriptor of a request, planned.
type Item struct {
	Meets Meets
	// Limit is the configured limit (nil for NoLimit and for a request's
	// own override), Override the request's own.
	Limit    *Limit
	Override *rlcommon.RateLimitDescriptor_RateLimitOverride
	// RequestsPerUnit and Unit are the limit that applies, configured or
	// overridden, as the answer's current_limit reports it.
	RequestsPerUnit uint32
	Unit            Unit
	Name            string
	Shadow          bool
	// Request is what the descriptor asks of its bucket (limiter.Take,
	// Charge or Refund) and Cost how much: a Never item is decided by
	// them, a Bucketed one by its bucket's request.
	Request limiter.Kind
	Cost    int64
	// Bucket indexes the plan's Buckets: several descriptors naming the
	// same bucket share one entry, their costs added.
	Bucket int
	// ID is the descriptor's bucket identity (its entries hashed), for
	// Bucketed and Never.
	ID string
}

// Plan is a request's descriptors, planned: what each meets and the token
// buckets they draw from, ready for one all-or-nothing decision (the
// enforced buckets) and one of their own (the shadow buckets).
type Plan struct {
	Items []Item
	// Buckets are handed to Floodgate's one decide step (decide.Decider),
	// as a Check's are.
	Buckets []decide.Bucket
	// Entries are the request's descriptors' entries, in order.
	Entries [][]Entry
	// index finds a bucket by name and identity once the plan has more
	// than a few (add).
	index map[bucketKey]int
}

type bucketKey struct{ name, id string }

// Hasher turns a request's descriptor into a bucket identity: the same
// keyed hash Floodgate gives any identity, so descriptor values (often API
// keys) never reach Redis or the logs in the clear.
type Hasher func(tag, value string) string

// bucketPrefix starts every RLS bucket's name, so that none can meet a
// Check policy's bucket in the store.
const bucketPrefix = "rls/"

// Size is a request's descriptors and their entries, counted: what
// MaxDescriptors and MaxEntries bound.
func Size(req *rlsv3.RateLimitRequest) (descriptors, entries int) {
	for _, d := range req.GetDescriptors() {
		entries += len(d.GetEntries())
	}
	return len(req.GetDescriptors()), entries
}

// Plan plans req against c, in time linear in its descriptors and
// entries. What a descriptor asks of its bucket (the rule of
// docs/ratelimit.md, "Costs"):
//
//   - its own hits_addend of 0: a look (limiter.Take of 0), denied when
//     the bucket is empty or in debt;
//   - its own hits_addend above 0: a charge (limiter.Charge), taken
//     whatever is left, into a debt of at most one capacity; answered
//     OVER_LIMIT when it overdrew, as envoyproxy/ratelimit answers a
//     counter pushed over its limit. Envoy sends a descriptor's own cost
//     so, on the request path (Envoy Gateway's cost.request) and when the
//     stream is done (cost.response, AI gateways' token budgets);
//   - no hits_addend of its own: the request's (0 means 1), taken all or
//     nothing with the request's other such costs, and free when denied;
//   - is_negative_hits: that many tokens given back (limiter.Refund).
//
// An override (a descriptor's own limit) is counted in a bucket keyed by
// the domain, the descriptor's entries and the unit, so that an override
// whose count changes keeps its bucket (as envoyproxy/ratelimit keys its
// counter); unit_multiplier stretches its window. An override that cannot
// be counted exactly (a window of billions of years) makes Plan return an
// error: the request is the failure mode's.
func (c *Limits) Plan(req *rlsv3.RateLimitRequest, hash Hasher) (Plan, error) {
	return c.plan(req, hash, false)
}

// PlanFixed is Plan for rls.windows: fixed, envoyproxy/ratelimit's own
// counting (src/limiter/base_limiter.go, GetResponseDescriptorStatus; the
// key's window in src/limiter/cache_key.go, GenerateCacheKey, from
// src/utils/utilities.go, UnitToDivider): each limit counts in fixed
// windows of its unit (times unit_multiplier) aligned to the Unix epoch, a
// month 30 days and a year 365; every descriptor's hits are added to its
// window's count whatever the others' (a Charge: a denied request counts
// too), and a descriptor is over its limit when its count after them is
// above requests_per_unit. limit_remaining is requests_per_unit less the
// count; duration_until_reset the time to the window's end. The count
// stops at twice requests_per_unit (the quota's bound; ratelimit's counter
// runs on), which no answer but a later is_negative_hits can tell.
func (c *Limits) PlanFixed(req *rlsv3.RateLimitRequest, hash Hasher) (Plan, error) {
	return c.plan(req, hash, true)
}

func (c *Limits) plan(req *rlsv3.RateLimitRequest, hash Hasher, fixed bool) (Plan, error) {
	ds := req.GetDescriptors()
	p := Plan{Items: make([]Item, len(ds)), Entries: make([][]Entry, len(ds))}
	_, total := Size(req)
	all := make([]Entry, 0, total) // one array for every descriptor's entries
	for i, d := range ds {
		start := len(all)
		for _, e := range d.GetEntries() {
			all = append(all, Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		p.Entries[i] = all[start:len(all):len(all)]
	}
	domain := req.GetDomain()
	top := c.domains[domain]
	if top == nil {
		return p, nil // ratelimit applies no limit, override or not, in an unknown domain
	}
	selected, unlimited := c.selectAll(domain, p.Entries, func(i int) bool { return ds[i].GetLimit() != nil })
	reqCost := max(int64(req.GetHitsAddend()), 1)
	never := false
	for i, d := range ds {
		it := &p.Items[i]
		var bucket limiter.Limit
		var name string
		switch {
		case d.GetLimit() != nil:
			o := d.GetLimit()
			it.Override, it.RequestsPerUnit, it.Unit = o, o.GetRequestsPerUnit(), unitOf(o.GetUnit())
			if it.Unit.Seconds == 0 {
				continue // an override with an unknown unit: ratelimit cannot count it either
			}
			window := it.Unit.Seconds
			if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
				window *= int64(m.GetValue())
			}
			if it.RequestsPerUnit > 0 {
				var err error
				if bucket, err = bucketOf(int64(it.RequestsPerUnit), window, int64(it.RequestsPerUnit)); err != nil {
					return p, fmt.Errorf("descriptor %d: its own limit of %d per %d s cannot be counted exactly: %w", i, it.RequestsPerUnit, window, err)
				}
			}
			name = bucketPrefix + domain + "/override/" + it.Unit.Name
		case unlimited[i]:
			it.Meets = Unlimited
			continue
		case selected[i] != nil:
			lim := selected[i]
			it.Limit, it.RequestsPerUnit, it.Unit, it.Name, it.Shadow = lim, lim.RequestsPerUnit, lim.Unit, lim.Name, lim.ShadowMode
			bucket, name = lim.bucket, lim.bucketName
		default:
			continue
		}
		it.Request, it.Cost = kindAndCost(d, reqCost)
		it.ID = hash(top.tag, descriptorText(p.Entries[i]))
		if it.RequestsPerUnit == 0 {
			it.Meets = Never
			never = never || (!it.Shadow && it.Request != limiter.Refund && it.Cost > 0)
			continue
		}
		it.Meets = Bucketed
		r := limiter.Request{Name: name, ID: it.ID, Limit: bucket, Cost: it.Cost, Kind: it.Request}
		if fixed {
			r.Quota = fixedQuota(int64(it.RequestsPerUnit), bucket)
			if r.Kind == limiter.Take {
				r.Kind = limiter.Charge // counted whatever the other descriptors say
			}
		}
		it.Bucket = p.add(decide.Bucket{Shadow: it.Shadow, Request: r})
	}
	if never && !fixed {
		p.lookOnly()
	}
	return p, nil
}

// kindAndCost is what a descriptor asks of its bucket: see Plan.
func kindAndCost(d *rlcommon.RateLimitDescriptor, reqCost int64) (limiter.Kind, int64) {
	kind, cost := limiter.Take, reqCost
	if h := d.GetHitsAddend(); h != nil {
		cost = int64(min(h.GetValue(), math.MaxInt64))
		if cost > 0 {
			kind = limiter.Charge
		}
	}
	if d.GetIsNegativeHits() {
		kind = limiter.Refund
	}
	return kind, cost
}

// lookOnly makes the enforced takes look without taking when an enforced
// limit of 0 denies the request anyway: a denied request takes nothing,
// whichever limit denied it, and the statuses still report what each
// bucket holds. Charges and refunds apply as ever; shadow buckets are
// decided as usual.
func (p *Plan) lookOnly() {
	for j := range p.Buckets {
		if b := &p.Buckets[j]; !b.Shadow && b.Request.Kind == limiter.Take {
			b.Request.Cost = 0
		}
	}
}

// indexFrom is how many buckets a plan holds before add finds them
// through a map rather than by looking at each.
const indexFrom = 8

// add appends b, or merges it into the bucket already planned under the
// same name and identity, and returns its index: the same descriptor
// twice in one request counts twice, as it does in envoyproxy/ratelimit.
// Merged requests add their costs (a refund takes its cost off, and a
// refund larger than the rest makes the whole a refund); a charge among
// them makes the whole a charge, else a take among them a take. The bucket
// is shadow only if every descriptor naming it is.
func (p *Plan) add(b decide.Bucket) int {
	key := bucketKey{b.Request.Name, b.Request.ID}
	j, found := -1, false
	if p.index != nil {
		j, found = p.index[key]
	} else {
		for k := range p.Buckets {
			if r := &p.Buckets[k].Request; r.Name == key.name && r.ID == key.id {
				j, found = k, true
				break
			}
		}
	}
	if !found {
		p.Buckets = append(p.Buckets, b)
		j = len(p.Buckets) - 1
		switch {
		case p.index != nil:
			p.index[key] = j
		case len(p.Buckets) == indexFrom:
			p.index = make(map[bucketKey]int, 2*indexFrom)
			for k := range p.Buckets {
				p.index[bucketKey{p.Buckets[k].Request.Name, p.Buckets[k].Request.ID}] = k
			}
		}
		return j
	}
	have := &p.Buckets[j]
	have.Shadow = have.Shadow && b.Shadow
	have.Request.Kind, have.Request.Cost = merge(have.Request.Kind, have.Request.Cost, b.Request.Kind, b.Request.Cost)
	return j
}

// merge is one request's kind and cost for two asked of the same bucket
// (add).
func merge(k1 limiter.Kind, c1 int64, k2 limiter.Kind, c2 int64) (limiter.Kind, int64) {
	signed := func(k limiter.Kind, c int64) int64 {
		if k == limiter.Refund {
			return -c
		}
		return c
	}
	sum := saturate(signed(k1, c1), signed(k2, c2))
	kind := limiter.Take
	switch {
	case k1 == limiter.Charge || k2 == limiter.Charge:
		kind = limiter.Charge
	case k1 == limiter.Refund && k2 == limiter.Refund:
		kind = limiter.Refund
	}
	if sum < 0 || (sum == 0 && (k1 == limiter.Refund || k2 == limiter.Refund)) {
		return limiter.Refund, -max(sum, -math.MaxInt64)
	}
	return kind, sum
}

// saturate adds a and b, stopping at the int64 bounds.
func saturate(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// descriptorText is a descriptor's entries in one unambiguous string (each
// key and value length-prefixed), the input of its bucket identity.
func descriptorText(es []Entry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(strconv.Itoa(len(e.Key)))
		b.WriteByte(':')
		b.WriteString(e.Key)
		b.WriteString(strconv.Itoa(len(e.Value)))
		b.WriteByte(':')
		b.WriteString(e.Value)
	}
	return b.String()
}

func unitOf(u interface{ String() string }) Unit {
	return units[u.String()]
}
