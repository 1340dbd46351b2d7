package grpccodec

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Decoding CheckRequests. protobuf-go decodes map fields through reflection:
// for Envoy's headers map that is several allocations per header, and the
// request's decoding was the largest single cost of a Check, more than the
// whole decision (docs/performance.md has the figures). The
// fields Envoy sends on every check (the attribute context, the peers and
// their socket addresses, the request, the HTTP request with its headers
// map, the context extensions) are decoded here by hand: every string is a
// slice of one copy of the request, and the header map is made once at its
// size. Every other field (header_map, metadata, labels, the TLS session,
// the timestamp, a field unknown to this version, a known field with another
// wire type) is handed to protobuf-go on its own and merged into place,
// exactly where proto.Unmarshal would put it.
//
// The result must be what proto.Unmarshal gives, or protobuf-go must
// decide: when the input is malformed (a bad tag or length), a string is
// not valid UTF-8 or a field nests too deep, the decoder gives up, resets
// the message and calls DecodeLenient (lenient.go): proto.Unmarshal, and
// when that refuses a string that is not valid UTF-8 or nesting deeper than
// it allows, proto.Unmarshal of the request with such strings repaired and
// such nesting cut. Its answer, error included, is then the answer.
// TestTheDecoderIsProtoUnmarshal and FuzzDecoder check the two agree.

// DecodeCheckRequest is DecodeLenient(b, req) for a new req, without
// protobuf-go's reflection for the fields Envoy sends on every check.
func DecodeCheckRequest(b []byte, req *authv3.CheckRequest) error {
	d := decoder{b: b, s: string(b)}
	if d.checkRequest(req) {
		return nil
	}
	proto.Reset(req)
	return DecodeLenient(b, req)
}

// decoder reads one message. s is b as one string: every string decoded is
// a slice of it, so the strings of a request cost one allocation.
type decoder struct {
	b []byte
	s string
}

// field is one field of a message being decoded: its number and wire type,
// where the whole field (tag included) lies in b, and its value: the bounds
// of a length-delimited one, or a varint.
type field struct {
	num        protowire.Number
	typ        protowire.Type
	start, end int
	vs, ve     int
	x          uint64
}

func (f field) is(num protowire.Number, typ protowire.Type) bool {
	return f.num == num && f.typ == typ
}

// fields calls fn for each field of b[start:end]. It returns false, having
// stopped, when a tag or value is malformed or fn returns false. A tag, a
// length or a varint of one byte, as nearly all of Envoy's are, is read
// here; longer ones by protowire.
func (d *decoder) fields(start, end int, fn func(f field) bool) bool {
	var f field
	for i := start; i < end; {
		var num protowire.Number
		var typ protowire.Type
		if c := d.b[i]; c < 0x80 {
			num, typ = protowire.Number(c>>3), protowire.Type(c&7)
			if num == 0 {
				return false // field number 0 is invalid, as ConsumeTag says
			}
			f = field{num: num, typ: typ, start: i}
			i++
		} else {
			var n int
			if num, typ, n = protowire.ConsumeTag(d.b[i:end]); n < 0 {
				return false
			}
			f = field{num: num, typ: typ, start: i}
			i += n
		}
		switch typ {
		case protowire.BytesType:
			if i < end && d.b[i] < 0x80 {
				l := int(d.b[i])
				if l > end-i-1 {
					return false
				}
				f.vs, f.ve = i+1, i+1+l
				i += 1 + l
				break
			}
			v, m := protowire.ConsumeBytes(d.b[i:end])
			if m < 0 {
				return false
			}
			f.vs = i + m - len(v)
			f.ve = f.vs + len(v)
			i += m
		case protowire.VarintType:
			if i < end && d.b[i] < 0x80 {
				f.x = uint64(d.b[i])
				i++
				break
			}
			x, m := protowire.ConsumeVarint(d.b[i:end])
			if m < 0 {
				return false
			}
			f.x = x
			i += m
		default:
			m := protowire.ConsumeFieldValue(num, typ, d.b[i:end])
			if m < 0 {
				return false
			}
			i += m
		}
		f.end = i
		if !fn(f) {
			return false
		}
	}
	return true
}

// delegate merges field f into m, a message at depth (the CheckRequest at
// 1), with protobuf-go: what the decoder does not decode itself (maps other
// than the headers, metadata, unknown fields, a known field with another
// wire type) ends up exactly where proto.Unmarshal would put it, and nesting
// counts against protobuf-go's limit from the CheckRequest down, as
// proto.Unmarshal counts it.
func (d *decoder) delegate(f field, m proto.Message, depth int) bool {
	o := proto.UnmarshalOptions{Merge: true, RecursionLimit: maxDepth - depth + 1}
	return o.Unmarshal(d.b[f.start:f.end], m) == nil
}

// str returns field f's value as a string, or false if it is not valid
// UTF-8 (protobuf-go refuses such a proto3 string).
func (d *decoder) str(f field) (string, bool) {
	if !utf8.Valid(d.b[f.vs:f.ve]) {
		return "", false
	}
	return d.s[f.vs:f.ve], true
}

// setStr sets *s to a string field, or delegates the field to m, a message
// at depth, when it is not one (protobuf-go then keeps it as an unknown
// field).
func (d *decoder) setStr(f field, s *string, m proto.Message, depth int) bool {
	if f.typ != protowire.BytesType {
		return d.delegate(f, m, depth)
	}
	v, ok := d.str(f)
	*s = v
	return ok
}

