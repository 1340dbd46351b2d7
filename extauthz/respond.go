package extauthz

import (
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/respond"
)

// Header names Floodgate sets. Envoy lower-cases header names anyway; HTTP/2
// requires it. The RateLimit fields are every front end's (limiter/respond).
const (
	HeaderLimit      = respond.HeaderLimit
	HeaderRemaining  = respond.HeaderRemaining
	HeaderReset      = respond.HeaderReset
	HeaderPolicy     = respond.HeaderPolicy
	HeaderRateLimit  = respond.HeaderRateLimit
	HeaderRetryAfter = respond.HeaderRetryAfter
	HeaderDegraded   = respond.HeaderDegraded
	// HeaderContentType is a denial's, whose body is JSON.
	HeaderContentType = "content-type"
	// For gRPC callers (see denyResponse).
	HeaderGRPCStatus   = "grpc-status"
	HeaderGRPCPushback = "grpc-retry-pushback-ms"
)

// outcome is a decision ready to render: the enforced policies that took
// part and their results.
type outcome struct {
	policies []*Policy
	results  []limiter.Result
	allowed  bool
	degraded bool // the store failed; the failure mode decided
	grpc     bool // the downstream request is gRPC (View.GRPC)
}

// Rendering. A response is built in two steps so that it costs few
// allocations whatever its headers: first every header is listed, its value
// either a string that already exists (a policy's rendered RateLimit-Policy
// member, "true") or bytes appended to one buffer (the numbers); then the
// buffer becomes one string, sliced into the values, and every object of the
// response is taken from two allocations: one for the CheckResponse, its
// status and its list of headers, one for the headers themselves (sized to
// their number). Nothing is shared between responses.

// maxRendered is how many headers a response has at most: a deny with both
// header families, Retry-After, the degraded mark, Content-Type and, for a
// gRPC caller, grpc-status and grpc-retry-pushback-ms.
const maxRendered = 10

// headerPair is one response header: the option and the value it points to.
type headerPair struct {
	opt corev3.HeaderValueOption
	val corev3.HeaderValue
}

// renderer collects a response's headers and the bytes of their values.
// Renderers are pooled: the buffers keep their capacity.
type renderer struct {
	buf  []byte
	hdrs []renderedHeader
}

// renderedHeader is a header's key and its value: fixed, or buf[start:end].
type renderedHeader struct {
	key        string
	fixed      string
	start, end int
	inBuf      bool
}

var rendererPool = sync.Pool{New: func() any {
	return &renderer{buf: make([]byte, 0, 256), hdrs: make([]renderedHeader, 0, maxRendered)}
}}

func getRenderer() *renderer { return rendererPool.Get().(*renderer) }

func (r *renderer) release() {
	if cap(r.buf) > 64<<10 {
		return // an outsized one is left to the collector
	}
	r.buf = r.buf[:0]
	clear(r.hdrs)
	r.hdrs = r.hdrs[:0]
	rendererPool.Put(r)
}

// fixed adds a header whose value is an existing string.
func (r *renderer) fixed(key, value string) {
	r.hdrs = append(r.hdrs, renderedHeader{key: key, fixed: value})
}

// mark starts a value rendered into the buffer; done adds the header.
func (r *renderer) mark() int { return len(r.buf) }
func (r *renderer) done(key string, start int) {
	r.hdrs = append(r.hdrs, renderedHeader{key: key, start: start, end: len(r.buf), inBuf: true})
}

func (r *renderer) int(key string, n int64) {
	start := r.mark()
	r.buf = strconv.AppendInt(r.buf, n, 10)
	r.done(key, start)
}

