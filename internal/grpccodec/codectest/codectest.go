// Package codectest holds what the tests of every door's codec share: the
// comparison of a hand-written decoder with protobuf-go, damaged inputs,
// and a gRPC client that sends requests protobuf-go would refuse to
// marshal.
package codectest

import (
	"math/rand/v2"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/grpccodec"
)

// AgreeWithProto checks that decode and protobuf-go agree on b: both fail
// with the same error, or both give equal messages, and returns decode's
// (nil when both failed).
// protobuf-go is proto.Unmarshal, or, where that refuses a string that is
// not valid UTF-8 or nesting beyond its limit, proto.Unmarshal of b with
// such strings repaired and such nesting cut (grpccodec.DecodeLenient).
func AgreeWithProto[T any, M interface {
	*T
	proto.Message
}](t testing.TB, b []byte, decode func([]byte, M) error) M {
	t.Helper()
	got, want := M(new(T)), M(new(T))
	gerr, werr := decode(b, got), grpccodec.DecodeLenient(b, want)
	if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
		t.Fatalf("input %q: decoder error %v, proto.Unmarshal error %v", b, gerr, werr)
	}
	if werr == nil && !proto.Equal(got, want) {
		t.Fatalf("input %q:\ndecoder:          %v\nproto.Unmarshal:  %v", b, got, want)
	}
	if gerr != nil {
		return nil
	}
	return got
}

// MarshalAll is msgs in wire form.
func MarshalAll[M proto.Message](t testing.TB, msgs []M) [][]byte {
	t.Helper()
	var out [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// Damaged hands check 20,000 damaged copies of seeds (truncated, bytes
// flipped, a byte inserted), the same ones for the same seed of the
// random source.
func Damaged(seeds [][]byte, seed uint64, check func([]byte)) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := 0; i < 20000; i++ {
		b := append([]byte{}, seeds[rng.IntN(len(seeds))]...)
		switch rng.IntN(3) {
		case 0:
			b = b[:rng.IntN(len(b)+1)]
		case 1:
			for j := 0; j < 1+rng.IntN(3) && len(b) > 0; j++ {
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			}
		case 2:
			at := rng.IntN(len(b) + 1)
			b = append(b[:at], append([]byte{byte(rng.IntN(256))}, b[at:]...)...)
		}
		check(b)
	}
}

// NestedMetadata is the request lenient decoding exists for: a CheckRequest whose metadata_context holds, under the
// namespace "ns", a Struct with a "user" string and a "deep" Struct nested
// levels deep ({"k": {"k": ... {key: "x"}}}, or {} innermost when key is
// ""), in wire form. The innermost
// Struct sits at message depth 8 + 3*levels, counting the CheckRequest as 1
// (request, attributes, metadata, map entry, Struct, then a map entry, a
// Value and a Struct a level), as protobuf-go counts nesting, and its
// string Value at 10 + 3*levels.
func NestedMetadata(t testing.TB, levels int, user, key string) []byte {
	t.Helper()
	inner := &structpb.Struct{}
	if key != "" {
		inner.Fields = map[string]*structpb.Value{key: structpb.NewStringValue("x")}
	}
	for range levels {
		inner = &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStructValue(inner)}}
	}
	top := &structpb.Struct{Fields: map[string]*structpb.Value{"user": structpb.NewStringValue(user), "deep": structpb.NewStructValue(inner)}}
	req := extauthztest.CheckRequest("198.51.100.1", map[string]string{"x-api-key": "k1"})
	req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns": top}}
	b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(req) // proto.Marshal has no nesting limit
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// RawRequest is a request already on the wire; RawClientCodec sends it as
// it is (protobuf-go would refuse to marshal invalid UTF-8) and decodes the
// answer with protobuf-go.
type RawRequest []byte

// RawClientCodec is the client's codec for RawRequests.
type RawClientCodec struct{}

func (RawClientCodec) Name() string { return "proto" }
func (RawClientCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(RawRequest))}, nil
}
func (RawClientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}
