package grpccodec

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Lenient decoding. A CheckRequest that fails to decode is an RPC error,
// which Envoy treats as an outage: with failure_mode_allow, the request
// passes unlimited (GrpcClientImpl::onFailure,
// source/extensions/filters/common/ext_authz/ext_authz_grpc_impl.cc); so is
// a RateLimitRequest, which Envoy's rate limit filter lets through with
// failure_mode_deny false, its default (ratelimit.go). So what protobuf-go
// refuses in a request Envoy can send is made readable instead, and the
// request is decided like any other:
//
//   - A proto3 string field that is not valid UTF-8: protobuf-go refuses it
//     and has no option to accept it, and Envoy does not sanitise every
//     string it puts in a CheckRequest (header_map keys, the TLS SNI:
//     CheckRequestUtils::setRequestHeader and setTLSSession,
//     source/extensions/filters/common/ext_authz/check_request_utils.cc).
//     Every byte that is not part of valid UTF-8 is written as NUL and its
//     two upper-case hex digits ("\xff" reads "\x00FF"), so values that
//     differ only in their invalid bytes still differ: k-\xff, k-\xfe and
//     k-? are three buckets. HTTP allows no NUL in a header value, path or
//     authority (Envoy refuses one), so a repaired value equals no value a
//     client can send. A header name with bad bytes matches no policy.
//   - Messages nested deeper than protobuf-go's recursion limit
//     (protowire.DefaultRecursionLimit, counting each message and map
//     entry from the CheckRequest down). Envoy copies the dynamic metadata
//     namespaces named in metadata_context_namespaces into metadata_context
//     whole, as other filters left them (fillMetadataContext,
//     source/extensions/filters/http/ext_authz/ext_authz.cc; a Lua or Wasm
//     filter can nest a Struct as deep as it likes), and serialises them
//     with no such limit. What lies deeper than the limit is left out; everything above
//     it, metadata a policy reads included, is kept.
//
// Anything else protobuf-go refuses (a malformed tag or length) is not a
// request Envoy sends, and its error stands.

// DecodeLenient is proto.Unmarshal(b, m), with strings that are not valid
// UTF-8 repaired and nesting beyond protobuf-go's limit cut, rather than
// refused.
func DecodeLenient(b []byte, m proto.Message) error {
	err := proto.Unmarshal(b, m)
	if err == nil {
		return nil
	}
	fixed, ok := sanitize(b, m.ProtoReflect().Descriptor(), maxDepth)
	if !ok {
		return err
	}
	proto.Reset(m)
	return proto.Unmarshal(fixed, m)
}

// maxDepth is how deep messages may nest for protobuf-go to read them.
const maxDepth = protowire.DefaultRecursionLimit

// sanitize rewrites b, a message of type md, with every byte of a string
// field that is not part of valid UTF-8 as NUL and two hex digits and every message field (or
// map entry) that would nest deeper than limit, the message itself at depth
// 1, left out. It reports false when it changed nothing, or when b is
// malformed (protobuf-go's error then stands).
//
// Leaving a field out changes the lengths of the messages around it, so it
// works in two passes, each linear in len(b): measure finds the length
// every kept message will have, write writes them.
func sanitize(b []byte, md protoreflect.MessageDescriptor, limit int) ([]byte, bool) {
	s := sanitizer{limit: limit}
	n, ok := s.measure(b, md, 1)
	if !ok || !s.changed {
		return nil, false
	}
	out := make([]byte, 0, n)
	s.next = 0
	return s.write(out, b, md, 1), true
}

type sanitizer struct {
	limit   int
	changed bool
	// sizes are the kept messages' lengths, in the order the two passes
	// meet them; next is write's place in it.
	sizes []int
	next  int
}

// sanitizedField is one field of a message as both passes see it.
type sanitizedField struct {
	tag   []byte // the tag, as written
	whole []byte // tag and value, as written
	value []byte // a length-delimited field's value
	kind  fieldKind
	msg   protoreflect.MessageDescriptor
}

type fieldKind int

const (
	verbatim fieldKind = iota // copied as it is
	stringField
	messageField // a message or map entry kept: rewritten
	cutField     // a message or map entry too deep: left out
)

// fields calls fn for each field of b, a message of type md at depth, and
// reports false when b is malformed.
func (s *sanitizer) fields(b []byte, md protoreflect.MessageDescriptor, depth int, fn func(f *sanitizedField)) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		f := sanitizedField{tag: b[:n], whole: b[:n+m]}
		b = b[n+m:]
		fd := md.Fields().ByNumber(num)
		if typ == protowire.BytesType && fd != nil {
			f.value, _ = protowire.ConsumeBytes(f.whole[n:])
			switch fd.Kind() {
			case protoreflect.StringKind:
				f.kind = stringField
			case protoreflect.MessageKind: // maps too: their entries are messages
				f.kind, f.msg = messageField, fd.Message()
				if depth+1 > s.limit {
					f.kind = cutField
				}
			}
		}
		fn(&f)
	}
	return true
}

// measure returns the length b, a message of type md at depth, will have
// once sanitized, and records the lengths of the messages within.
func (s *sanitizer) measure(b []byte, md protoreflect.MessageDescriptor, depth int) (n int, ok bool) {
	ok = true // until a message within is malformed
	ok = s.fields(b, md, depth, func(f *sanitizedField) {
		switch f.kind {
		case cutField:
			s.changed = true
		case messageField:
			at := len(s.sizes)
			s.sizes = append(s.sizes, 0)
			inner, innerOK := s.measure(f.value, f.msg, depth+1)
			if !innerOK {
				ok = false
				return
			}
			s.sizes[at] = inner
			n += len(f.tag) + protowire.SizeVarint(uint64(inner)) + inner
		case stringField:
			if utf8.Valid(f.value) {
				n += len(f.whole)
				return
			}
			s.changed = true
			r := repairedLen(f.value)
			n += len(f.tag) + protowire.SizeVarint(uint64(r)) + r
		default:
			n += len(f.whole)
		}
	}) && ok
	return n, ok
}

// write appends b, a message of type md at depth, sanitized, to out. b is
// well formed: measure has read it.
func (s *sanitizer) write(out, b []byte, md protoreflect.MessageDescriptor, depth int) []byte {
	s.fields(b, md, depth, func(f *sanitizedField) {
		switch f.kind {
		case cutField:
		case messageField:
			out = append(out, f.tag...)
			out = protowire.AppendVarint(out, uint64(s.sizes[s.next]))
			s.next++
			out = s.write(out, f.value, f.msg, depth+1)
		case stringField:
			if utf8.Valid(f.value) {
				out = append(out, f.whole...)
				return
			}
			out = append(out, f.tag...)
			out = protowire.AppendVarint(out, uint64(repairedLen(f.value)))
			out = appendRepaired(out, f.value)
		default:
			out = append(out, f.whole...)
		}
	})
	return out
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
	const upperHex = "0123456789ABCDEF"
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
