package grpccodec

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The wire reader every door's hand-written decoder is built on. A door
// decodes the fields it reads on every request itself and hands every other
// field to protobuf-go (Delegate), merged exactly where proto.Unmarshal
// would put it; when the input is malformed, a string is not valid UTF-8 or
// a field nests too deep, its decoder gives up, resets the message and
// calls DecodeLenient, whose answer, error included, is then the answer.

// Reader reads one message in protobuf's wire form. Its string is the
// message's bytes as one string: every string decoded is a slice of it, so
// the strings of a request cost one allocation.
type Reader struct {
	b []byte
	s string
}

// NewReader is a Reader of b, which it must not outlive being changed.
func NewReader(b []byte) Reader { return Reader{b: b, s: string(b)} }

// Len is the length of the message.
func (r *Reader) Len() int { return len(r.b) }

// Field is one field of a message being read: its number and wire type,
// where the whole field (tag included) lies in the message, and its value:
// the bounds of a length-delimited one, or a varint.
type Field struct {
	Num        protowire.Number
	Type       protowire.Type
	Start, End int // the whole field
	VS, VE     int // a length-delimited field's value
	X          uint64
}

// Is reports whether f is field num of wire type typ.
func (f Field) Is(num protowire.Number, typ protowire.Type) bool {
	return f.Num == num && f.Type == typ
}

// Fields calls fn for each field of the message's bytes [start, end). It
// returns false, having stopped, when a tag or value is malformed or fn
// returns false. A tag, a length or a varint of one byte, as nearly all of
// Envoy's are, is read here; longer ones by protowire.
func (r *Reader) Fields(start, end int, fn func(f Field) bool) bool {
	var f Field
	for i := start; i < end; {
		var num protowire.Number
		var typ protowire.Type
		if c := r.b[i]; c < 0x80 {
			num, typ = protowire.Number(c>>3), protowire.Type(c&7)
			if num == 0 {
				return false // field number 0 is invalid, as ConsumeTag says
			}
			f = Field{Num: num, Type: typ, Start: i}
			i++
		} else {
			var n int
			if num, typ, n = protowire.ConsumeTag(r.b[i:end]); n < 0 {
				return false
			}
			f = Field{Num: num, Type: typ, Start: i}
			i += n
		}
		switch typ {
		case protowire.BytesType:
			if i < end && r.b[i] < 0x80 {
				l := int(r.b[i])
				if l > end-i-1 {
					return false
				}
				f.VS, f.VE = i+1, i+1+l
				i += 1 + l
				break
			}
			v, m := protowire.ConsumeBytes(r.b[i:end])
			if m < 0 {
				return false
			}
			f.VS = i + m - len(v)
			f.VE = f.VS + len(v)
			i += m
		case protowire.VarintType:
			if i < end && r.b[i] < 0x80 {
				f.X = uint64(r.b[i])
				i++
				break
			}
			x, m := protowire.ConsumeVarint(r.b[i:end])
			if m < 0 {
				return false
			}
			f.X = x
			i += m
		default:
			m := protowire.ConsumeFieldValue(num, typ, r.b[i:end])
			if m < 0 {
				return false
			}
			i += m
		}
		f.End = i
		if !fn(f) {
			return false
		}
	}
	return true
}

// Delegate merges field f into m, a message at depth (the request at 1),
// with protobuf-go: what a door does not decode itself (maps it does not
// read, metadata, unknown fields, a known field with another wire type) ends
// up exactly where proto.Unmarshal would put it, and nesting counts against
// protobuf-go's limit from the request down, as proto.Unmarshal counts it.
func (r *Reader) Delegate(f Field, m proto.Message, depth int) bool {
	o := proto.UnmarshalOptions{Merge: true, RecursionLimit: maxDepth - depth + 1}
	return o.Unmarshal(r.b[f.Start:f.End], m) == nil
}

// Str returns field f's value as a string, or false if it is not valid
// UTF-8 (protobuf-go refuses such a proto3 string).
func (r *Reader) Str(f Field) (string, bool) {
	if !utf8.Valid(r.b[f.VS:f.VE]) {
		return "", false
	}
	return r.s[f.VS:f.VE], true
}

// Bytes returns field f's value, a slice of the message: a field of type
// bytes copies it.
func (r *Reader) Bytes(f Field) []byte { return r.b[f.VS:f.VE] }

// SetStr sets *s to a string field, or delegates the field to m, a message
// at depth, when it is not one (protobuf-go then keeps it as an unknown
// field).
func (r *Reader) SetStr(f Field, s *string, m proto.Message, depth int) bool {
	if f.Type != protowire.BytesType {
		return r.Delegate(f, m, depth)
	}
	v, ok := r.Str(f)
	*s = v
	return ok
}

// Entry reads a map<string, string> entry, or returns false (the caller
// then delegates it).
func (r *Reader) Entry(f Field) (k, v string, ok bool) {
	if f.Type != protowire.BytesType {
		return "", "", false
	}
	ok = r.Fields(f.VS, f.VE, func(e Field) bool {
		var ok bool
		switch {
		case e.Is(1, protowire.BytesType):
			k, ok = r.Str(e)
		case e.Is(2, protowire.BytesType):
			v, ok = r.Str(e)
		}
		return ok
	})
	return k, v, ok
}

// Count returns how many fields num the message's bytes [start, end) hold
// (a map's or a repeated field's size, so it is made once); malformed input
// counts what it can, the decoding proper reports it.
func (r *Reader) Count(start, end int, num protowire.Number) int {
	n := 0
	r.Fields(start, end, func(f Field) bool {
		if f.Num == num {
			n++
		}
		return true
	})
	return n
}
