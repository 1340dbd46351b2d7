package grpccodec

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// nestedMetadata is a CheckRequest whose metadata_context holds, under the
// namespace "ns", a Struct with a "user" string and a "deep" Struct nested
// levels deep ({"k": {"k": ... {key: "x"}}}, or {} innermost when key is
// ""), in wire form. The innermost
// Struct sits at message depth 8 + 3*levels, counting the CheckRequest as 1
// (request, attributes, metadata, map entry, Struct, then a map entry, a
// Value and a Struct a level), as protobuf-go counts nesting, and its
// string Value at 10 + 3*levels.
func nestedMetadata(t testing.TB, levels int, user, key string) []byte {
	t.Helper()
	inner := &structpb.Struct{}
	if key != "" {
		inner.Fields = map[string]*structpb.Value{key: structpb.NewStringValue("x")}
	}
	for range levels {
		inner = &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStructValue(inner)}}
	}
	top := &structpb.Struct{Fields: map[string]*structpb.Value{"user": structpb.NewStringValue(user), "deep": structpb.NewStructValue(inner)}}
	req := checkRequest("198.51.100.1", map[string]string{"x-api-key": "k1"})
	req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns": top}}
	b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(req) // proto.Marshal has no nesting limit
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// depthOf is how many "k" levels the decoded "deep" Struct still has: the
// Structs below it.
func depthOf(req *authv3.CheckRequest) (levels int) {
	s := req.GetAttributes().GetMetadataContext().GetFilterMetadata()["ns"].GetFields()["deep"].GetStructValue()
	for s != nil {
		if s = s.GetFields()["k"].GetStructValue(); s != nil {
			levels++
		}
	}
	return levels
}

// A request nested deeper than protobuf-go reads is decoded with what lies
// beyond the limit left out and everything else kept; one within the limit
// is decoded as protobuf-go decodes it; and both decoders agree at every
// depth around the limit.
func TestNestingBeyondTheLimitIsCutNotRefused(t *testing.T) {
	// The most levels protobuf-go reads: 10 + 3*levels <= maxDepth.
	fits := (maxDepth - 10) / 3
	for _, levels := range []int{fits - 1, fits, fits + 1, fits + 2, 5000, 20000} {
		b := nestedMetadata(t, levels, "alice", "last")
		var plain authv3.CheckRequest
		plainErr := proto.Unmarshal(b, &plain)
		if (plainErr == nil) != (levels <= fits) {
			t.Fatalf("%d levels: proto.Unmarshal error %v; the depth arithmetic of this test is off", levels, plainErr)
		}
		var got authv3.CheckRequest
		if err := DecodeLenient(b, &got); err != nil {
			t.Fatalf("%d levels: %v", levels, err)
		}
		if u := got.GetAttributes().GetMetadataContext().GetFilterMetadata()["ns"].GetFields()["user"].GetStringValue(); u != "alice" {
			t.Errorf("%d levels: the shallow metadata was lost (user %q)", levels, u)
		}
		if got.GetAttributes().GetRequest().GetHttp().GetHeaders()["x-api-key"] != "k1" {
			t.Errorf("%d levels: the headers were lost", levels)
		}
		if plainErr == nil && !proto.Equal(&got, &plain) {
			t.Errorf("%d levels: within the limit, yet not what proto.Unmarshal gives", levels)
		}
		if d := depthOf(&got); d != min(levels, fits) {
			t.Errorf("%d levels: %d kept, want %d (all protobuf-go can read)", levels, d, min(levels, fits))
		}
		sameAsProto(t, b)
	}
	// An empty innermost Struct, at depth 8 + 3*levels: every depth around
	// the limit is met, where the two decoders could differ by one.
	for levels := fits; levels <= fits+2; levels++ {
		sameAsProto(t, nestedMetadata(t, levels, "alice", ""))
	}
}

// Invalid UTF-8 deep in a request (within the limit) is repaired there, and
// so is invalid UTF-8 in a request that is also cut.
func TestInvalidUTF8IsRepairedAtAnyDepth(t *testing.T) {
	fits := (maxDepth - 10) / 3
	for _, levels := range []int{fits - 1, fits + 10} {
		b := nestedMetadata(t, levels, "bob", "LASTKEY")
		i := strings.LastIndex(string(b), "LASTKEY")
		b[i] = 0xff
		if levels > fits { // the innermost key is cut; damage the user instead
			b[strings.LastIndex(string(b), "bob")] = 0xfe
		}
		var got authv3.CheckRequest
		if err := DecodeLenient(b, &got); err != nil {
			t.Fatalf("%d levels: %v", levels, err)
		}
		user := got.GetAttributes().GetMetadataContext().GetFilterMetadata()["ns"].GetFields()["user"].GetStringValue()
		if levels > fits {
			if user != "\x00FEob" {
				t.Errorf("%d levels: user %q, want \\x00FEob", levels, user)
			}
			continue
		}
		s := got.GetAttributes().GetMetadataContext().GetFilterMetadata()["ns"].GetFields()["deep"].GetStructValue()
		for range levels {
			s = s.GetFields()["k"].GetStructValue()
		}
		if _, ok := s.GetFields()["\x00FFASTKEY"]; !ok || user != "bob" {
			t.Errorf("%d levels: innermost keys %v, user %q; want \\x00FFASTKEY repaired and bob kept", levels, s.GetFields(), user)
		}
	}
}

// Malformed input is not something Envoy sends: protobuf-go's error stands.
func TestMalformedInputIsStillRefused(t *testing.T) {
	b := nestedMetadata(t, 20000, "carol", "x")
	b = b[:len(b)-3] // the lengths now promise more than there is
	if err := DecodeLenient(b, &authv3.CheckRequest{}); err == nil {
		t.Fatal("a truncated request decoded")
	}
	bad := protowire.AppendTag(nil, 1, protowire.BytesType) // a length missing
	if err := DecodeLenient(bad, &authv3.CheckRequest{}); err == nil {
		t.Fatal("a field without its length decoded")
	}
}
