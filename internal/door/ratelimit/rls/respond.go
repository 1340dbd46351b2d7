package rls

import (
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/pipeline"
	"github.com/floodgate/floodgate/limiter/respond"
)

// ResponseOptions shape the answer beyond what Envoy requires.
type ResponseOptions struct {
	// Headers adds draft-ietf-httpapi-ratelimit-headers' RateLimit and
	// RateLimit-Policy fields to response_headers_to_add. Off by default:
	// Envoy's own enable_x_ratelimit_headers builds the X-RateLimit-*
	// fields from the statuses.
	Headers bool
}

// Respond renders the answer Envoy's rate limit filter reads: overall_code
// OK or OVER_LIMIT (never UNKNOWN, which a release Envoy takes for OK), one
// status per descriptor in the request's order, each with its current
// limit, the whole tokens left (0 on an over-limit status, shadow or not,
// as envoyproxy/ratelimit reports it) and how long until the bucket is
// full (within the limit) or until the descriptor would pass (over it);
// none for a request that can never pass (a cost above the capacity, a
// limit of 0). A descriptor is over its limit when its take could not pay
// or its charge overdrew the bucket (docs/ratelimit.md, "Costs").
//
// Headers go in response_headers_to_add, which Envoy's filter copies into
// its 429 (and, allowed, into the upstream's response): on a denial a JSON
// raw_body and its content-type, as a denied Check has, and Retry-After
// unless the request can never pass; x-ratelimit-degraded when the
// per-replica fallback decided. res holds each bucket's result, in the
// plan's bucket order, results each descriptor's (classify); out is the
// pipeline's outcome. A denial a shadow mode admits (rls.shadow_mode) is
// OK, its statuses still over their limits, without the body and
// content-type only a denial carries.
func (p *Plan) Respond(res []limiter.Result, results []pipeline.Result, out pipeline.Outcome, o ResponseOptions) *rlsv3.RateLimitResponse {
	a := newAnswer(len(p.Items))
	resp := a.resp
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	var retryAfter time.Duration
	never := false
	for i := range p.Items {
		it := &p.Items[i]
		st := &a.statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		switch it.Meets {
		case NoLimit:
			continue
		case Unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		lim := &a.limits[i]
		lim.Name, lim.RequestsPerUnit, lim.Unit = it.Name, it.RequestsPerUnit, it.Unit.enum()
		st.CurrentLimit = lim
		over, cannot, wait := p.outcome(it, res)
		if !over && it.Meets == Bucketed {
			st.LimitRemaining = uint32(min(max(res[it.Bucket].Remaining, 0), math.MaxUint32))
		}
		if !cannot {
			d := &a.durations[i]
			d.Seconds = respond.Seconds(wait)
			st.DurationUntilReset = d
		}
		if results[i] == pipeline.Denied {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			never = never || cannot
			retryAfter = max(retryAfter, wait)
		}
	}
	if o.Headers {
		resp.ResponseHeadersToAdd = p.headers(resp, res)
	}
	if out.Degraded {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, header(respond.HeaderDegraded, "true"))
	}
	if out.Denied() {
		if !out.Shadowed {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.ResponseHeadersToAdd, resp.RawBody = denial(resp.ResponseHeadersToAdd, retryAfter, never, out.Degraded, out.Shadowed)
	}
	return resp
}

// answer is one response's messages, allocated together: a status, a
// limit and a duration for each descriptor, the response pointing into
// them.
type answer struct {
	resp      *rlsv3.RateLimitResponse
	statuses  []rlsv3.RateLimitResponse_DescriptorStatus
	limits    []rlsv3.RateLimitResponse_RateLimit
	durations []durationpb.Duration
}

// oneAnswer is the answer to a request of one descriptor, the usual one,
// in a single allocation.
type oneAnswer struct {
	resp      rlsv3.RateLimitResponse
	pointer   [1]*rlsv3.RateLimitResponse_DescriptorStatus
	statuses  [1]rlsv3.RateLimitResponse_DescriptorStatus
	limits    [1]rlsv3.RateLimitResponse_RateLimit
	durations [1]durationpb.Duration
}

// newAnswer returns empty messages for an answer of n descriptors: one
// allocation for one descriptor, five for any number, where a message
// each would take three a descriptor.
func newAnswer(n int) answer {
	if n == 1 {
		o := new(oneAnswer)
		o.resp.Statuses = o.pointer[:]
		return answer{resp: &o.resp, statuses: o.statuses[:], limits: o.limits[:], durations: o.durations[:]}
	}
	return answer{
		resp:      &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)},
		statuses:  make([]rlsv3.RateLimitResponse_DescriptorStatus, n),
		limits:    make([]rlsv3.RateLimitResponse_RateLimit, n),
		durations: make([]durationpb.Duration, n),
	}
}

