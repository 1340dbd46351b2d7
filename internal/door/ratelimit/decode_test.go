package ratelimit

import (
	"strconv"
	"testing"
	"unicode/utf8"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/grpccodec/codectest"
)

func entry(k, v string) *commonrl.RateLimitDescriptor_Entry {
	return &commonrl.RateLimitDescriptor_Entry{Key: k, Value: v}
}

// rateLimitRequests are RateLimitRequests as Envoy's rate limit filter and
// Envoy Gateway send them: one descriptor of one entry (floodbench's (r)),
// several descriptors of several entries, a per-descriptor hits_addend
// (apply_on_stream_done's cost), is_negative_hits, a limit override with a
// unit multiplier, and the edges (no descriptors, an empty descriptor, empty
// keys and values).
func rateLimitRequests() []*rlsv3.RateLimitRequest {
	return []*rlsv3.RateLimitRequest{
		{Domain: "floodbench", Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("api_key", "k_live_10000007")}}}, HitsAddend: 1},
		{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{
			{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("generic_key", "default"), entry("remote_address", "203.0.113.9")}},
			{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("header_match", "gold"), entry("user", "alice"), entry("path", "/api/v1/items")}},
			{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("destination_cluster", "backend")}},
		}},
		{Domain: "default/eg/http", Descriptors: []*commonrl.RateLimitDescriptor{
			{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("httproute/default/backend/rule/0/match/0", "rule-0-match-0")}, HitsAddend: wrapperspb.UInt64(150)},
			{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("k", "v")}, HitsAddend: wrapperspb.UInt64(0), IsNegativeHits: true},
			{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("k", "v")}, Limit: &commonrl.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(5)}},
		}, HitsAddend: 1<<32 - 1},
		{Domain: "edge"},
		{},
		{Descriptors: []*commonrl.RateLimitDescriptor{{}, {Entries: []*commonrl.RateLimitDescriptor_Entry{entry("", ""), {}}}}},
		{Domain: "ünïcode ✓", Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("schlüssel", "wert ✓")}}}},
	}
}

func rateLimitSeeds(t testing.TB) [][]byte {
	t.Helper()
	return codectest.MarshalAll(t, rateLimitRequests())
}

// sameAsProtoRLS checks that DecodeRateLimitRequest and protobuf-go agree
// on b (codectest.AgreeWithProto), and that the decoded entries are distinct
// messages.
func sameAsProtoRLS(t testing.TB, b []byte) {
	t.Helper()
	got := codectest.AgreeWithProto(t, b, DecodeRateLimitRequest)
	// The descriptors and entries share backing arrays: each must be its
	// own message all the same.
	seen := map[*commonrl.RateLimitDescriptor_Entry]bool{}
	for _, d := range got.GetDescriptors() {
		for _, e := range d.GetEntries() {
			if seen[e] {
				t.Fatalf("input %q: an entry appears twice", b)
			}
			seen[e] = true
		}
	}
}

func TestTheRateLimitDecoderIsProtoUnmarshal(t *testing.T) {
	seeds := rateLimitSeeds(t)
	// The fast path decodes real requests itself (else this test would
	// only compare proto.Unmarshal with itself).
	for i, b := range seeds {
		var req rlsv3.RateLimitRequest
		if d := grpccodec.NewReader(b); !readRateLimitRequest(&d, &req) {
			t.Errorf("seed %d: the decoder gave up on a valid request", i)
		}
		sameAsProtoRLS(t, b)
	}
	// Two encodings concatenated: protobuf merges them (scalars: the last
	// wins; repeated fields: appended).
	sameAsProtoRLS(t, append(append([]byte{}, seeds[0]...), seeds[2]...))
	sameAsProtoRLS(t, append(append([]byte{}, seeds[2]...), seeds[1]...))

	tag := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	fixed := func(b []byte, num protowire.Number, v uint32) []byte {
		return protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), v)
	}
	wrap := func(entries ...[]byte) []byte { // a request of one descriptor holding entries
		var d []byte
		for _, e := range entries {
			d = tag(d, 1, e)
		}
		return tag(tag(nil, 1, []byte("edge")), 2, d)
	}
	// Invalid UTF-8 in a value, a key, the domain: proto3 refuses it; the
	// decoder hands it to DecodeLenient, which repairs it.
	sameAsProtoRLS(t, wrap(tag(tag(nil, 1, []byte("api_key")), 2, []byte("k\xff"))))
	sameAsProtoRLS(t, wrap(tag(tag(nil, 1, []byte("\xfe")), 2, []byte("v"))))
	sameAsProtoRLS(t, tag(nil, 1, []byte("edge\xc3")))
	// Unknown fields at every level, known fields with another wire type,
	// a message field set twice (merged), a varint above 32 bits in a
	// uint32 field (truncated).
	e := tag(tag(nil, 1, []byte("k")), 2, []byte("v"))
	sameAsProtoRLS(t, wrap(varint(e, 9, 7)))
	sameAsProtoRLS(t, wrap(varint(nil, 1, 5), varint(nil, 2, 5), e))
	sameAsProtoRLS(t, wrap(fixed(e, 2, 5)))
	desc := varint(varint(tag(tag(tag(nil, 1, e), 3, varint(nil, 1, 9)), 3, varint(varint(nil, 1, 11), 5, 1)), 4, 2), 77, 1)
	desc = tag(desc, 2, varint(tag(nil, 3, varint(nil, 1, 4)), 1, 1<<33|3))
	desc = varint(desc, 3, 5) // hits_addend as a varint: unknown
	sameAsProtoRLS(t, tag(varint(varint(nil, 3, 1<<40|7), 99, 1), 2, desc))
	sameAsProtoRLS(t, varint(nil, 2, 3))                                   // descriptors as a varint: unknown
	sameAsProtoRLS(t, tag(nil, 3, []byte("x")))                            // hits_addend as bytes: unknown
	sameAsProtoRLS(t, tag(nil, 2, tag(nil, 2, tag(nil, 3, []byte{0xff})))) // a unit_multiplier that is malformed

	// Random damage: truncations, flipped bytes, inserted bytes.
	codectest.Damaged(seeds, 3, func(b []byte) { sameAsProtoRLS(t, b) })
}

