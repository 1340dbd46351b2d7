package ratelimit

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/internal/grpccodec"
)

// Encoding RateLimitResponses by hand, as the Check door encodes its
// answers: sizes first, then one slice of exactly that size, the bytes
// proto.Marshal writes (fields in number order, zero values left out, a
// present empty message as its tag and length 0), which
// TestTheResponseEncoderIsProtoMarshal checks on every kind of answer the
// door gives. protobuf-go's reflection-driven marshalling cost the door
// several thousand instructions a decision (docs/performance.md).
//
// Only the fields the door sets are written. A response that sets any
// other (dynamic metadata, a quota, a unit multiplier, a header's raw
// value) or a string that is not valid UTF-8 is left to proto.Marshal:
// EncodeRateLimitResponse says so and grpccodec.Fast falls back.
// TestTheResponseEncoderKnowsEveryField fails when a new version of
// Envoy's API adds a field this file does not weigh.

// Field numbers (envoy.service.ratelimit.v3, envoy.config.core.v3,
// google.protobuf.Duration).
const (
	fRespOverallCode      = 1
	fRespStatuses         = 2
	fRespHeadersToAdd     = 3
	fRespRequestHeaders   = 4
	fRespRawBody          = 5
	fStatusCode           = 1
	fStatusCurrentLimit   = 2
	fStatusRemaining      = 3
	fStatusUntilReset     = 4
	fLimitRequestsPerUnit = 1
	fLimitUnit            = 2
	fLimitName            = 3
	fDurationSeconds      = 1
	fDurationNanos        = 2
	fHeaderKey            = 1
	fHeaderValue          = 2
)

// EncodeRateLimitResponse returns r's wire form, the bytes proto.Marshal
// writes, or false when r sets a field this encoder does not write.
func EncodeRateLimitResponse(r *rlsv3.RateLimitResponse) ([]byte, bool) {
	if !responseEncodable(r) {
		return nil, false
	}
	n := grpccodec.SizeVarint(fRespOverallCode, uint64(int64(r.OverallCode)))
	for _, st := range r.Statuses {
		n += grpccodec.SizeMessage(fRespStatuses, sizeDescriptorStatus(st))
	}
	n += sizeHeaders(fRespHeadersToAdd, r.ResponseHeadersToAdd) + sizeHeaders(fRespRequestHeaders, r.RequestHeadersToAdd)
	n += sizeBytes(fRespRawBody, r.RawBody)

	b := make([]byte, 0, n)
	b = grpccodec.AppendVarint(b, fRespOverallCode, uint64(int64(r.OverallCode)))
	for _, st := range r.Statuses {
		b = grpccodec.AppendMessageHead(b, fRespStatuses, sizeDescriptorStatus(st))
		b = appendDescriptorStatus(b, st)
	}
	b = appendHeaders(b, fRespHeadersToAdd, r.ResponseHeadersToAdd)
	b = appendHeaders(b, fRespRequestHeaders, r.RequestHeadersToAdd)
	if len(r.RawBody) > 0 {
		b = grpccodec.AppendMessageHead(b, fRespRawBody, len(r.RawBody))
		b = append(b, r.RawBody...)
	}
	return b, true
}

// responseEncodable reports whether r sets only the fields written here.
func responseEncodable(r *rlsv3.RateLimitResponse) bool {
	if r == nil || r.DynamicMetadata != nil || r.Quota != nil {
		return false
	}
	for _, st := range r.Statuses {
		if st == nil || st.Quota != nil {
			return false
		}
		if l := st.CurrentLimit; l != nil && (l.UnitMultiplier != nil || !grpccodec.ValidUTF8(l.Name)) {
			return false
		}
	}
	return headersEncodable(r.ResponseHeadersToAdd) && headersEncodable(r.RequestHeadersToAdd)
}

func headersEncodable(hs []*corev3.HeaderValue) bool {
	for _, h := range hs {
		if h == nil || len(h.RawValue) > 0 || !grpccodec.ValidUTF8(h.Key) || !grpccodec.ValidUTF8(h.Value) {
			return false
		}
	}
	return true
}

// Sizes, in bytes, of each message's fields (not its own tag and length).

func sizeDescriptorStatus(st *rlsv3.RateLimitResponse_DescriptorStatus) int {
	n := grpccodec.SizeVarint(fStatusCode, uint64(int64(st.Code)))
	if l := st.CurrentLimit; l != nil {
		n += grpccodec.SizeMessage(fStatusCurrentLimit, sizeLimit(l))
	}
	n += grpccodec.SizeVarint(fStatusRemaining, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		n += grpccodec.SizeMessage(fStatusUntilReset, sizeDuration(d))
	}
	return n
}

func sizeLimit(l *rlsv3.RateLimitResponse_RateLimit) int {
	return grpccodec.SizeVarint(fLimitRequestsPerUnit, uint64(l.RequestsPerUnit)) +
		grpccodec.SizeVarint(fLimitUnit, uint64(int64(l.Unit))) + grpccodec.SizeString(fLimitName, l.Name)
}

func sizeDuration(d *durationpb.Duration) int {
	return grpccodec.SizeVarint(fDurationSeconds, uint64(d.Seconds)) + grpccodec.SizeVarint(fDurationNanos, uint64(int64(d.Nanos)))
}

func sizeHeaders(num protowire.Number, hs []*corev3.HeaderValue) int {
	n := 0
	for _, h := range hs {
		n += grpccodec.SizeMessage(num, sizeHeader(h))
	}
	return n
}

func sizeHeader(h *corev3.HeaderValue) int {
	return grpccodec.SizeString(fHeaderKey, h.Key) + grpccodec.SizeString(fHeaderValue, h.Value)
}

func sizeBytes(num protowire.Number, b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return grpccodec.SizeMessage(num, len(b))
}

// Writers, in field order.

func appendDescriptorStatus(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	b = grpccodec.AppendVarint(b, fStatusCode, uint64(int64(st.Code)))
	if l := st.CurrentLimit; l != nil {
		b = grpccodec.AppendMessageHead(b, fStatusCurrentLimit, sizeLimit(l))
		b = grpccodec.AppendVarint(b, fLimitRequestsPerUnit, uint64(l.RequestsPerUnit))
		b = grpccodec.AppendVarint(b, fLimitUnit, uint64(int64(l.Unit)))
		b = grpccodec.AppendString(b, fLimitName, l.Name)
	}
	b = grpccodec.AppendVarint(b, fStatusRemaining, uint64(st.LimitRemaining))
	if d := st.DurationUntilReset; d != nil {
		b = grpccodec.AppendMessageHead(b, fStatusUntilReset, sizeDuration(d))
		b = grpccodec.AppendVarint(b, fDurationSeconds, uint64(d.Seconds))
		b = grpccodec.AppendVarint(b, fDurationNanos, uint64(int64(d.Nanos)))
	}
	return b
}

func appendHeaders(b []byte, num protowire.Number, hs []*corev3.HeaderValue) []byte {
	for _, h := range hs {
		b = grpccodec.AppendMessageHead(b, num, sizeHeader(h))
		b = grpccodec.AppendString(b, fHeaderKey, h.Key)
		b = grpccodec.AppendString(b, fHeaderValue, h.Value)
	}
	return b
}