// enum is u as Envoy's RateLimitResponse.RateLimit.Unit names it.
func (u Unit) enum() rlsv3.RateLimitResponse_RateLimit_Unit {
	switch u.Name {
	case "SECOND":
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case "MINUTE":
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case "HOUR":
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case "DAY":
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case "WEEK":
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case "MONTH":
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case "YEAR":
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[u.Name])
}

// outcome is how a counted descriptor fared: over its limit or not, never
// able to pass, and the wait its status reports (until full within the
// limit, until it would pass over it).
func (p *Plan) outcome(it *Item, res []limiter.Result) (over, cannot bool, wait time.Duration) {
	if it.Meets == Never {
		// No bucket: a look or a refund passes (ratelimit: 0 hits are not
		// over a limit of 0), anything else never can.
		if it.Request == limiter.Refund || it.Cost == 0 {
			return false, false, time.Duration(it.Unit.Seconds) * time.Second
		}
		return true, true, 0
	}
	r := &res[it.Bucket]
	switch p.Buckets[it.Bucket].Request.Kind {
	case limiter.Take:
		over = !r.Allowed
	case limiter.Charge:
		over = r.InDebt
	}
	switch {
	case !over:
		return false, false, r.ResetAfter
	case r.ExceedsCapacity:
		return true, true, 0
	case r.RetryAfter > 0:
		return true, false, r.RetryAfter
	}
	return true, false, r.ResetAfter
}

// denial adds to hs what a denied answer carries, and returns its body:
// Retry-After unless the request can never pass, the JSON content-type, and
// the JSON body a denied Check has (limiter/respond). A denial a shadow
// mode admits keeps Retry-After only: Envoy would add the rest to the
// upstream's response.
func denial(hs []*corev3.HeaderValue, retryAfter time.Duration, never, degraded, shadowed bool) ([]*corev3.HeaderValue, []byte) {
	body := respond.Body{RetryAfter: respond.RetryAfter(retryAfter), Never: never, Degraded: degraded}
	if !never {
		hs = append(hs, header(respond.HeaderRetryAfter, strconv.FormatInt(body.RetryAfter, 10)))
	}
	if shadowed {
		return hs, nil
	}
	hs = append(hs, header("content-type", respond.ContentTypeJSON))
	return hs, respond.AppendBody(nil, body)
}

// headers renders draft-ietf-httpapi-ratelimit-headers (draft 11)
// RateLimit-Policy and RateLimit, one member per bucket the answer counts,
// as Check's are: named by the limit's name or, unnamed, by its Key
// ("override" for a request's own limit), a name that repeats for another
// bucket (the same limit met by several descriptors) followed by #2, #3...;
// q is the bucket's capacity (the burst, when rls.burst sets one) and w
// the seconds it takes to refill from empty, so r, the whole tokens left,
// never exceeds q. t is the status's duration_until_reset, or the time
// until full for a request that can never pass. Durations are whole
// seconds.
func (p *Plan) headers(resp *rlsv3.RateLimitResponse, res []limiter.Result) []*corev3.HeaderValue {
	var pol, cur []byte
	var seen map[string]int
	var done map[int]bool
	for i := range p.Items {
		it, st := &p.Items[i], resp.Statuses[i]
		if st.CurrentLimit == nil {
			continue
		}
		if it.Meets == Bucketed {
			if done[it.Bucket] {
				continue // a bucket two descriptors name is one member
			}
			if done == nil {
				done = map[int]bool{}
			}
			done[it.Bucket] = true
		}
		name := it.Name
		if name == "" && it.Limit != nil {
			name = it.Limit.Key
		}
		if name == "" {
			name = "override"
		}
		if seen == nil {
			seen = map[string]int{}
		}
		if seen[name]++; seen[name] > 1 {
			name += "#" + strconv.Itoa(seen[name])
		}
		q, w, t := int64(0), it.Unit.Seconds, st.DurationUntilReset.GetSeconds()
		if it.Meets == Bucketed {
			lim := p.Buckets[it.Bucket].Request.Limit
			q, w = lim.Capacity, respond.Window(lim)
			if st.DurationUntilReset == nil {
				t = respond.Seconds(res[it.Bucket].ResetAfter)
			}
		}
		if len(pol) > 0 {
			pol, cur = append(pol, ", "...), append(cur, ", "...)
		}
		pol = respond.AppendPolicy(pol, name, q, w)
		cur = respond.AppendRateLimit(cur, name, int64(st.LimitRemaining), t)
	}
	if len(pol) == 0 {
		return nil
	}
	return []*corev3.HeaderValue{header(respond.HeaderPolicy, string(pol)), header(respond.HeaderRateLimit, string(cur))}
}

// header is one response header. The rate limit API carries plain
// HeaderValues, without an append action: Envoy's rate limit filter adds
// them to its 429, or to the upstream's response when the answer is OK
// (Filter::populateResponseHeaders, HeaderMapImpl::copyFrom).
func header(name, value string) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: name, Value: value}
}