// FuzzRateLimitDecoder: for any bytes, the decoder and proto.Unmarshal
// agree.
func FuzzRateLimitDecoder(f *testing.F) {
	for _, b := range rateLimitSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProtoRLS(t, b) })
}

// A descriptor value that is not valid UTF-8, as Envoy copies it from a
// header, decodes under both codecs (as gRPC calls them) with each invalid
// byte repaired, so values that differ only in those bytes stay distinct
// and none equals a valid value.
func TestInvalidUTF8DescriptorValuesDecodeDistinct(t *testing.T) {
	valueOf := func(c encoding.CodecV2, raw string) string {
		t.Helper()
		e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "api_key")
		e = protowire.AppendString(protowire.AppendTag(e, 2, protowire.BytesType), raw)
		d := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), e)
		b := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "edge")
		b = protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), d)
		if err := proto.Unmarshal(b, &rlsv3.RateLimitRequest{}); (err == nil) != utf8.ValidString(raw) {
			t.Fatalf("%q: protobuf-go error %v: the test does not build the request it means", raw, err)
		}
		var got rlsv3.RateLimitRequest
		if err := c.Unmarshal(sliceOf(b), &got); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		return got.GetDescriptors()[0].GetEntries()[0].GetValue()
	}
	for name, c := range map[string]encoding.CodecV2{"fast": grpccodec.Fast(Codec()), "protobuf": grpccodec.Protobuf(Codec())} {
		seen := map[string]string{}
		for _, raw := range []string{"k-\xff", "k-\xfe", "k-?", "k-!", "k-\xff\xfe", "k-\xc3", "k-\xc3\xa9"} {
			v := valueOf(c, raw)
			if other, dup := seen[v]; dup {
				t.Errorf("%s: %q and %q decode to the same value %q", name, raw, other, v)
			}
			seen[v] = raw
		}
		if v := valueOf(c, "k-\xff"); v != "k-\x00FF" {
			t.Errorf("%s: k-\\xff decoded as %q, want k-\\x00FF", name, v)
		}
		if v := valueOf(c, "k-\xc3\xa9"); v != "k-é" {
			t.Errorf("%s: valid UTF-8 changed: %q", name, v)
		}
	}
}

// sliceOf is b as gRPC hands a received message to a codec.
func sliceOf(b []byte) mem.BufferSlice { return mem.BufferSlice{mem.SliceBuffer(b)} }

// TestTheFastCodecDecodesRateLimitRequests: through gRPC's codec
// interface, a RateLimitRequest takes the decoder, and a RateLimitResponse
// (or any other message) protobuf-go.
func TestTheFastCodecDecodesRateLimitRequests(t *testing.T) {
	for name, c := range map[string]encoding.CodecV2{"fast": grpccodec.Fast(Codec()), "protobuf": grpccodec.Protobuf(Codec())} {
		for i, req := range rateLimitRequests() {
			data, err := c.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			var got rlsv3.RateLimitRequest
			if err := c.Unmarshal(data, &got); err != nil || !proto.Equal(&got, req) {
				t.Fatalf("%s: request %d through the codec: %v, %v", name, i, err, &got)
			}
			data.Free()
		}
		resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OVER_LIMIT, LimitRemaining: 3}}}
		resp.DynamicMetadata, _ = structpb.NewStruct(map[string]any{"a": "b"})
		data, err := c.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var back rlsv3.RateLimitResponse
		if err := c.Unmarshal(data, &back); err != nil || !proto.Equal(&back, resp) {
			t.Fatalf("%s: a response through the codec: %v, %v", name, err, &back)
		}
		data.Free()
	}
}

// BenchmarkDecodeRateLimitRequest: floodbench's (r) requests (one
// descriptor, one entry, 44 bytes) and a request of three descriptors,
// with gRPC's own codec (proto.Unmarshal) and with the decoder, each
// through the codec interface as gRPC calls it.
func BenchmarkDecodeRateLimitRequest(b *testing.B) {
	one := make([][]byte, 64)
	for i := range one {
		one[i], _ = proto.Marshal(&rlsv3.RateLimitRequest{Domain: "floodbench", HitsAddend: 1, Descriptors: []*commonrl.RateLimitDescriptor{
			{Entries: []*commonrl.RateLimitDescriptor_Entry{entry("api_key", "k_live_"+strconv.Itoa(10_000_000+i))}}}})
	}
	three := [][]byte{rateLimitSeeds(b)[1]}
	for _, in := range []struct {
		name string
		reqs [][]byte
	}{{"one-descriptor", one}, {"three-descriptors", three}} {
		for _, c := range []struct {
			name  string
			codec encoding.CodecV2
		}{{"grpc-proto", encoding.GetCodecV2("proto")}, {"fast", grpccodec.Fast(Codec())}} {
			b.Run(in.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					var req rlsv3.RateLimitRequest
					if err := c.codec.Unmarshal(sliceOf(in.reqs[i%len(in.reqs)]), &req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
