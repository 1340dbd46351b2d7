package extauthz

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/floodgate/floodgate/limiter"
)

// Header names Floodgate sets. Envoy lower-cases header names anyway; HTTP/2
// requires it.
const (
	HeaderLimit      = "ratelimit-limit"
	HeaderRemaining  = "ratelimit-remaining"
	HeaderReset      = "ratelimit-reset"
	HeaderPolicy     = "ratelimit-policy"
	HeaderRateLimit  = "ratelimit"
	HeaderRetryAfter = "retry-after"
	HeaderDegraded   = "x-ratelimit-degraded"
)

// header returns an option that overwrites any value already present: a
// client cannot smuggle its own RateLimit headers past us, whatever Envoy
// version applies it (ENVOY_CONTRACT §2.3).
func header(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, Value: value},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// seconds rounds a wait up to whole seconds, as headers carry it.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// outcome is a decision ready to render: the enforced policies that took
// part and their results.
type outcome struct {
	policies []*Policy
	results  []limiter.Result
	allowed  bool
	degraded bool // the store failed; the failure mode decided
}

// rateLimitHeaders renders the configured header families for o. legacy
// reports one policy: the denying one on a deny, else the one with the
// fewest tokens left.
func (e *Engine) rateLimitHeaders(o *outcome, deny int, hs []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	if len(o.policies) == 0 {
		return hs
	}
	if e.legacy {
		i := deny
		if i < 0 {
			i = 0
			for j := range o.results {
				r, best := &o.results[j], &o.results[i]
				if r.Remaining < best.Remaining || (r.Remaining == best.Remaining && r.ResetAfter > best.ResetAfter) {
					i = j
				}
			}
		}
		r := &o.results[i]
		hs = append(hs,
			header(HeaderLimit, strconv.FormatInt(r.Limit, 10)),
			header(HeaderRemaining, strconv.FormatInt(r.Remaining, 10)),
			header(HeaderReset, strconv.FormatInt(seconds(r.ResetAfter), 10)))
	}
	if e.structured {
		var pol, rl strings.Builder
		for j, p := range o.policies {
			if j > 0 {
				pol.WriteString(", ")
				rl.WriteString(", ")
			}
			pol.WriteString(p.policyMember)
			r := &o.results[j]
			rl.WriteString(`"`)
			rl.WriteString(p.Name)
			rl.WriteString(`";r=`)
			rl.WriteString(strconv.FormatInt(r.Remaining, 10))
			rl.WriteString(";t=")
			rl.WriteString(strconv.FormatInt(seconds(r.ResetAfter), 10))
		}
		hs = append(hs, header(HeaderPolicy, pol.String()), header(HeaderRateLimit, rl.String()))
	}
	return hs
}

// okResponse lets the request through. Headers go to the client
// (response_headers_to_add), not upstream (headers).
func (e *Engine) okResponse(o *outcome) *authv3.CheckResponse {
	hs := e.rateLimitHeaders(o, -1, make([]*corev3.HeaderValueOption, 0, 6))
	if o.degraded {
		hs = append(hs, header(HeaderDegraded, "true"))
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			ResponseHeadersToAdd: hs,
		}},
	}
}

// denying returns the index of the policy a deny names: one whose cost can
// never fit, else the one with the longest wait.
func denying(o *outcome) int {
	d := -1
	for i := range o.results {
		r := &o.results[i]
		if r.ExceedsCapacity {
			return i
		}
		if !r.Allowed && (d < 0 || r.RetryAfter > o.results[d].RetryAfter) {
			d = i
		}
	}
	return d
}

// denyResponse answers 429 with RateLimit headers, Retry-After and a JSON
// body. The gRPC status is non-OK, which is what makes Envoy deny; the HTTP
// status comes only from denied_response.
func (e *Engine) denyResponse(o *outcome, retryAfter time.Duration) *authv3.CheckResponse {
	d := denying(o)
	hs := e.rateLimitHeaders(o, d, make([]*corev3.HeaderValueOption, 0, 8))
	var body strings.Builder
	body.WriteString(`{"error":"rate_limited"`)
	if d >= 0 {
		body.WriteString(`,"policy":"`)
		body.WriteString(o.policies[d].Name) // names are [A-Za-z0-9_.-]: no escaping needed
		body.WriteString(`"`)
	}
	if d >= 0 && o.results[d].ExceedsCapacity {
		body.WriteString(`,"reason":"the request costs more tokens than the policy's capacity: it can never pass"`)
	} else {
		n := max(1, seconds(retryAfter))
		hs = append(hs, header(HeaderRetryAfter, strconv.FormatInt(n, 10)))
		body.WriteString(`,"retry_after":`)
		body.WriteString(strconv.FormatInt(n, 10))
	}
	if o.degraded {
		body.WriteString(`,"degraded":true`)
		hs = append(hs, header(HeaderDegraded, "true"))
	}
	body.WriteString("}")
	hs = append(hs, header("content-type", "application/json"))
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.ResourceExhausted), Message: "rate limited"},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
			Headers: hs,
			Body:    body.String(),
		}},
	}
}

// tcpDeny refuses a connection checked by Envoy's network filter, which
// reads nothing but the status.
func tcpDeny() *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.ResourceExhausted), Message: "rate limited"}}
}

// plainOK allows a request no policy matched, leaving it untouched.
func plainOK() *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)}}
}
