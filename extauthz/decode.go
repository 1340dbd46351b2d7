package extauthz

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Decoding CheckRequests. protobuf-go decodes map fields through reflection:
// for Envoy's headers map that is several allocations per header, and the
// request's decoding was the largest single cost of a Check, more than the
// whole decision (README, Performance, has the figures). The
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
// decide: when the input is malformed (a bad tag or length) or a string is
// not valid UTF-8, the decoder gives up, resets the message and calls
// lenientUnmarshal (lenient.go): proto.Unmarshal, and when that refuses a
// string that is not valid UTF-8, proto.Unmarshal of the request with such
// strings repaired. Its answer, error included, is then the answer.
// TestTheDecoderIsProtoUnmarshal and FuzzDecoder check the two agree.

// ServerCodec is the gRPC codec floodgate serves with: protobuf, with
// CheckRequests decoded by unmarshalCheckRequest. Every other message (health
// checks, reflection) goes to gRPC's own protobuf codec.
func ServerCodec() encoding.CodecV2 {
	return serverCodec{base: encoding.GetCodecV2("proto")}
}

type serverCodec struct{ base encoding.CodecV2 }

func (c serverCodec) Name() string { return "proto" }

// Marshal writes CheckResponses with marshalCheckResponse (encode.go) and
// everything else, or a response it does not cover, with protobuf-go.
func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*authv3.CheckResponse); ok {
		if b, ok := marshalCheckResponse(r); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
	}
	return c.base.Marshal(v)
}

func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return unmarshalWith(c.base, data, v, unmarshalCheckRequest)
}

// unmarshalWith decodes a CheckRequest with decode, from one contiguous
// buffer, and hands any other message to base: both of floodgate's codecs
// differ only in how they read a CheckRequest.
func unmarshalWith(base encoding.CodecV2, data mem.BufferSlice, v any, decode func([]byte, *authv3.CheckRequest) error) error {
	req, ok := v.(*authv3.CheckRequest)
	if !ok {
		return base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decode(buf.ReadOnlyData(), req)
}

// unmarshalCheckRequest is lenientUnmarshal(b, req) for a new req.
func unmarshalCheckRequest(b []byte, req *authv3.CheckRequest) error {
	d := decoder{b: b, s: string(b)}
	if d.checkRequest(req) {
		return nil
	}
	proto.Reset(req)
	return lenientUnmarshal(b, req)
}

// decoder reads one message. s is b as one string: every string decoded is
// a slice of it, so the strings of a request cost one allocation.
type decoder struct {
	b []byte
	s string
}

var merge = proto.UnmarshalOptions{Merge: true}

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
// stopped, when a tag or value is malformed or fn returns false.
func (d *decoder) fields(start, end int, fn func(f field) bool) bool {
	var f field
	for i := start; i < end; {
		num, typ, n := protowire.ConsumeTag(d.b[i:end])
		if n < 0 {
			return false
		}
		f = field{num: num, typ: typ, start: i}
		i += n
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(d.b[i:end])
			if m < 0 {
				return false
			}
			f.vs = i + m - len(v)
			f.ve = f.vs + len(v)
			i += m
		case protowire.VarintType:
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

// delegate merges field f into m with protobuf-go: what the decoder does not
// decode itself (maps other than the headers, metadata, unknown fields, a
// known field with another wire type) ends up exactly where proto.Unmarshal
// would put it.
func (d *decoder) delegate(f field, m proto.Message) bool {
	return merge.Unmarshal(d.b[f.start:f.end], m) == nil
}

// str returns field f's value as a string, or false if it is not valid
// UTF-8 (protobuf-go refuses such a proto3 string).
func (d *decoder) str(f field) (string, bool) {
	if !utf8.Valid(d.b[f.vs:f.ve]) {
		return "", false
	}
	return d.s[f.vs:f.ve], true
}

// setStr sets *s to a string field, or delegates the field to m when it is
// not one (protobuf-go then keeps it as an unknown field).
func (d *decoder) setStr(f field, s *string, m proto.Message) bool {
	if f.typ != protowire.BytesType {
		return d.delegate(f, m)
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
			return d.delegate(f, req)
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
		return d.delegate(f, a)
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
			return d.setStr(f, &p.Service, p)
		case 4:
			return d.setStr(f, &p.Principal, p)
		case 5:
			return d.setStr(f, &p.Certificate, p)
		}
		return d.delegate(f, p)
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
		return d.delegate(f, a)
	})
}

func (d *decoder) socketAddress(start, end int, sa *corev3.SocketAddress) bool {
	return d.fields(start, end, func(f field) bool {
		switch {
		case f.is(1, protowire.VarintType):
			sa.Protocol = corev3.SocketAddress_Protocol(int32(f.x))
			return true
		case f.num == 2:
			return d.setStr(f, &sa.Address, sa)
		case f.is(3, protowire.VarintType):
			sa.PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(f.x)}
			return true
		case f.num == 5:
			return d.setStr(f, &sa.ResolverName, sa)
		case f.is(6, protowire.VarintType):
			sa.Ipv4Compat = protowire.DecodeBool(f.x)
			return true
		}
		return d.delegate(f, sa)
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
		return d.delegate(f, r)
	})
}

func (d *decoder) http(start, end int, h *authv3.AttributeContext_HttpRequest) bool {
	return d.fields(start, end, func(f field) bool {
		switch f.num {
		case 1:
			return d.setStr(f, &h.Id, h)
		case 2:
			return d.setStr(f, &h.Method, h)
		case 3:
			if k, v, ok := d.entry(f); ok {
				if h.Headers == nil {
					h.Headers = make(map[string]string, d.count(start, end, 3))
				}
				h.Headers[k] = v
				return true
			}
		case 4:
			return d.setStr(f, &h.Path, h)
		case 5:
			return d.setStr(f, &h.Host, h)
		case 6:
			return d.setStr(f, &h.Scheme, h)
		case 7:
			return d.setStr(f, &h.Query, h)
		case 8:
			return d.setStr(f, &h.Fragment, h)
		case 9:
			if f.typ == protowire.VarintType {
				h.Size = int64(f.x)
				return true
			}
		case 10:
			return d.setStr(f, &h.Protocol, h)
		case 11:
			return d.setStr(f, &h.Body, h)
		case 12:
			if f.typ == protowire.BytesType {
				h.RawBody = append(make([]byte, 0, f.ve-f.vs), d.b[f.vs:f.ve]...)
				return true
			}
		}
		return d.delegate(f, h)
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
