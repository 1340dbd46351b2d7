// Package respond is what every front end tells a client about a decision,
// built once: the RateLimit header fields (the legacy RateLimit-Limit,
// -Remaining and -Reset, and draft-ietf-httpapi-ratelimit-headers'
// RateLimit-Policy and RateLimit), Retry-After, and the JSON body of a 429.
// Each front end puts them where its protocol carries them (a CheckResponse,
// a RateLimitResponse, an HTTP response); the values and their rounding are
// the same everywhere.
//
// The functions append to a byte slice, so a front end can render a whole
// answer into one buffer without allocating per field.
package respond

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

// Header names, lower case as Envoy and HTTP/2 carry them.
const (
	HeaderLimit      = "ratelimit-limit"
	HeaderRemaining  = "ratelimit-remaining"
	HeaderReset      = "ratelimit-reset"
	HeaderPolicy     = "ratelimit-policy"
	HeaderRateLimit  = "ratelimit"
	HeaderRetryAfter = "retry-after"
	// HeaderDegraded marks an answer the failure mode gave (the store could
	// not decide) or a per-replica fallback decided: "true".
	HeaderDegraded = "x-ratelimit-degraded"
	// ContentTypeJSON is the content type of the 429 body.
	ContentTypeJSON = "application/json"
)

// Seconds rounds d up to whole seconds, as the header fields carry time: a
// client told to wait N seconds finds its tokens there.
func Seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// RetryAfter is the Retry-After of a denial that waits d: whole seconds,
// at least 1 (a client told 0 would retry at once).
func RetryAfter(d time.Duration) int64 { return max(1, Seconds(d)) }

// Window is the time, in whole seconds rounded up, that l takes to refill
// from empty: RateLimit-Policy's w.
func Window(l limiter.Limit) int64 {
	num, den := l.Rate.Fraction()
	return (l.Capacity*den + num - 1) / num
}

// Tightest returns the index of the result a single-valued field reports
// (the legacy RateLimit-*): the one with the fewest tokens left, and of
// those the one furthest from full. It is 0 for an empty res.
func Tightest(res []limiter.Result) int {
	i := 0
	for j := range res {
		r, best := &res[j], &res[i]
		if r.Remaining < best.Remaining || (r.Remaining == best.Remaining && r.ResetAfter > best.ResetAfter) {
			i = j
		}
	}
	return i
}

// Denying returns the index of the result a denial names: one whose cost
// can never fit, else the one with the longest wait among those that could
// not pay; -1 when every result was allowed.
func Denying(res []limiter.Result) int {
	d := -1
	for i := range res {
		r := &res[i]
		if r.ExceedsCapacity {
			return i
		}
		if !r.Allowed && (d < 0 || r.RetryAfter > res[d].RetryAfter) {
			d = i
		}
	}
	return d
}

// AppendPolicy appends one RateLimit-Policy list member, `"name";q=Q;w=W`:
// a quota of q tokens over a window of w seconds.
func AppendPolicy(b []byte, name string, q, w int64) []byte {
	b = appendString(b, name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, q, 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, w, 10)
}

// AppendRateLimit appends one RateLimit list member, `"name";r=R;t=T`: r
// tokens left, t seconds until the bucket is full again.
func AppendRateLimit(b []byte, name string, r, t int64) []byte {
	b = appendString(b, name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, r, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, t, 10)
}

// appendString appends s as a structured field string (RFC 9651 §3.3.3):
// quoted, with `"` and `\` escaped. A string holds printable ASCII only, so
// any other byte becomes '?': a name from a rate limit configuration may
// hold anything, and a header must stay valid.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// Body is what the JSON body of a 429 says.
type Body struct {
	// Limit names the policy or rate limit that denied ("" when none does:
	// the failure mode denied).
	Limit string
	// RetryAfter is the Retry-After in seconds; ignored when Never.
	RetryAfter int64
	// Never: the request costs more than the limit's capacity and can
	// never pass, so there is no time to retry after.
	Never bool
	// Degraded: the failure mode, or a per-replica fallback, decided.
	Degraded bool
}

// AppendBody appends the JSON body of a 429:
// {"error":"rate_limited","policy":NAME,"retry_after":N}, with a reason in
// place of retry_after for a request that can never pass, and
// "degraded":true when the store did not decide.
func AppendBody(b []byte, body Body) []byte {
	b = append(b, `{"error":"rate_limited"`...)
	if body.Limit != "" {
		b = append(b, `,"policy":`...)
		b = appendJSONString(b, body.Limit)
	}
	if body.Never {
		b = append(b, `,"reason":"the request costs more tokens than the policy's capacity: it can never pass"`...)
	} else {
		b = append(b, `,"retry_after":`...)
		b = strconv.AppendInt(b, body.RetryAfter, 10)
	}
	if body.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string. Policy names need no
// escaping, so they are copied as they are; anything else goes through
// encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
