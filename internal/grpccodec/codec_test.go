package grpccodec_test

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/grpccodec"
)

// door is a Message for requests of req's type that records which of its
// parts the codec called, decoding with proto.Unmarshal and writing
// responses of resp's type as written.
func door(req proto.Message, resp proto.Message, written []byte, calls *[]string) grpccodec.Message {
	same := func(a, b any) bool {
		am, ok := a.(proto.Message)
		return ok && am.ProtoReflect().Descriptor() == b.(proto.Message).ProtoReflect().Descriptor()
	}
	return grpccodec.Message{
		Request: req,
		Decode: func(b []byte, v any) (bool, error) {
			if !same(v, req) {
				return false, nil
			}
			*calls = append(*calls, "decode")
			return true, proto.Unmarshal(b, v.(proto.Message))
		},
		Encode: func(v any) ([]byte, bool) {
			if !same(v, resp) {
				return nil, false
			}
			*calls = append(*calls, "encode")
			return written, true
		},
	}
}

// TestEachDoorsMessagesGoToItsCodec: with several doors, each door's
// requests go to its Decode and its responses to its Encode, under Fast;
// under Protobuf only the lenient decoding; every other message to
// protobuf-go; and a door without a Decode has its requests decoded
// leniently by Fast too.
func TestEachDoorsMessagesGoToItsCodec(t *testing.T) {
	var a, b []string
	doorA := door((*wrapperspb.StringValue)(nil), &wrapperspb.Int64Value{}, []byte("A"), &a)
	doorB := door((*wrapperspb.BytesValue)(nil), &wrapperspb.Int32Value{}, []byte("B"), &b)
	fast, pb := grpccodec.Fast(doorA, doorB), grpccodec.Protobuf(doorA, doorB)

	// A string that is not valid UTF-8: proto.Unmarshal refuses it,
	// DecodeLenient repairs it.
	bad := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k\xff")
	wire := func(m proto.Message) mem.BufferSlice {
		out, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return mem.BufferSlice{mem.SliceBuffer(out)}
	}
	raw := mem.BufferSlice{mem.SliceBuffer(bad)}

	a, b = nil, nil
	if err := fast.Unmarshal(wire(wrapperspb.String("s")), &wrapperspb.StringValue{}); err != nil || len(a) != 1 || len(b) != 0 {
		t.Errorf("Fast: door A's request: %v, calls %v %v", err, a, b)
	}
	a, b = nil, nil
	if err := fast.Unmarshal(wire(wrapperspb.Bytes([]byte("x"))), &wrapperspb.BytesValue{}); err != nil || len(a) != 0 || len(b) != 1 {
		t.Errorf("Fast: door B's request: %v, calls %v %v", err, a, b)
	}
	a, b = nil, nil
	badValue := mem.BufferSlice{mem.SliceBuffer(protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), "k\xff"))} // string_value
	if err := fast.Unmarshal(badValue, &structpb.Value{}); err == nil || len(a)+len(b) != 0 {
		t.Errorf("Fast: another message with invalid UTF-8: %v (protobuf-go refuses it), calls %v %v", err, a, b)
	}
	var u wrapperspb.StringValue
	noDecode := grpccodec.Message{Request: (*wrapperspb.StringValue)(nil)}
	if err := grpccodec.Fast(noDecode).Unmarshal(raw, &u); err != nil || u.Value != "k\x00FF" {
		t.Errorf("Fast: the request of a door without Decode: %v, %q; want it decoded leniently", err, u.Value)
	}
	a, b = nil, nil
	var s wrapperspb.StringValue
	if err := pb.Unmarshal(raw, &s); err != nil || s.Value != "k\x00FF" || len(a)+len(b) != 0 {
		t.Errorf("Protobuf: door A's request with invalid UTF-8: %v, %q, calls %v %v (want DecodeLenient's only)", err, s.Value, a, b)
	}
	if err := pb.Unmarshal(badValue, &structpb.Value{}); err == nil {
		t.Error("Protobuf: another message with invalid UTF-8 decoded: protobuf-go refuses it")
	}

	a, b = nil, nil
	if out, err := fast.Marshal(&wrapperspb.Int32Value{Value: 1}); err != nil || string(out.Materialize()) != "B" || len(b) != 1 {
		t.Errorf("Fast: door B's response: %q, %v", out.Materialize(), err)
	}
	want, _ := proto.Marshal(&wrapperspb.Int64Value{Value: 7})
	if out, err := pb.Marshal(&wrapperspb.Int64Value{Value: 7}); err != nil || !bytes.Equal(out.Materialize(), want) {
		t.Errorf("Protobuf: door A's response: %q, %v; want protobuf-go's", out.Materialize(), err)
	}
	if out, err := fast.Marshal(structpb.NewStringValue("v")); err != nil || len(out.Materialize()) == 0 {
		t.Errorf("Fast: another message: %v", err)
	}
	if fast.Name() != "proto" || pb.Name() != "proto" {
		t.Error("gRPC picks codecs by content-subtype, which must stay proto")
	}
}
