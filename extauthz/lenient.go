package extauthz

import (
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
// of a string field that is not part of valid UTF-8 is written as NUL and
// its two hex digits ("\xff" reads "\x00FF") and the request is decoded
// again. Such a request is decided like any other, and values that differ
// only in their invalid bytes still differ: k-\xff, k-\xfe and k-? are three
// buckets. HTTP allows no NUL in a header value, path or authority (Envoy
// refuses one), so a repaired value equals no value a client can send. A
// header name with bad bytes matches no policy.

// lenientUnmarshal is proto.Unmarshal(b, m), with strings that are not
// valid UTF-8 repaired rather than refused.
func lenientUnmarshal(b []byte, m proto.Message) error {
	err := proto.Unmarshal(b, m)
	if err == nil {
		return nil
	}
	fixed, changed, ok := repairUTF8(make([]byte, 0, len(b)+64), b, m.ProtoReflect().Descriptor(), 0)
	if !ok || !changed {
		return err
	}
	proto.Reset(m)
	return proto.Unmarshal(fixed, m)
}

// maxRepairDepth bounds the nesting repairUTF8 follows, as protobuf-go
// bounds its own (its default recursion limit).
const maxRepairDepth = 10000

// repairUTF8 appends to out the encoding of b (a message of type md) with
// every byte of a string field that is not part of valid UTF-8 written as
// NUL and two hex digits. Such a string grows, and so does every message
// around it: a message's length is written as a varint of the size its
// longest repair could need (three times its length), padded, and filled
// in once the message is written; protobuf accepts padded varints. Each
// input byte is read and written once. changed reports whether a string was
// repaired; ok is false when b is malformed or nests deeper than
// maxRepairDepth (protobuf-go's error then stands).
func repairUTF8(out, b []byte, md protoreflect.MessageDescriptor, depth int) (_ []byte, changed, ok bool) {
	if depth > maxRepairDepth {
		return out, false, false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out, false, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return out, false, false
		}
		field := b[:n+m]
		b = b[n+m:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil || (fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.MessageKind) {
			out = append(out, field...)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		out = append(out, field[:n]...) // the tag
		if fd.Kind() == protoreflect.StringKind {
			if utf8.Valid(v) {
				out = append(protowire.AppendVarint(out, uint64(len(v))), v...)
				continue
			}
			changed = true
			out = protowire.AppendVarint(out, uint64(repairedLen(v)))
			out = appendRepaired(out, v)
			continue
		}
		width := protowire.SizeVarint(3 * uint64(len(v)))
		at := len(out)
		out = append(out, make([]byte, width)...)
		var sub, okSub bool
		if out, sub, okSub = repairUTF8(out, v, fd.Message(), depth+1); !okSub {
			return out, false, false
		}
		changed = changed || sub
		putPaddedVarint(out[at:at+width], uint64(len(out)-at-width))
	}
	return out, changed, true
}

// repairedLen is len(appendRepaired(nil, v)).
func repairedLen(v []byte) int {
	n := 0
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRune(v[i:])
		if r == utf8.RuneError && size == 1 {
			n += 3
		} else {
			n += size
		}
		i += size
	}
	return n
}

// appendRepaired appends v with every byte that is not part of valid UTF-8
// written as NUL and its two upper-case hex digits.
func appendRepaired(out, v []byte) []byte {
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRune(v[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, 0, upperHex[v[i]>>4], upperHex[v[i]&15])
		} else {
			out = append(out, v[i:i+size]...)
		}
		i += size
	}
	return out
}

// putPaddedVarint writes x as a varint filling all of dst, which is at
// least SizeVarint(x) long: continuation bits pad it to that width.
func putPaddedVarint(dst []byte, x uint64) {
	for i := range dst {
		dst[i] = byte(x & 0x7f)
		if i < len(dst)-1 {
			dst[i] |= 0x80
		}
		x >>= 7
	}
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
