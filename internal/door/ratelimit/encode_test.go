package ratelimit

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// doorResponses are the answers the rate limit service gives, taken from
// it: within and over limits (named or not), descriptors no limit matches,
// shadow limits, unlimited ones, the draft RateLimit headers, the failure
// mode's answer, several descriptors at once.
func doorResponses(t *testing.T) []*rlsv3.RateLimitResponse {
	t.Helper()
	cfg, err := rls.Parse([]string{"edge.yaml"}, map[string][]byte{"edge.yaml": []byte(`
domain: edge
descriptors:
  - key: api_key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 2}
  - key: path
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 100000}
`)})
	if err != nil {
		t.Fatal(err)
	}
	store := storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0)))
	var out []*rlsv3.RateLimitResponse
	for _, headers := range []bool{false, true} {
		svc := rls.NewService(cfg, rls.ServiceOptions{
			Hash:     func(tag, value string) string { return tag + "|" + value },
			Store:    store,
			Response: rls.ResponseOptions{Headers: headers},
		})
		for _, ds := range [][][2]string{
			{{"api_key", "a"}}, {{"api_key", "a"}}, {{"api_key", "a"}}, // within, within, over
			{{"path", "/x"}}, {{"path", "/x"}}, // a shadow limit, then over it
			{{"free", "x"}}, {{"nobody", "x"}}, {{"day", "d"}},
			{{"api_key", "b"}, {"path", "/y"}, {"nobody", "z"}, {"day", "d"}},
		} {
			req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1}
			for _, d := range ds {
				req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: d[0], Value: d[1]}}})
			}
			if headers {
				req.Descriptors[0].Entries[0].Value += "-h" // fresh buckets
			}
			r, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
	}
	down := rls.NewService(cfg, rls.ServiceOptions{
		Hash:      func(tag, value string) string { return tag + "|" + value },
		Store:     downStore{},
		OnFailure: decide.Deny,
	})
	r, err := down.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "api_key", Value: "a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return append(out, r)
}

// downStore is a store that cannot decide.
type downStore struct{}

func (downStore) Take(context.Context, []limiter.Request, []limiter.Result) (bool, error) {
	return false, fmt.Errorf("%w: down", limiter.ErrUnavailable)
}

// edgeResponses set every field the encoder writes at its edges: zero and
// largest values, negative durations, present empty messages, raw bodies.
func edgeResponses() []*rlsv3.RateLimitResponse {
	return []*rlsv3.RateLimitResponse{
		{},
		{OverallCode: rlsv3.RateLimitResponse_UNKNOWN, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{},
			DurationUntilReset: &durationpb.Duration{},
		}}},
		{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OVER_LIMIT,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: "ünïcode", RequestsPerUnit: math.MaxUint32, Unit: rlsv3.RateLimitResponse_RateLimit_YEAR},
			LimitRemaining:     math.MaxUint32,
			DurationUntilReset: &durationpb.Duration{Seconds: -5, Nanos: -999_999_999},
		}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{DurationUntilReset: &durationpb.Duration{Seconds: math.MaxInt64, Nanos: 999_999_999}}}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{}, {Key: "retry-after"}, {Value: "7"}},
			RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "x-ratelimit-degraded", Value: "true"}},
			RawBody:             []byte{0, 0xff, '{', '}'}},
		{RawBody: []byte{}},
	}
}

// randomResponse is a response of the fields the encoder writes, drawn
// from r.
func randomResponse(r *rand.Rand) *rlsv3.RateLimitResponse {
	str := func() string {
		b := make([]byte, r.IntN(200))
		for i := range b {
			b[i] = byte(' ' + r.IntN(95))
		}
		return string(b)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(r.IntN(3))}
	for range r.IntN(40) {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(r.IntN(3)), LimitRemaining: r.Uint32() >> r.IntN(32)}
		if r.IntN(4) > 0 {
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: str(), RequestsPerUnit: r.Uint32() >> r.IntN(32), Unit: rlsv3.RateLimitResponse_RateLimit_Unit(r.IntN(7))}
		}
		if r.IntN(4) > 0 {
			st.DurationUntilReset = &durationpb.Duration{Seconds: r.Int64N(1<<40) - 1<<20, Nanos: r.Int32N(2_000_000_000) - 1_000_000_000}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	for range r.IntN(6) {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: str(), Value: str()})
	}
	for range r.IntN(3) {
		resp.RequestHeadersToAdd = append(resp.RequestHeadersToAdd, &corev3.HeaderValue{Key: str(), Value: str()})
	}
	if r.IntN(3) == 0 {
		resp.RawBody = []byte(str())
	}
	return resp
}

