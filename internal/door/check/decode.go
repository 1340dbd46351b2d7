package check

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/grpccodec"
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
// the message and calls grpccodec.DecodeLenient (internal/grpccodec/lenient.go): proto.Unmarshal, and
// when that refuses a string that is not valid UTF-8 or nesting deeper than
// it allows, proto.Unmarshal of the request with such strings repaired and
// such nesting cut. Its answer, error included, is then the answer.
// TestTheDecoderIsProtoUnmarshal and FuzzDecoder check the two agree.

// DecodeCheckRequest is grpccodec.DecodeLenient(b, req) for a new req, without
// protobuf-go's reflection for the fields Envoy sends on every check.
func DecodeCheckRequest(b []byte, req *authv3.CheckRequest) error {
	d := grpccodec.NewReader(b)
	if readCheckRequest(&d, 0, len(b), req) {
		return nil
	}
	proto.Reset(req)
	return grpccodec.DecodeLenient(b, req)
}

func readCheckRequest(d *grpccodec.Reader, start, end int, req *authv3.CheckRequest) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		if !f.Is(1, protowire.BytesType) {
			return d.Delegate(f, req, 1)
		}
		if req.Attributes == nil {
			req.Attributes = &authv3.AttributeContext{}
		}
		return readAttributes(d, f.VS, f.VE, req.Attributes)
	})
}

func readAttributes(d *grpccodec.Reader, start, end int, a *authv3.AttributeContext) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		switch {
		case f.Is(1, protowire.BytesType):
			if a.Source == nil {
				a.Source = &authv3.AttributeContext_Peer{}
			}
			return readPeer(d, f.VS, f.VE, a.Source)
		case f.Is(2, protowire.BytesType):
			if a.Destination == nil {
				a.Destination = &authv3.AttributeContext_Peer{}
			}
			return readPeer(d, f.VS, f.VE, a.Destination)
		case f.Is(4, protowire.BytesType):
			if a.Request == nil {
				a.Request = &authv3.AttributeContext_Request{}
			}
			return readRequest(d, f.VS, f.VE, a.Request)
		case f.Num == 10:
			if k, v, ok := d.Entry(f); ok {
				if a.ContextExtensions == nil {
					a.ContextExtensions = map[string]string{}
				}
				a.ContextExtensions[k] = v
				return true
			}
		}
		return d.Delegate(f, a, 2)
	})
}

func readPeer(d *grpccodec.Reader, start, end int, p *authv3.AttributeContext_Peer) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		switch f.Num {
		case 1:
			if f.Type == protowire.BytesType {
				if p.Address == nil {
					p.Address = &corev3.Address{}
				}
				return readAddress(d, f.VS, f.VE, p.Address)
			}
		case 2:
			return d.SetStr(f, &p.Service, p, 3)
		case 4:
			return d.SetStr(f, &p.Principal, p, 3)
		case 5:
			return d.SetStr(f, &p.Certificate, p, 3)
		}
		return d.Delegate(f, p, 3)
	})
}

func readAddress(d *grpccodec.Reader, start, end int, a *corev3.Address) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		if f.Is(1, protowire.BytesType) {
			sa, ok := a.Address.(*corev3.Address_SocketAddress)
			if !ok || sa.SocketAddress == nil {
				sa = &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{}}
				a.Address = sa
			}
			return readSocketAddress(d, f.VS, f.VE, sa.SocketAddress)
		}
		return d.Delegate(f, a, 4)
	})
}

func readSocketAddress(d *grpccodec.Reader, start, end int, sa *corev3.SocketAddress) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		switch {
		case f.Is(1, protowire.VarintType):
			sa.Protocol = corev3.SocketAddress_Protocol(int32(f.X))
			return true
		case f.Num == 2:
			return d.SetStr(f, &sa.Address, sa, 5)
		case f.Is(3, protowire.VarintType):
			sa.PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(f.X)}
			return true
		case f.Num == 5:
			return d.SetStr(f, &sa.ResolverName, sa, 5)
		case f.Is(6, protowire.VarintType):
			sa.Ipv4Compat = protowire.DecodeBool(f.X)
			return true
		}
		return d.Delegate(f, sa, 5)
	})
}

func readRequest(d *grpccodec.Reader, start, end int, r *authv3.AttributeContext_Request) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		if f.Is(2, protowire.BytesType) {
			if r.Http == nil {
				r.Http = &authv3.AttributeContext_HttpRequest{}
			}
			return readHTTP(d, f.VS, f.VE, r.Http)
		}
		return d.Delegate(f, r, 3)
	})
}

func readHTTP(d *grpccodec.Reader, start, end int, h *authv3.AttributeContext_HttpRequest) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		switch f.Num {
		case 1:
			return d.SetStr(f, &h.Id, h, 4)
		case 2:
			return d.SetStr(f, &h.Method, h, 4)
		case 3:
			if k, v, ok := d.Entry(f); ok {
				if h.Headers == nil {
					h.Headers = make(map[string]string, d.Count(start, end, 3))
				}
				h.Headers[k] = v
				return true
			}
		case 4:
			return d.SetStr(f, &h.Path, h, 4)
		case 5:
			return d.SetStr(f, &h.Host, h, 4)
		case 6:
			return d.SetStr(f, &h.Scheme, h, 4)
		case 7:
			return d.SetStr(f, &h.Query, h, 4)
		case 8:
			return d.SetStr(f, &h.Fragment, h, 4)
		case 9:
			if f.Type == protowire.VarintType {
				h.Size = int64(f.X)
				return true
			}
		case 10:
			return d.SetStr(f, &h.Protocol, h, 4)
		case 11:
			return d.SetStr(f, &h.Body, h, 4)
		case 12:
			if f.Type == protowire.BytesType {
				h.RawBody = append(make([]byte, 0, f.VE-f.VS), d.Bytes(f)...)
				return true
			}
		}
		return d.Delegate(f, h, 4)
	})
}
