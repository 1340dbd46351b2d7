// Package grpccodec is the gRPC codec floodgate serves every gRPC door with
// (Envoy's Authorization service and its rate limit service): protobuf on
// the wire, with CheckRequests and RateLimitRequests read and CheckResponses
// written by hand where protobuf-go's generic code costs a decision the most
// (decode.go, ratelimit.go, encode.go), and requests protobuf-go refuses
// decided rather than answered with an RPC error (lenient.go).
//
// The hand-written parts give the bytes and messages protobuf-go gives, or
// hand the message to protobuf-go: the tests, FuzzDecoder and
// FuzzRateLimitDecoder compare the two on every kind of request and
// response.
package grpccodec

import (
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Fast is the codec of listen.decoder: fast, the default: CheckRequests
// decoded by DecodeCheckRequest, RateLimitRequests by
// DecodeRateLimitRequest, CheckResponses written by EncodeCheckResponse.
// Every other message (rate limit responses, health checks, reflection)
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
	switch m := v.(type) {
	case *authv3.CheckRequest:
		return decodeContiguous(data, m, DecodeCheckRequest)
	case *rlsv3.RateLimitRequest:
		return decodeContiguous(data, m, DecodeRateLimitRequest)
	}
	return c.base.Unmarshal(data, v)
}

// Protobuf is the codec of listen.decoder: protobuf: protobuf-go reads and
// writes every message, with CheckRequests and RateLimitRequests decoded
// leniently as Fast decodes them (DecodeLenient).
func Protobuf() encoding.CodecV2 {
	return protobufCodec{base: encoding.GetCodecV2("proto")}
}

type protobufCodec struct{ base encoding.CodecV2 }

func (c protobufCodec) Name() string                           { return "proto" }
func (c protobufCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c protobufCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *authv3.CheckRequest:
		return decodeContiguous(data, m, lenient[*authv3.CheckRequest])
	case *rlsv3.RateLimitRequest:
		return decodeContiguous(data, m, lenient[*rlsv3.RateLimitRequest])
	}
	return c.base.Unmarshal(data, v)
}

func lenient[M proto.Message](b []byte, m M) error { return DecodeLenient(b, m) }

// decodeContiguous decodes data, a request, with decode, from one
// contiguous buffer: the two codecs differ only in how they read the
// requests of floodgate's doors.
func decodeContiguous[M any](data mem.BufferSlice, m M, decode func([]byte, M) error) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decode(buf.ReadOnlyData(), m)
}
