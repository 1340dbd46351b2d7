package ratelimit

import (
	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/grpccodec"
)

// Decoding RateLimitRequests, as internal/door/check decodes CheckRequests. Envoy's
// rate limit filter copies descriptor values from request headers as they
// came (RequestHeadersAction and the other actions,
// source/common/router/router_ratelimit.cc), so a value may hold bytes that
// are not UTF-8; protobuf-go refuses such a proto3 string, gRPC answers
// INTERNAL, and Envoy's filter, failure_mode_deny false by default, lets the
// request through unlimited (Filter::complete,
// source/extensions/filters/http/ratelimit/ratelimit.cc). grpccodec.DecodeLenient reads
// it instead, with every invalid byte written as NUL and two hex digits, so
// values that differ only in such bytes name different buckets, as they do
// for Check.
//
// The fields Envoy sends on every request (the domain, the descriptors, their
// entries and hits_addend, the request's hits_addend) are read here by hand:
// every string a slice of one copy of the request, the descriptors and entries
// allocated together. Anything else (a descriptor's limit override, a field
// unknown to this version, a known field with another wire type) goes to
// protobuf-go on its own and is merged into place, exactly where
// proto.Unmarshal puts it; a malformed input or a string that is not valid
// UTF-8 makes the decoder give up and hand the whole request to
// grpccodec.DecodeLenient. TestTheRateLimitDecoderIsProtoUnmarshal and
// FuzzRateLimitDecoder check the two agree.

// DecodeRateLimitRequest is grpccodec.DecodeLenient(b, req) for a new req, without
// protobuf-go's generic decoding for the fields Envoy sends on every request.
func DecodeRateLimitRequest(b []byte, req *rlsv3.RateLimitRequest) error {
	d := grpccodec.NewReader(b)
	if readRateLimitRequest(&d, req) {
		return nil
	}
	proto.Reset(req)
	return grpccodec.DecodeLenient(b, req)
}

func readRateLimitRequest(d *grpccodec.Reader, req *rlsv3.RateLimitRequest) bool {
	// The descriptors and their entries are counted first, so that each
	// kind is allocated once however many the request holds.
	nd, ne := 0, 0
	if !d.Fields(0, d.Len(), func(f grpccodec.Field) bool {
		if f.Is(2, protowire.BytesType) {
			nd++
			ne += d.Count(f.VS, f.VE, 1)
		}
		return true
	}) {
		return false
	}
	var descs []commonrl.RateLimitDescriptor
	var entries []commonrl.RateLimitDescriptor_Entry
	var entryPtrs []*commonrl.RateLimitDescriptor_Entry
	if nd == 1 && ne <= len(oneDescriptor{}.entries) && req.Descriptors == nil {
		// What Envoy sends most: one allocation for all of it.
		one := &oneDescriptor{}
		descs, entries, entryPtrs = one.desc[:], one.entries[:ne], one.entryPtrs[:ne]
		req.Descriptors = one.descPtrs[:0]
	} else {
		descs = make([]commonrl.RateLimitDescriptor, nd)
		entries = make([]commonrl.RateLimitDescriptor_Entry, ne)
		entryPtrs = make([]*commonrl.RateLimitDescriptor_Entry, ne)
		if req.Descriptors == nil && nd > 0 {
			req.Descriptors = make([]*commonrl.RateLimitDescriptor, 0, nd)
		}
	}
	for i := range entries {
		entryPtrs[i] = &entries[i]
	}
	return d.Fields(0, d.Len(), func(f grpccodec.Field) bool {
		switch f.Num {
		case 1:
			return d.SetStr(f, &req.Domain, req, 1)
		case 2:
			if f.Type == protowire.BytesType {
				desc := &descs[0]
				descs = descs[1:]
				n := d.Count(f.VS, f.VE, 1)
				desc.Entries, entryPtrs = entryPtrs[:0:n], entryPtrs[n:]
				req.Descriptors = append(req.Descriptors, desc)
				return readDescriptor(d, f.VS, f.VE, desc)
			}
		case 3:
			if f.Type == protowire.VarintType {
				req.HitsAddend = uint32(f.X)
				return true
			}
		}
		return d.Delegate(f, req, 1)
	})
}

// oneDescriptor is a request's descriptor and its entries in one block, for
// a request of one descriptor of up to two entries.
type oneDescriptor struct {
	desc      [1]commonrl.RateLimitDescriptor
	descPtrs  [1]*commonrl.RateLimitDescriptor
	entries   [2]commonrl.RateLimitDescriptor_Entry
	entryPtrs [2]*commonrl.RateLimitDescriptor_Entry
}

// descriptor reads a RateLimitDescriptor whose Entries has room (its
// capacity, from entryPtrs) for its entries, each already allocated.
func readDescriptor(d *grpccodec.Reader, start, end int, desc *commonrl.RateLimitDescriptor) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		switch f.Num {
		case 1:
			if f.Type == protowire.BytesType {
				i := len(desc.Entries)
				desc.Entries = desc.Entries[:i+1]
				return readEntry(d, f.VS, f.VE, desc.Entries[i])
			}
		case 3:
			if f.Type == protowire.BytesType {
				if desc.HitsAddend == nil {
					desc.HitsAddend = &wrapperspb.UInt64Value{}
				}
				return readUint64Value(d, f.VS, f.VE, desc.HitsAddend)
			}
		case 4:
			if f.Type == protowire.VarintType {
				desc.IsNegativeHits = protowire.DecodeBool(f.X)
				return true
			}
		}
		return d.Delegate(f, desc, 2)
	})
}

func readEntry(d *grpccodec.Reader, start, end int, e *commonrl.RateLimitDescriptor_Entry) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		switch f.Num {
		case 1:
			return d.SetStr(f, &e.Key, e, 3)
		case 2:
			return d.SetStr(f, &e.Value, e, 3)
		}
		return d.Delegate(f, e, 3)
	})
}

func readUint64Value(d *grpccodec.Reader, start, end int, v *wrapperspb.UInt64Value) bool {
	return d.Fields(start, end, func(f grpccodec.Field) bool {
		if f.Is(1, protowire.VarintType) {
			v.Value = f.X
			return true
		}
		return d.Delegate(f, v, 3)
	})
}
