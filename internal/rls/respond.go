package rls

import (
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
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
// limit, the whole tokens left and how long until the bucket is full
// (allowed) or until its cost fits (over the limit). A denial also carries
// a JSON raw_body with its content-type, as a denied Check does. res holds
// each bucket's result, in the plan's bucket order; d is the decide step's
// outcome.
func (p *Plan) Respond(res []limiter.Result, d *decide.Decision, o ResponseOptions) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(p.Items)),
	}
	var retryAfter time.Duration
	for i := range p.Items {
		it := &p.Items[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch it.Kind {
		case NoLimit:
			continue
		case Unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
			Name:            it.Name,
			RequestsPerUnit: it.RequestsPerUnit,
			Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[it.Unit.Name]),
		}
		over, wait := false, time.Duration(0)
		if it.Kind == Never {
			over, wait = true, time.Duration(it.Unit.Seconds)*time.Second
		} else {
			r := &res[it.Bucket]
			st.LimitRemaining = uint32(min(max(r.Remaining, 0), math.MaxUint32))
			wait = r.ResetAfter
			if !r.Allowed {
				over = true
				if r.RetryAfter > 0 {
					wait = r.RetryAfter
				}
			}
		}
		st.DurationUntilReset = &durationpb.Duration{Seconds: respond.Seconds(wait)}
		if over && !it.Shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			retryAfter = max(retryAfter, wait)
		}
	}
	if o.Headers {
		resp.ResponseHeadersToAdd = p.headers(resp)
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		resp.RawBody = respond.AppendBody(nil, respond.Body{RetryAfter: respond.RetryAfter(retryAfter)})
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, header("content-type", respond.ContentTypeJSON))
	}
	return resp
}

// headers renders draft-ietf-httpapi-ratelimit-headers (draft 11)
// RateLimit-Policy and RateLimit, one member per counted descriptor, named
// by the limit's name or, unnamed, by its place in the tree. Durations are
// whole seconds, as every status's duration_until_reset already is.
func (p *Plan) headers(resp *rlsv3.RateLimitResponse) []*corev3.HeaderValue {
	var pol, cur []byte
	for i := range p.Items {
		it, st := &p.Items[i], resp.Statuses[i]
		if st.CurrentLimit == nil {
			continue
		}
		name := it.Name
		if name == "" && it.Limit != nil {
			name = it.Limit.Key
		}
		if name == "" {
			name = "override"
		}
		if len(pol) > 0 {
			pol, cur = append(pol, ", "...), append(cur, ", "...)
		}
		pol = respond.AppendPolicy(pol, name, int64(it.RequestsPerUnit), it.Unit.Seconds)
		cur = respond.AppendRateLimit(cur, name, int64(st.LimitRemaining), st.DurationUntilReset.GetSeconds())
	}
	if len(pol) == 0 {
		return nil
	}
	return []*corev3.HeaderValue{header(respond.HeaderPolicy, string(pol)), header(respond.HeaderRateLimit, string(cur))}
}

// header is one response header. The rate limit API carries plain
// HeaderValues, without an append action: Envoy's rate limit filter decides
// how it adds them.
func header(name, value string) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: name, Value: value}
}
