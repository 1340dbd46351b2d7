package grpccodec

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The writer's primitives every door's hand-written encoder is built on:
// sizes first, then one slice of exactly that size, with the bytes
// proto.Marshal writes (fields in number order, zero values left out, a
// present empty message as its tag and length 0). Every field they write
// has a number below 16, so its tag is one byte; lengths and values are
// mostly below 128, one byte too.

// Tag is the one-byte tag of field num, below 16, of wire type typ.
func Tag(num protowire.Number, typ protowire.Type) byte { return byte(num)<<3 | byte(typ) }

// SizeUvarint is the size of v as a varint.
func SizeUvarint(v uint64) int {
	if v < 0x80 {
		return 1
	}
	return protowire.SizeVarint(v)
}

// AppendUvarint appends v as a varint.
func AppendUvarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

// SizeMessage is the size of a message field of number num whose fields
// take n bytes.
func SizeMessage(num protowire.Number, n int) int {
	return 1 + SizeUvarint(uint64(n)) + n
}

// SizeVarint is the size of a varint field, 0 when v is zero (proto3
// leaves it out).
func SizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + SizeUvarint(v)
}

// SizeString is the size of a string field, 0 when s is empty.
func SizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return 1 + SizeUvarint(uint64(len(s))) + len(s)
}

// AppendMessageHead appends the tag and length of a message field of
// number num whose fields take n bytes.
func AppendMessageHead(b []byte, num protowire.Number, n int) []byte {
	return AppendUvarint(append(b, Tag(num, protowire.BytesType)), uint64(n))
}

// AppendVarint appends a varint field, nothing when v is zero.
func AppendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return AppendUvarint(append(b, Tag(num, protowire.VarintType)), v)
}

// AppendString appends a string field, nothing when s is empty.
func AppendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = AppendUvarint(append(b, Tag(num, protowire.BytesType)), uint64(len(s)))
	return append(b, s...)
}

// ValidUTF8 is utf8.ValidString, quicker on the short ASCII strings
// headers are. A string that is not valid UTF-8 is left to proto.Marshal,
// which refuses it.
func ValidUTF8(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return utf8.ValidString(s[i:])
		}
	}
	return true
}
