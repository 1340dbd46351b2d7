package extauthz

import (
	"strings"
	"unicode/utf8"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Lenient decoding. protobuf-go refuses a proto3 string field that is not
// valid UTF-8, and has no option to accept one. Envoy does not sanitise
// every string it puts in a CheckRequest (header_map keys, the TLS SNI), and
// a request that fails to decode is an RPC error, which Envoy treats as an
// outage: with failure_mode_allow, the request passes unlimited. So a
// CheckRequest is decoded leniently: when protobuf-go refuses it, every
// string field that is not valid UTF-8 has each invalid sequence replaced by
// U+FFFD (strings.ToValidUTF8) and the request is decoded again. Such a
// request is decided like any other: a header value with bad bytes still
// names its caller's bucket (callers that differ only in their invalid bytes
// share one), and a header name with bad bytes matches no policy.

// lenientUnmarshal is proto.Unmarshal(b, m), with strings that are not
// valid UTF-8 repaired rather than refused.
func lenientUnmarshal(b []byte, m proto.Message) error {
	err := proto.Unmarshal(b, m)
	if err == nil {
		return nil
	}
	fixed, changed := repairUTF8(nil, b, m.ProtoReflect().Descriptor())
	if !changed {
		return err
	}
	proto.Reset(m)
	return proto.Unmarshal(fixed, m)
}

// repairUTF8 appends b, a message of type md, to out with every string
// field made valid UTF-8. changed is false, and out meaningless, when
// nothing needed repair or b is malformed (protobuf-go's error then stands).
func repairUTF8(out, b []byte, md protoreflect.MessageDescriptor) (_ []byte, changed bool) {
	start := len(out)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return out, false
		}
		field := b[:n+m]
		b = b[n+m:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			out = append(out, field...)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		switch {
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			out = protowire.AppendTag(out, num, typ)
			out = protowire.AppendString(out, strings.ToValidUTF8(string(v), "\uFFFD"))
			changed = true
		case fd.Kind() == protoreflect.MessageKind:
			inner, ch := repairUTF8(nil, v, fd.Message())
			if ch {
				out = protowire.AppendTag(out, num, typ)
				out = protowire.AppendBytes(out, inner)
				changed = true
			} else {
				out = append(out, field...)
			}
		default:
			out = append(out, field...)
		}
	}
	if !changed {
		return out[:start], false
	}
	return out, true
}

// ProtobufCodec is the codec of listen.decoder: protobuf: protobuf-go reads
// and writes every message, with CheckRequests decoded leniently as the
// fast decoder does (lenientUnmarshal).
func ProtobufCodec() encoding.CodecV2 {
	return protobufCodec{base: encoding.GetCodecV2("proto")}
}

type protobufCodec struct{ base encoding.CodecV2 }

func (c protobufCodec) Name() string                           { return "proto" }
func (c protobufCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c protobufCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*authv3.CheckRequest)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return lenientUnmarshal(buf.ReadOnlyData(), req)
}
