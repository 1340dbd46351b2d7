package extauthz

import (
	"bytes"
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
// CheckRequest is decoded leniently: when protobuf-go refuses it, every byte
// of a string field that is not part of valid UTF-8 becomes '?' and the
// request is decoded again. Such a request is decided like any other: a
// header value with bad bytes still names its caller's bucket (values that
// differ only in their invalid bytes share one), and a header name with bad
// bytes matches no policy.

// lenientUnmarshal is proto.Unmarshal(b, m), with strings that are not
// valid UTF-8 repaired rather than refused.
func lenientUnmarshal(b []byte, m proto.Message) error {
	err := proto.Unmarshal(b, m)
	if err == nil {
		return nil
	}
	fixed := bytes.Clone(b)
	if !repairUTF8(fixed, m.ProtoReflect().Descriptor(), 0) {
		return err
	}
	proto.Reset(m)
	return proto.Unmarshal(fixed, m)
}

// maxRepairDepth bounds the nesting repairUTF8 follows, as protobuf-go
// bounds its own (its default recursion limit).
const maxRepairDepth = 10000

// repairUTF8 rewrites, in place, every byte of a string field of b (a
// message of type md) that is not part of valid UTF-8 as '?': the same
// length, so the encoding around it stays valid and the work is linear in
// len(b). It reports whether it changed anything; false also when b is
// malformed or nests deeper than maxRepairDepth (protobuf-go's error then
// stands).
func repairUTF8(b []byte, md protoreflect.MessageDescriptor, depth int) (changed bool) {
	if depth > maxRepairDepth {
		return false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		field := b[:n+m]
		b = b[n+m:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		switch fd.Kind() {
		case protoreflect.StringKind:
			for i := 0; i < len(v); {
				r, size := utf8.DecodeRune(v[i:])
				if r == utf8.RuneError && size == 1 {
					v[i] = '?'
					changed = true
				}
				i += size
			}
		case protoreflect.MessageKind:
			if repairUTF8(v, fd.Message(), depth+1) {
				changed = true
			}
		}
	}
	return changed
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
	return unmarshalWith(c.base, data, v, func(b []byte, req *authv3.CheckRequest) error { return lenientUnmarshal(b, req) })
}
