// Package grpccodec is the gRPC codec floodgate serves every gRPC door with
// (Envoy's Authorization service and its rate limit service), and what the
// doors' own codecs share: protobuf on the wire, with each door's requests
// read and responses written by the door's Message (internal/door/check,
// internal/door/ratelimit) where protobuf-go's generic code costs a decision
// the most, and requests protobuf-go refuses decided rather than answered
// with an RPC error (lenient.go). The codec knows no door's messages: a
// door is one folder holding everything of it, its codec included, built on
// the wire reader (reader.go) and writer (wire.go) here.
package grpccodec

import (
	"reflect"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Message is one door's codec for its own messages.
type Message struct {
	// Request is the door's request message, a value of its type
	// ((*authv3.CheckRequest)(nil) will do): Protobuf decodes these
	// leniently (DecodeLenient), and so does Fast when Decode is nil.
	Request proto.Message
	// Decode decodes b into v and reports true when v is a new Request;
	// it reports false, v untouched, for any other message. It must give
	// what DecodeLenient gives, error included.
	Decode func(b []byte, v any) (handled bool, err error)
	// Encode returns v's wire form, the bytes proto.Marshal writes, when v
	// is a response it writes, or false: protobuf-go writes it. Nil for
	// none.
	Encode func(v any) (b []byte, handled bool)
}

// Decoding is a Message's Decode for the requests of type M, read by
// decode.
func Decoding[M any](decode func(b []byte, m M) error) func(b []byte, v any) (bool, error) {
	return func(b []byte, v any) (bool, error) {
		m, ok := v.(M)
		if !ok {
			return false, nil
		}
		return true, decode(b, m)
	}
}

// Fast is the codec of listen.decoder: fast, the default: each door's
// requests decoded by its Message's Decode and its responses written by
// its Encode. Every other message (rate limit responses, health checks,
// reflection) goes to gRPC's own protobuf codec. Each message goes through
// a loop over ms with a type assertion each, as cheap as a type switch.
func Fast(ms ...Message) encoding.CodecV2 {
	c := &fastCodec{base: encoding.GetCodecV2("proto")}
	for _, m := range ms {
		decode := m.Decode
		if decode == nil {
			decode = lenient(m.Request)
		}
		c.decode = append(c.decode, decode)
		if m.Encode != nil {
			c.encode = append(c.encode, m.Encode)
		}
	}
	return c
}

type fastCodec struct {
	base   encoding.CodecV2
	decode []func(b []byte, v any) (bool, error)
	encode []func(v any) ([]byte, bool)
}

// Name is the content-subtype gRPC picks codecs by: it must stay proto.
func (c *fastCodec) Name() string { return "proto" }

// Marshal writes a door's responses with its Encode and everything else,
// or a response Encode does not cover, with protobuf-go.
func (c *fastCodec) Marshal(v any) (mem.BufferSlice, error) {
	for _, encode := range c.encode {
		if b, ok := encode(v); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
	}
	return c.base.Marshal(v)
}

// Unmarshal decodes a door's request with its Decode, from one contiguous
// buffer, and any other message with protobuf-go.
func (c *fastCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return unmarshal(c.decode, c.base, data, v)
}

// unmarshal decodes data into v with the first of decode that takes v,
// from one contiguous buffer, or with base when none does.
func unmarshal(decode []func(b []byte, v any) (bool, error), base encoding.CodecV2, data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	for _, d := range decode {
		if ok, err := d(b, v); ok {
			return err
		}
	}
	return base.Unmarshal(data, v)
}

// Protobuf is the codec of listen.decoder: protobuf: protobuf-go reads and
// writes every message, with the doors' requests (each Message's Request)
// decoded leniently as Fast decodes them (DecodeLenient).
func Protobuf(ms ...Message) encoding.CodecV2 {
	c := &protobufCodec{base: encoding.GetCodecV2("proto")}
	for _, m := range ms {
		c.decode = append(c.decode, lenient(m.Request))
	}
	return c
}

type protobufCodec struct {
	base   encoding.CodecV2
	decode []func(b []byte, v any) (bool, error)
}

func (c *protobufCodec) Name() string                           { return "proto" }
func (c *protobufCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *protobufCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return unmarshal(c.decode, c.base, data, v)
}

// lenient decodes the messages of request's type with DecodeLenient.
func lenient(request proto.Message) func(b []byte, v any) (bool, error) {
	t := reflect.TypeOf(request)
	return func(b []byte, v any) (bool, error) {
		if reflect.TypeOf(v) != t {
			return false, nil
		}
		return true, DecodeLenient(b, v.(proto.Message))
	}
}
