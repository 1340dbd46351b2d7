package check

import (
	"path/filepath"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/grpccodec/codectest"
)

// decoderSeeds are CheckRequests in wire form: the Envoy fixtures, the
// benchmark's requests and one with every field the decoder handles or
// hands on (metadata, TLS session, header_map, time, size, bodies).
func decoderSeeds(t testing.TB) [][]byte {
	t.Helper()
	var reqs []*authv3.CheckRequest
	files, _ := filepath.Glob("../../../extauthz/testdata/envoy/checkrequest-*.json")
	if len(files) == 0 {
		t.Fatal("no CheckRequest fixtures")
	}
	for _, f := range files {
		reqs = append(reqs, fixture(t, filepath.Base(f)))
	}
	reqs = append(reqs, envoyRequests(3)...)
	full := checkRequest("2001:db8::7", map[string]string{"x-api-key": "k", "x-forwarded-for": "203.0.113.9", "": "empty name", "x-empty": ""})
	a := full.Attributes
	a.ContextExtensions = map[string]string{"route": "items", "tenant": "acme", "": ""}
	md, _ := structpb.NewStruct(map[string]any{"sub": "user-42", "n": 42.0, "nested": map[string]any{"ok": true}})
	a.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": md}}
	a.RouteMetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"route": md}}
	a.TlsSession = &authv3.AttributeContext_TLSSession{Sni: "api.example.com"}
	a.Destination = &authv3.AttributeContext_Peer{Principal: "spiffe://x/y", Labels: map[string]string{"a": "b"}}
	a.Request.Time = timestamppb.New(timestamppb.Now().AsTime())
	h := a.Request.Http
	h.Size, h.Body, h.RawBody, h.Query, h.Fragment, h.Id = 1234, "body", []byte{0, 1, 2, 0xff}, "a=b", "frag", "77"
	h.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "x-raw", RawValue: []byte("v\xff")}, {Key: "k", Value: "v"}}}
	reqs = append(reqs, full, &authv3.CheckRequest{}, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{}})
	return codectest.MarshalAll(t, reqs)
}

// sameAsProto checks that DecodeCheckRequest and protobuf-go agree on
// b (codectest.AgreeWithProto).
func sameAsProto(t testing.TB, b []byte) { codectest.AgreeWithProto(t, b, DecodeCheckRequest) }

func TestTheDecoderIsProtoUnmarshal(t *testing.T) {
	seeds := decoderSeeds(t)
	// The fast path decodes real requests itself (else this test would only
	// compare proto.Unmarshal with itself).
	for i, b := range seeds {
		var req authv3.CheckRequest
		if d := grpccodec.NewReader(b); !readCheckRequest(&d, 0, len(b), &req) {
			t.Errorf("seed %d: the decoder gave up on a valid request", i)
		}
		sameAsProto(t, b)
	}
	// Two encodings concatenated: protobuf merges them (scalars: the last
	// wins; maps: entries added; messages: merged).
	sameAsProto(t, append(append([]byte{}, seeds[0]...), seeds[len(seeds)-3]...))
	sameAsProto(t, append(append([]byte{}, seeds[3]...), seeds[4]...))

	// Invalid UTF-8 in a header value, a header name, a path: proto3
	// refuses it; the decoder hands it to DecodeLenient, which repairs it.
	for _, bad := range [][3]string{{"x-api-key", "k\xff"}, {"x-\xfe", "v"}, {"path", "/\xc3"}} {
		entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), bad[0])
		entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), bad[1])
		http := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), entry)
		if bad[0] == "path" {
			http = protowire.AppendString(protowire.AppendTag(nil, 4, protowire.BytesType), bad[1])
		}
		sameAsProto(t, wrapHTTP(http))
	}
	// Unknown fields and known fields with another wire type are kept or
	// refused by protobuf-go's rules.
	sameAsProto(t, wrapHTTP(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 5)))
	sameAsProto(t, wrapHTTP(protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 5)))
	sameAsProto(t, wrapHTTP(protowire.AppendFixed32(protowire.AppendTag(nil, 4, protowire.Fixed32Type), 5)))
	sameAsProto(t, append(append([]byte{}, seeds[0]...), protowire.AppendString(protowire.AppendTag(nil, 7, protowire.BytesType), "x")...))

	// Peers: a named port, a pipe, labels, and oneofs set twice (the same
	// kind merges, another kind replaces), unknown fields at every level.
	tag := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	sock := tag(varint(nil, 3, 1<<33|443), 2, []byte("10.0.0.1"))   // a port above 32 bits truncates
	sock = varint(tag(sock, 4, []byte("https")), 1, 1)              // named_port replaces port_value; UDP
	sock = varint(varint(tag(sock, 7, []byte("/ns")), 6, 2), 99, 7) // netns, ipv4_compat, unknown
	pipe := tag(nil, 2, tag(nil, 1, []byte("/tmp/sock")))
	addr := tag(tag(append(tag(nil, 1, sock), pipe...), 1, varint(nil, 3, 80)), 1, tag(nil, 2, []byte("10.0.0.2")))
	peer := tag(tag(tag(nil, 1, addr), 3, tag(tag(nil, 1, []byte("k")), 2, []byte("v"))), 4, []byte("spiffe://p"))
	peer = varint(tag(peer, 5, []byte("cert")), 42, 1)
	attrs := tag(tag(nil, 1, peer), 2, peer)
	attrs = varint(tag(attrs, 10, tag(varint(nil, 3, 1), 1, []byte("k"))), 77, 9) // an entry with an unknown field
	sameAsProto(t, tag(nil, 1, attrs))
	sameAsProto(t, tag(tag(nil, 1, attrs), 1, tag(nil, 1, tag(nil, 1, pipe))))
	sameAsProto(t, tag(nil, 1, tag(nil, 1, tag(nil, 1, tag(nil, 1, varint(nil, 2, 5)))))) // address as a varint

	// Random damage: truncations, flipped bytes, inserted bytes.
	codectest.Damaged(seeds, 1, func(b []byte) { sameAsProto(t, b) })
}