// options returns the headers as Envoy's options, each overwriting any value
// already present: a client cannot smuggle its own RateLimit headers past
// us, whatever Envoy version applies it (an unset append_action meant
// different things in different Envoy versions). text is the
// buffer as a string; the options are appended to opts.
func (r *renderer) options(text string, opts []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	pairs := make([]headerPair, len(r.hdrs))
	for i := range r.hdrs {
		h, p := &r.hdrs[i], &pairs[i]
		p.val.Key = h.key
		if h.inBuf {
			p.val.Value = text[h.start:h.end]
		} else {
			p.val.Value = h.fixed
		}
		p.opt.Header = &p.val
		p.opt.AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		opts = append(opts, &p.opt)
	}
	return opts
}

// rateLimitHeaders renders the configured header families for o. legacy
// reports one policy: the denying one on a deny, else the one with the
// fewest tokens left.
func (e *Engine) rateLimitHeaders(o *outcome, deny int, r *renderer) {
	if len(o.policies) == 0 {
		return
	}
	if e.legacy {
		i := deny
		if i < 0 {
			i = respond.Tightest(o.results)
		}
		res := &o.results[i]
		if p := o.policies[i]; res.Limit == p.Limit.Capacity {
			r.fixed(HeaderLimit, p.capacity)
		} else {
			r.int(HeaderLimit, res.Limit) // a degraded decision's scaled limit
		}
		r.int(HeaderRemaining, res.Remaining)
		r.int(HeaderReset, respond.Seconds(res.ResetAfter))
	}
	if e.structured {
		if p := o.policies[0]; len(o.policies) == 1 && o.results[0].Limit == p.Limit.Capacity && p.Quota == nil {
			r.fixed(HeaderPolicy, p.policyMember)
		} else {
			start := r.mark()
			for j, p := range o.policies {
				if j > 0 {
					r.buf = append(r.buf, ", "...)
				}
				if p.Quota != nil {
					// A quota: its limit (a degraded decision's share) over
					// its current window.
					r.buf = respond.AppendPolicy(r.buf, p.Name, o.results[j].Limit, respond.Seconds(o.results[j].Window))
					continue
				}
				if q := o.results[j].Limit; q != p.Limit.Capacity {
					// A degraded decision's local bucket: its capacity,
					// refilling from empty in the policy's window.
					r.buf = respond.AppendPolicy(r.buf, p.Name, q, p.window)
					continue
				}
				r.buf = append(r.buf, p.policyMember...)
			}
			r.done(HeaderPolicy, start)
		}
		start := r.mark()
		for j, p := range o.policies {
			if j > 0 {
				r.buf = append(r.buf, ", "...)
			}
			res := &o.results[j]
			r.buf = respond.AppendRateLimit(r.buf, p.Name, res.Remaining, respond.Seconds(res.ResetAfter))
		}
		r.done(HeaderRateLimit, start)
	}
}

// okBlock is every object of an allow response, allocated together.
type okBlock struct {
	resp   authv3.CheckResponse
	status rpcstatus.Status
	http   authv3.CheckResponse_OkResponse
	ok     authv3.OkHttpResponse
	opts   [maxRendered]*corev3.HeaderValueOption
}

// okResponse lets the request through. Headers go to the client
// (response_headers_to_add), not upstream (headers).
func (e *Engine) okResponse(o *outcome) *authv3.CheckResponse {
	r := getRenderer()
	defer r.release()
	e.renderOK(o, r)
	b := &okBlock{}
	b.ok.ResponseHeadersToAdd = r.options(string(r.buf), b.opts[:0])
	b.status.Code = int32(codes.OK)
	b.http.OkResponse = &b.ok
	b.resp.Status, b.resp.HttpResponse = &b.status, &b.http
	return &b.resp
}

// denyBlock is every object of a deny response, allocated together.
type denyBlock struct {
	resp   authv3.CheckResponse
	status rpcstatus.Status
	http   authv3.CheckResponse_DeniedResponse
	denied authv3.DeniedHttpResponse
	httpSt typev3.HttpStatus
	opts   [maxRendered]*corev3.HeaderValueOption
}