// entry reads a map<string, string> entry, or returns false (the caller
// then delegates it).
func (d *decoder) entry(f field) (k, v string, ok bool) {
	if f.typ != protowire.BytesType {
		return "", "", false
	}
	ok = d.fields(f.vs, f.ve, func(e field) bool {
		var ok bool
		switch {
		case e.is(1, protowire.BytesType):
			k, ok = d.str(e)
		case e.is(2, protowire.BytesType):
			v, ok = d.str(e)
		}
		return ok
	})
	return k, v, ok
}

func (d *decoder) checkRequest(req *authv3.CheckRequest) bool {
	return d.fields(0, len(d.b), func(f field) bool {
		if !f.is(1, protowire.BytesType) {
			return d.delegate(f, req, 1)
		}
		if req.Attributes == nil {
			req.Attributes = &authv3.AttributeContext{}
		}
		return d.attributes(f.vs, f.ve, req.Attributes)
	})
}

func (d *decoder) attributes(start, end int, a *authv3.AttributeContext) bool {
	return d.fields(start, end, func(f field) bool {
		switch {
		case f.is(1, protowire.BytesType):
			if a.Source == nil {
				a.Source = &authv3.AttributeContext_Peer{}
			}
			return d.peer(f.vs, f.ve, a.Source)
		case f.is(2, protowire.BytesType):
			if a.Destination == nil {
				a.Destination = &authv3.AttributeContext_Peer{}
			}
			return d.peer(f.vs, f.ve, a.Destination)
		case f.is(4, protowire.BytesType):
			if a.Request == nil {
				a.Request = &authv3.AttributeContext_Request{}
			}
			return d.request(f.vs, f.ve, a.Request)
		case f.num == 10:
			if k, v, ok := d.entry(f); ok {
				if a.ContextExtensions == nil {
					a.ContextExtensions = map[string]string{}
				}
				a.ContextExtensions[k] = v
				return true
			}
		}
		return d.delegate(f, a, 2)
	})
}

func (d *decoder) peer(start, end int, p *authv3.AttributeContext_Peer) bool {
	return d.fields(start, end, func(f field) bool {
		switch f.num {
		case 1:
			if f.typ == protowire.BytesType {
				if p.Address == nil {
					p.Address = &corev3.Address{}
				}
				return d.address(f.vs, f.ve, p.Address)
			}
		case 2:
			return d.setStr(f, &p.Service, p, 3)
		case 4:
			return d.setStr(f, &p.Principal, p, 3)
		case 5:
			return d.setStr(f, &p.Certificate, p, 3)
		}
		return d.delegate(f, p, 3)
	})
}

func (d *decoder) address(start, end int, a *corev3.Address) bool {
	return d.fields(start, end, func(f field) bool {
		if f.is(1, protowire.BytesType) {
			sa, ok := a.Address.(*corev3.Address_SocketAddress)
			if !ok || sa.SocketAddress == nil {
				sa = &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{}}
				a.Address = sa
			}
			return d.socketAddress(f.vs, f.ve, sa.SocketAddress)
		}
		return d.delegate(f, a, 4)
	})
}

func (d *decoder) socketAddress(start, end int, sa *corev3.SocketAddress) bool {
	return d.fields(start, end, func(f field) bool {
		switch {
		case f.is(1, protowire.VarintType):
			sa.Protocol = corev3.SocketAddress_Protocol(int32(f.x))
			return true
		case f.num == 2:
			return d.setStr(f, &sa.Address, sa, 5)
		case f.is(3, protowire.VarintType):
			sa.PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(f.x)}
			return true
		case f.num == 5:
			return d.setStr(f, &sa.ResolverName, sa, 5)
		case f.is(6, protowire.VarintType):
			sa.Ipv4Compat = protowire.DecodeBool(f.x)
			return true
		}
		return d.delegate(f, sa, 5)
	})
}

func (d *decoder) request(start, end int, r *authv3.AttributeContext_Request) bool {
	return d.fields(start, end, func(f field) bool {
		if f.is(2, protowire.BytesType) {
			if r.Http == nil {
				r.Http = &authv3.AttributeContext_HttpRequest{}
			}
			return d.http(f.vs, f.ve, r.Http)
		}
		return d.delegate(f, r, 3)
	})
}

func (d *decoder) http(start, end int, h *authv3.AttributeContext_HttpRequest) bool {
	return d.fields(start, end, func(f field) bool {
		switch f.num {
		case 1:
			return d.setStr(f, &h.Id, h, 4)
		case 2:
			return d.setStr(f, &h.Method, h, 4)
		case 3:
			if k, v, ok := d.entry(f); ok {
				if h.Headers == nil {
					h.Headers = make(map[string]string, d.count(start, end, 3))
				}
				h.Headers[k] = v
				return true
			}
		case 4:
			return d.setStr(f, &h.Path, h, 4)
		case 5:
			return d.setStr(f, &h.Host, h, 4)
		case 6:
			return d.setStr(f, &h.Scheme, h, 4)
		case 7:
			return d.setStr(f, &h.Query, h, 4)
		case 8:
			return d.setStr(f, &h.Fragment, h, 4)
		case 9:
			if f.typ == protowire.VarintType {
				h.Size = int64(f.x)
				return true
			}
		case 10:
			return d.setStr(f, &h.Protocol, h, 4)
		case 11:
			return d.setStr(f, &h.Body, h, 4)
		case 12:
			if f.typ == protowire.BytesType {
				h.RawBody = append(make([]byte, 0, f.ve-f.vs), d.b[f.vs:f.ve]...)
				return true
			}
		}
		return d.delegate(f, h, 4)
	})
}

// count returns how many fields num b[start:end] holds (the header map's
// size, so it is made once); malformed input counts what it can, the
// decoding proper reports it.
func (d *decoder) count(start, end int, num protowire.Number) int {
	n := 0
	d.fields(start, end, func(f field) bool {
		if f.num == num {
			n++
		}
		return true
	})
	return n
}
