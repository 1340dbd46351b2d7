package rls

import (
	"math"
	"strconv"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// Kind is what one descriptor of a request meets.
type Kind uint8

const (
	// NoLimit: no configured limit applies (an unknown domain, a descriptor
	// outside the tree, or a limit another one `replaces`). Answered OK.
	NoLimit Kind = iota
	// Unlimited: the limit says unlimited: true. Answered OK with
	// limit_remaining 2³²−1, as envoyproxy/ratelimit answers it.
	Unlimited
	// Bucketed: decided in a token bucket, Bucket says which.
	Bucketed
	// Never: a limit of 0 requests per unit, which no request can pass; no
	// bucket can hold it, so it is answered over the limit without one.
	Never
)

// Item is one descriptor of a request, planned.
type Item struct {
	Kind Kind
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
}

// Hasher turns a request's descriptor into a bucket identity: the same
// keyed hash Floodgate gives any identity, so descriptor values (often API
// keys) never reach Redis or the logs in the clear.
type Hasher func(tag, value string) string

// bucketPrefix starts every RLS bucket's name, so that none can meet a
// Check policy's bucket in the store.
const bucketPrefix = "rls/"

// Plan plans req against c. A descriptor's cost is its own hits_addend when
// set (0: look without taking), else the request's (0 means 1), as Envoy's
// rate limit filter and envoyproxy/ratelimit read them.
func (c *Config) Plan(req *rlsv3.RateLimitRequest, hash Hasher) Plan {
	p := Plan{Items: make([]Item, len(req.GetDescriptors()))}
	entries := make([][]Entry, len(p.Items))
	p.Entries = entries
	for i, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			entries[i] = append(entries[i], Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
	}
	selected, unlimited := c.SelectAll(req.GetDomain(), entries)
	reqCost := int64(req.GetHitsAddend())
	if reqCost == 0 {
		reqCost = 1
	}
	for i, d := range req.GetDescriptors() {
		it := &p.Items[i]
		if !c.HasDomain(req.GetDomain()) {
			continue // ratelimit applies no limit, override or not, in an unknown domain
		}
		switch {
		case d.GetLimit() != nil:
			it.Override = d.GetLimit()
			it.RequestsPerUnit = d.GetLimit().GetRequestsPerUnit()
			it.Unit = unitOf(d.GetLimit().GetUnit())
		case unlimited[i]:
			it.Kind = Unlimited
			continue
		case selected[i] != nil:
			lim := selected[i]
			it.Limit, it.RequestsPerUnit, it.Unit, it.Name, it.Shadow = lim, lim.RequestsPerUnit, lim.Unit, lim.Name, lim.ShadowMode
		default:
			continue
		}
		if it.Unit.Seconds == 0 {
			continue // an override with an unknown unit: ratelimit cannot count it either
		}
		id := hash("rls:"+req.GetDomain(), descriptorText(entries[i]))
		it.ID = id
		if it.RequestsPerUnit == 0 {
			it.Kind = Never
			continue
		}
		capacity := int64(it.RequestsPerUnit)
		if it.Limit != nil && it.Limit.Burst > 0 {
			capacity = it.Limit.Burst
		}
		rate, err := limiter.NewRate(int64(it.RequestsPerUnit), it.Unit.Seconds)
		var lim limiter.Limit
		if err == nil {
			lim, err = limiter.NewLimit(capacity, rate)
		}
		if err != nil {
			continue // cannot happen for a uint32 count over these units; answer OK rather than fail
		}
		cost := reqCost
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(h.GetValue(), math.MaxInt32))
		}
		if d.GetIsNegativeHits() {
			// Giving tokens back is not implemented: such a descriptor
			// looks at its bucket and takes nothing (docs/ratelimit.md),
			// rather than take what it meant to return.
			cost = 0
		}
		name := bucketPrefix + req.GetDomain()
		if it.Limit != nil {
			name += "/" + it.Limit.Key
		} else {
			name += "/override/" + strconv.FormatUint(uint64(it.RequestsPerUnit), 10) + "/" + it.Unit.Name
		}
		it.Kind = Bucketed
		it.Bucket = p.add(decide.Bucket{Shadow: it.Shadow, Request: limiter.Request{Name: name, ID: id, Limit: lim, Cost: cost}})
	}
	p.lookOnlyWhenNeverPasses()
	return p
}

// lookOnlyWhenNeverPasses makes the enforced buckets look without taking
// when an enforced limit of 0 denies the request anyway: a denied request
// takes nothing, whichever limit denied it, and the statuses still report
// what each bucket holds. Shadow buckets are decided as usual.
func (p *Plan) lookOnlyWhenNeverPasses() {
	for i := range p.Items {
		if p.Items[i].Kind == Never && !p.Items[i].Shadow {
			for j := range p.Buckets {
				if !p.Buckets[j].Shadow {
					p.Buckets[j].Request.Cost = 0
				}
			}
			return
		}
	}
}

// add appends b, or adds its cost to the bucket already planned under the
// same name and identity (the same descriptor twice in one request counts
// twice, as it does in envoyproxy/ratelimit), and returns its index.
func (p *Plan) add(b decide.Bucket) int {
	for j := range p.Buckets {
		r := &p.Buckets[j].Request
		if r.Name == b.Request.Name && r.ID == b.Request.ID {
			r.Cost += b.Request.Cost
			p.Buckets[j].Shadow = p.Buckets[j].Shadow && b.Shadow
			return j
		}
	}
	p.Buckets = append(p.Buckets, b)
	return len(p.Buckets) - 1
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