// denyResponse answers 429 with RateLimit headers, Retry-After and a JSON
// body. The gRPC status is non-OK, which is what makes Envoy deny; the HTTP
// status comes only from denied_response.
//
// A gRPC caller never sees that 429: Envoy turns a local reply to a gRPC
// request into a trailers-only gRPC response and, unless the headers already
// carry grpc-status, maps 429 to UNAVAILABLE (14), a code gRPC clients and
// retry policies retry at once (Utility::prepareLocalReply and
// Grpc::Utility::httpToGrpcStatus, source/common/http/utility.cc and
// source/common/grpc/status.cc; the denied headers are applied before that
// check). So for a gRPC caller the denial carries grpc-status 8
// (RESOURCE_EXHAUSTED) and grpc-retry-pushback-ms, Retry-After in
// milliseconds, which a gRPC client's retry policy waits for (gRFC A6); a
// request that can never pass gets a negative pushback: do not retry.
func (e *Engine) denyResponse(o *outcome, retryAfter time.Duration) *authv3.CheckResponse {
	r := getRenderer()
	defer r.release()
	bodyStart := e.renderDeny(o, retryAfter, r)
	text := string(r.buf)

	b := &denyBlock{}
	b.denied.Headers = r.options(text, b.opts[:0])
	b.denied.Body = text[bodyStart:]
	b.httpSt.Code = typev3.StatusCode_TooManyRequests
	b.denied.Status = &b.httpSt
	b.status.Code, b.status.Message = int32(codes.ResourceExhausted), "rate limited"
	b.http.DeniedResponse = &b.denied
	b.resp.Status, b.resp.HttpResponse = &b.status, &b.http
	return &b.resp
}

// renderOK renders an allow's headers into r: the RateLimit fields and,
// when the failure mode decided, the degraded mark.
func (e *Engine) renderOK(o *outcome, r *renderer) {
	e.rateLimitHeaders(o, -1, r)
	if o.degraded {
		r.fixed(HeaderDegraded, "true")
	}
}

// renderDeny renders a deny into r: its headers (see denyResponse), then
// its JSON body, last in the buffer from the offset it returns.
func (e *Engine) renderDeny(o *outcome, retryAfter time.Duration, r *renderer) (bodyStart int) {
	d := respond.Denying(o.results)
	e.rateLimitHeaders(o, d, r)
	exceeds := d >= 0 && o.results[d].ExceedsCapacity
	n := respond.RetryAfter(retryAfter)
	if !exceeds {
		r.int(HeaderRetryAfter, n)
	}
	if o.degraded {
		r.fixed(HeaderDegraded, "true")
	}
	if o.grpc {
		r.fixed(HeaderGRPCStatus, "8")
		if exceeds {
			r.fixed(HeaderGRPCPushback, "-1")
		} else {
			r.int(HeaderGRPCPushback, n*1000)
		}
	}
	r.fixed(HeaderContentType, respond.ContentTypeJSON)
	// The body goes last in the buffer.
	bodyStart = r.mark()
	body := respond.Body{RetryAfter: n, Never: exceeds, Degraded: o.degraded}
	if d >= 0 {
		body.Limit = o.policies[d].Name
	}
	r.buf = respond.AppendBody(r.buf, body)
	return bodyStart
}

// statusBlock is a response that is a status alone.
type statusBlock struct {
	resp   authv3.CheckResponse
	status rpcstatus.Status
}

// tcpDeny refuses a connection checked by Envoy's network filter, which
// reads nothing but the status.
func tcpDeny() *authv3.CheckResponse {
	b := &statusBlock{}
	b.status.Code, b.status.Message = int32(codes.ResourceExhausted), "rate limited"
	b.resp.Status = &b.status
	return &b.resp
}

// plainOK allows a request no policy matched, leaving it untouched.
func plainOK() *authv3.CheckResponse {
	b := &statusBlock{}
	b.resp.Status = &b.status
	return &b.resp
}