// The decoder and protobuf-go agree at every depth around protobuf-go's
// nesting limit, where the two could differ by one (what lenient decoding
// keeps there is grpccodec's TestNestingBeyondTheLimitIsCutNotRefused): the
// innermost Struct of codectest.NestedMetadata sits at depth 8 + 3*levels,
// its string Value at 10 + 3*levels, and an empty innermost Struct meets
// the depths between.
func TestTheDecoderAgreesAroundTheNestingLimit(t *testing.T) {
	fits := (protowire.DefaultRecursionLimit - 10) / 3
	for _, levels := range []int{fits - 1, fits, fits + 1, fits + 2, 5000, 20000} {
		sameAsProto(t, codectest.NestedMetadata(t, levels, "alice", "last"))
	}
	for levels := fits; levels <= fits+2; levels++ {
		sameAsProto(t, codectest.NestedMetadata(t, levels, "alice", ""))
	}
}

// wrapHTTP builds a CheckRequest whose attributes.request.http is http.
func wrapHTTP(http []byte) []byte {
	req := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), http)
	attrs := protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), req)
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), attrs)
}

// FuzzDecoder: for any bytes, the decoder and proto.Unmarshal agree.
func FuzzDecoder(f *testing.F) {
	for _, b := range decoderSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProto(t, b) })
}

// TestTheFastCodecDecodesCheckRequestsAndPassesTheRestOn: through gRPC's
// codec interface, a CheckRequest takes the decoder and anything else
// protobuf-go.
func TestTheFastCodecDecodesCheckRequestsAndPassesTheRestOn(t *testing.T) {
	c := grpccodec.Fast(Codec())
	if c.Name() != "proto" {
		t.Fatalf("codec name %q: gRPC picks codecs by content-subtype, which must stay proto", c.Name())
	}
	req := envoyRequests(1)[0]
	data, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got authv3.CheckRequest
	if err := c.Unmarshal(data, &got); err != nil || !proto.Equal(&got, req) {
		t.Fatalf("CheckRequest through the codec: %v, %v", err, &got)
	}
	st, _ := structpb.NewStruct(map[string]any{"a": "b"})
	data, err = c.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var st2 structpb.Struct
	if err := c.Unmarshal(data, &st2); err != nil || !proto.Equal(&st2, st) {
		t.Fatalf("another message through the codec: %v, %v", err, &st2)
	}
	data.Free()
}

func BenchmarkDecodeCheckRequest(b *testing.B) {
	reqs := envoyRequests(64)
	wire := make([][]byte, len(reqs))
	for i, r := range reqs {
		wire[i], _ = proto.Marshal(r)
	}
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var req authv3.CheckRequest
			if err := proto.Unmarshal(wire[i%len(wire)], &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			var req authv3.CheckRequest
			if err := DecodeCheckRequest(wire[i%len(wire)], &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
