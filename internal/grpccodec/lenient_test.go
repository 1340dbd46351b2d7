package grpccodec_test

import (
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/grpccodec/codectest"
)

// maxDepth is how deep messages may nest for protobuf-go to read them.
const maxDepth = protowire.DefaultRecursionLimit

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
// is decoded as protobuf-go decodes it. (Check's decoder agrees with it at
// every depth around the limit: internal/door/check.)
func TestNestingBeyondTheLimitIsCutNotRefused(t *testing.T) {
	// The most levels protobuf-go reads: 10 + 3*levels <= maxDepth.
	fits := (maxDepth - 10) / 3
	for _, levels := range []int{fits - 1, fits, fits + 1, fits + 2, 5000, 20000} {
		b := codectest.NestedMetadata(t, levels, "alice", "last")
		var plain authv3.CheckRequest
		plainErr := proto.Unmarshal(b, &plain)
		if (plainErr == nil) != (levels <= fits) {
			t.Fatalf("%d levels: proto.Unmarshal error %v; the depth arithmetic of this test is off", levels, plainErr)
		}
		var got authv3.CheckRequest
		if err := grpccodec.DecodeLenient(b, &got); err != nil {
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
	}
}

// Invalid UTF-8 deep in a request (within the limit) is repaired there, and
// so is invalid UTF-8 in a request that is also cut.
func TestInvalidUTF8IsRepairedAtAnyDepth(t *testing.T) {
	fits := (maxDepth - 10) / 3
	for _, levels := range []int{fits - 1, fits + 10} {
		b := codectest.NestedMetadata(t, levels, "bob", "LASTKEY")
		i := strings.LastIndex(string(b), "LASTKEY")
		b[i] = 0xff
		if levels > fits { // the innermost key is cut; damage the user instead
			b[strings.LastIndex(string(b), "bob")] = 0xfe
		}
		var got authv3.CheckRequest
		if err := grpccodec.DecodeLenient(b, &got); err != nil {
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
	b := codectest.NestedMetadata(t, 20000, "carol", "x")
	b = b[:len(b)-3] // the lengths now promise more than there is
	if err := grpccodec.DecodeLenient(b, &authv3.CheckRequest{}); err == nil {
		t.Fatal("a truncated request decoded")
	}
	bad := protowire.AppendTag(nil, 1, protowire.BytesType) // a length missing
	if err := grpccodec.DecodeLenient(bad, &authv3.CheckRequest{}); err == nil {
		t.Fatal("a field without its length decoded")
	}
}
