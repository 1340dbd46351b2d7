// Package grpccodec is the gRPC codec floodgate serves Envoy's Authorization
// service with: protobuf on the wire, with CheckRequests read and
// CheckResponses written by hand where protobuf-go's reflection costs a
// Check the most (decode.go, encode.go), and CheckRequests protobuf-go
// refuses decided rather than answered with an RPC error (lenient.go).
//
// The hand-written parts give the bytes and messages protobuf-go gives, or
// hand the message to protobuf-go: the tests and FuzzDecoder compare the
// two on every kind of request and response.
package grpccodec

import (
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// Fast is the codec of listen.decoder: fast, the default: CheckRequests
// decoded by DecodeCheckRequest, CheckResponses written by
// EncodeCheckResponse. Every other message (health checks, reflection)
// goes to gRPC's own protobuf codec.
func Fast() encoding.CodecV2 {
	return fastCodec{base: encoding.GetCodecV2("proto")}
}

type fastCodec struct{ base encoding.CodecV2 }

// Name is the content-subtype gRPC picks codecs by: it must stay proto.
func (c fastCodec) Name() string { return "proto" }

// Marshal writes CheckResponses with EncodeCheckResponse and everything
// else, or a response it does not cover, with protobuf-go.
func (c fastCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*authv3.CheckResponse); ok {
		if b, ok := EncodeCheckResponse(r); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
	}
	return c.base.Marshal(v)
}

func (c fastCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return unmarshalWith(c.base, data, v, DecodeCheckRequest)
}

// Protobuf is the codec of listen.decoder: protobuf: protobuf-go reads and
// writes every message, with CheckRequests decoded leniently as Fast
// decodes them (DecodeLenient).
func Protobuf() encoding.CodecV2 {
	return protobufCodec{base: encoding.GetCodecV2("proto")}
}

type protobufCodec struct{ base encoding.CodecV2 }

func (c protobufCodec) Name() string                           { return "proto" }
func (c protobufCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c protobufCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return unmarshalWith(c.base, data, v, func(b []byte, req *authv3.CheckRequest) error { return DecodeLenient(b, req) })
}

// unmarshalWith decodes a CheckRequest with decode, from one contiguous
// buffer, and hands any other message to base: the two codecs differ only
// in how they read a CheckRequest.
func unmarshalWith(base encoding.CodecV2, data mem.BufferSlice, v any, decode func([]byte, *authv3.CheckRequest) error) error {
	req, ok := v.(*authv3.CheckRequest)
	if !ok {
		return base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decode(buf.ReadOnlyData(), req)
}