// TestTheResponseEncoderIsProtoMarshal: on every kind of answer the door
// gives, the edges of each field and 2,000 random responses, the encoder
// writes the bytes proto.Marshal writes.
func TestTheResponseEncoderIsProtoMarshal(t *testing.T) {
	door := doorResponses(t)
	var over, headers, limits int
	for _, r := range door {
		if r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			over++
		}
		if len(r.ResponseHeadersToAdd) > 0 {
			headers++
		}
		for _, st := range r.Statuses {
			if st.CurrentLimit != nil && st.DurationUntilReset != nil {
				limits++
			}
		}
	}
	if over == 0 || headers == 0 || limits == 0 {
		t.Fatalf("the door's answers hold %d over the limit, %d with headers, %d statuses with a limit and a reset: want each kind", over, headers, limits)
	}
	resps := append(door, edgeResponses()...)
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		resps = append(resps, randomResponse(r))
	}
	for i, resp := range resps {
		want, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := EncodeRateLimitResponse(resp)
		if !ok {
			t.Fatalf("response %d declined: %v", i, resp)
		}
		if string(got) != string(want) {
			t.Fatalf("response %d: the encoder wrote\n%x\nproto.Marshal\n%x\nfor %v", i, got, want, resp)
		}
		if len(got) != cap(got) {
			t.Errorf("response %d: %d bytes in a slice of %d: the size was not exact", i, len(got), cap(got))
		}
	}
}

// TestTheResponseEncoderDeclinesWhatItDoesNotWrite: a response setting a
// field the encoder does not write, or a string proto.Marshal refuses, is
// left to protobuf-go.
func TestTheResponseEncoderDeclinesWhatItDoesNotWrite(t *testing.T) {
	st := func(f func(*rlsv3.RateLimitResponse_DescriptorStatus)) *rlsv3.RateLimitResponse {
		s := &rlsv3.RateLimitResponse_DescriptorStatus{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{}}
		f(s)
		return &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{s}}
	}
	for name, resp := range map[string]*rlsv3.RateLimitResponse{
		"dynamic metadata": {DynamicMetadata: &structpb.Struct{}},
		"a quota":          {Quota: &rlsv3.RateLimitResponse_Quota{}},
		"a status's quota": st(func(s *rlsv3.RateLimitResponse_DescriptorStatus) { s.Quota = &rlsv3.RateLimitResponse_Quota{} }),
		"a unit multiplier": st(func(s *rlsv3.RateLimitResponse_DescriptorStatus) {
			s.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(2)
		}),
		"a name not UTF-8":   st(func(s *rlsv3.RateLimitResponse_DescriptorStatus) { s.CurrentLimit.Name = "\xff" }),
		"a nil status":       {Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{nil}},
		"a raw header value": {ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "k", RawValue: []byte("v")}}},
		"a value not UTF-8":  {RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "k", Value: "\xc3"}}},
		"a nil header":       {ResponseHeadersToAdd: []*corev3.HeaderValue{nil}},
	} {
		if b, ok := EncodeRateLimitResponse(resp); ok {
			t.Errorf("%s: encoded as %x, want it left to proto.Marshal", name, b)
		}
	}
	if _, ok := Codec().Encode(&rlsv3.RateLimitRequest{}); ok {
		t.Error("the codec encoded a message that is no RateLimitResponse")
	}
}

// TestTheResponseEncoderKnowsEveryField: every field of the messages the
// encoder writes is either written or makes it decline; a field added by a
// new version of the API fails here until it is weighed. The field
// numbers the encoder writes are the schema's.
func TestTheResponseEncoderKnowsEveryField(t *testing.T) {
	const declines protoreflect.FieldNumber = -1
	known := map[protoreflect.ProtoMessage]map[string]protoreflect.FieldNumber{
		&rlsv3.RateLimitResponse{}: {"overall_code": fRespOverallCode, "statuses": fRespStatuses, "response_headers_to_add": fRespHeadersToAdd,
			"request_headers_to_add": fRespRequestHeaders, "raw_body": fRespRawBody, "dynamic_metadata": declines, "quota": declines},
		&rlsv3.RateLimitResponse_DescriptorStatus{}: {"code": fStatusCode, "current_limit": fStatusCurrentLimit, "limit_remaining": fStatusRemaining,
			"duration_until_reset": fStatusUntilReset, "quota": declines},
		&rlsv3.RateLimitResponse_RateLimit{}: {"requests_per_unit": fLimitRequestsPerUnit, "unit": fLimitUnit, "name": fLimitName, "unit_multiplier": declines},
		&durationpb.Duration{}:               {"seconds": fDurationSeconds, "nanos": fDurationNanos},
		&corev3.HeaderValue{}:                {"key": fHeaderKey, "value": fHeaderValue, "raw_value": declines},
	}
	for m, fields := range known {
		d := m.ProtoReflect().Descriptor()
		fs := d.Fields()
		for i := 0; i < fs.Len(); i++ {
			f := fs.Get(i)
			num, ok := fields[string(f.Name())]
			switch {
			case !ok:
				t.Errorf("%s.%s (%d) is new to the encoder: write it or decline responses that set it", d.FullName(), f.Name(), f.Number())
			case num != declines && num != f.Number():
				t.Errorf("%s.%s is field %d, the encoder writes it as %d", d.FullName(), f.Name(), f.Number(), num)
			case num >= 16:
				t.Errorf("%s.%s is field %d: its tag takes two bytes, the encoder writes one", d.FullName(), f.Name(), num)
			}
		}
	}
}

// BenchmarkEncodeRateLimitResponse: an answer of one descriptor within its
// limit, as the door gives it, through proto.Marshal and the encoder.
func BenchmarkEncodeRateLimitResponse(b *testing.B) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1_000_000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
		LimitRemaining:     999_999,
		DurationUntilReset: &durationpb.Duration{Seconds: 1},
	}}}
	b.Run("proto.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, ok := EncodeRateLimitResponse(resp); !ok {
				b.Fatal("declined")
			}
		}
	})
}
