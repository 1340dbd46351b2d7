package extauthz

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
)

// rawRequest is a CheckRequest already on the wire; rawClientCodec sends it
// as it is (protobuf-go would refuse to marshal invalid UTF-8) and decodes
// the answer with protobuf-go.
type rawRequest []byte

type rawClientCodec struct{}

func (rawClientCodec) Name() string { return "proto" }
func (rawClientCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawRequest))}, nil
}
func (rawClientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// Envoy sanitises header values, path and host in `headers`, but not
// header_map keys nor the TLS SNI (CheckRequestUtils::setRequestHeader and
// setTLSSession, source/extensions/filters/common/ext_authz/check_request_utils.cc).
// A string that is not valid UTF-8 made the request fail to decode: an RPC
// error, which Envoy treats as an outage (GrpcClientImpl::onFailure, a
// bypass under failure_mode_allow). Under either decoder such a request is
// now decided.
func TestInvalidUTF8IsDecidedNotAnRPCError(t *testing.T) {
	base := checkRequest("198.51.100.1", map[string]string{"x-api-key": "kAAAA"})
	base.Attributes.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "x-BBBB", Value: "vCCCC"}}}
	base.Attributes.TlsSession = &authv3.AttributeContext_TLSSession{Sni: "sniDDDD"}
	base.Attributes.Source.Principal = "spiffe://EEEE"
	good, err := proto.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	bad := good
	for _, mark := range []string{"AAAA", "BBBB", "CCCC", "DDDD", "EEEE"} {
		if bytes.Count(bad, []byte(mark)) != 1 {
			t.Fatalf("marker %s not found once", mark)
		}
		bad = bytes.Replace(bad, []byte(mark), []byte("\xff\xfe\xc3("), 1)
	}
	if proto.Unmarshal(bad, &authv3.CheckRequest{}) == nil {
		t.Fatal("protobuf-go accepts the damaged request: the test tests nothing")
	}

	p := PolicySpec{Name: "keys", Key: []string{"header:x-api-key"}, Capacity: 1, RefillPerSecond: "1/60"}
	for name, codec := range map[string]encoding.CodecV2{"fast": ServerCodec(), "protobuf": ProtobufCodec()} {
		t.Run(name, func(t *testing.T) {
			eng, err := Compile([]PolicySpec{p}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv := NewServer(eng, memory.New(memory.Options{Clock: limiter.NewManualClock(time.Unix(1_800_000_000, 0))}), ServerOptions{})
			conn := extauthztest.Serve(t, srv, grpc.ForceServerCodecV2(codec))
			check := func(req []byte) *authv3.CheckResponse {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				resp := &authv3.CheckResponse{}
				if err := conn.Invoke(ctx, "/envoy.service.auth.v3.Authorization/Check", rawRequest(req), resp, grpc.ForceCodecV2(rawClientCodec{})); err != nil {
					t.Fatalf("Check returned an RPC error (Envoy would treat it as an outage): %v", err)
				}
				return resp
			}
			if !allowed(check(bad)) {
				t.Fatal("first request with invalid UTF-8 denied")
			}
			if allowed(check(bad)) {
				t.Error("second request with invalid UTF-8 allowed: its key did not name a bucket")
			}
			if !allowed(check(good)) {
				t.Error("a valid key shares the damaged key's bucket")
			}
		})
	}
}

// A message nested deeper than protobuf-go allows is refused, and the
// repair does not follow it down (it would otherwise recurse without bound
// on a hostile request).
func TestLenientDecodingRefusesDeepNesting(t *testing.T) {
	// metadata_context.filter_metadata["a"]: Struct{fields["k"]: Value{struct_value: ...}}, nested,
	// written outside in with the sizes worked out first (building it inside out copies quadratically).
	const depth = maxRepairDepth + 50
	structSize, entrySize, valueSize := make([]int, depth+1), make([]int, depth+1), make([]int, depth+1)
	for k := 1; k <= depth; k++ {
		valueSize[k] = 1 + protowire.SizeVarint(uint64(structSize[k-1])) + structSize[k-1]
		entrySize[k] = 3 + 1 + protowire.SizeVarint(uint64(valueSize[k])) + valueSize[k]
		structSize[k] = 1 + protowire.SizeVarint(uint64(entrySize[k])) + entrySize[k]
	}
	inner := make([]byte, 0, structSize[depth])
	for k := depth; k >= 1; k-- {
		inner = protowire.AppendVarint(protowire.AppendTag(inner, 1, protowire.BytesType), uint64(entrySize[k])) // Struct.fields
		key := "k"
		if k == 1 {
			key = "\xff" // the innermost key is not UTF-8
		}
		inner = protowire.AppendString(protowire.AppendTag(inner, 1, protowire.BytesType), key)
		inner = protowire.AppendVarint(protowire.AppendTag(inner, 2, protowire.BytesType), uint64(valueSize[k]))
		inner = protowire.AppendVarint(protowire.AppendTag(inner, 5, protowire.BytesType), uint64(structSize[k-1])) // Value.struct_value
	}
	if len(inner) != structSize[depth] {
		t.Fatalf("built %d bytes, want %d", len(inner), structSize[depth])
	}
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "a")
	entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), inner)
	md := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)  // Metadata.filter_metadata
	attrs := protowire.AppendBytes(protowire.AppendTag(nil, 11, protowire.BytesType), md) // AttributeContext.metadata_context
	req := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), attrs) // CheckRequest.attributes
	if err := lenientUnmarshal(req, &authv3.CheckRequest{}); err == nil {
		t.Fatal("a request nested deeper than protobuf-go allows decoded")
	}
	desc := (&authv3.CheckRequest{}).ProtoReflect().Descriptor()
	if _, _, ok := repairUTF8(nil, req, desc, 0); ok {
		t.Error("the repair followed the nesting below maxRepairDepth")
	}
	fixed, changed, ok := repairUTF8(nil, req, desc, -4*depth) // the same request within the bound (three messages a level): repaired
	if !ok || !changed || !bytes.Contains(fixed, []byte("\x00FF")) {
		t.Error("the repair missed the innermost invalid key")
	}
}

// Values that differ only in bytes that are not UTF-8 name different
// buckets, and none of them shares a bucket with a valid value: k-\xff,
// k-\xfe and k-? are three callers (under either decoder). Envoy itself
// keeps such bytes only with encode_raw_headers (raw_value is bytes); in
// `headers` it rewrites each as '!' (MessageUtil::sanitizeUtf8String,
// source/common/protobuf/utility.cc), which no server can undo.
func TestInvalidUTF8BytesStayDistinct(t *testing.T) {
	e, p := compileOne(t, PolicySpec{Key: []string{"header:x-api-key"}}, Options{})
	for name, codec := range map[string]func([]byte, *authv3.CheckRequest) error{
		"fast":     unmarshalCheckRequest,
		"protobuf": func(b []byte, r *authv3.CheckRequest) error { return lenientUnmarshal(b, r) },
	} {
		seen := map[string]string{}
		for _, key := range []string{"k-\xff", "k-\xfe", "k-?", "k-!", "k-\xff\xfe", "k-\xc3"} {
			b := marshalLoose(t, checkRequest("198.51.100.1", map[string]string{"x-api-key": key}))
			var got authv3.CheckRequest
			if err := codec(b, &got); err != nil {
				t.Fatalf("%s: %q: %v", name, key, err)
			}
			id, _ := e.identity(p, NewView(&got))
			if other, dup := seen[id]; dup {
				t.Errorf("%s: %q and %q share a bucket", name, key, other)
			}
			seen[id] = key
		}
	}
}

// marshalLoose marshals req even when a string is not valid UTF-8
// (protobuf-go refuses to): the strings are written with placeholders of
// their length and patched.
func marshalLoose(t *testing.T, req *authv3.CheckRequest) []byte {
	t.Helper()
	key := req.Attributes.Request.Http.Headers["x-api-key"]
	placeholder := strings.Repeat("Z", len(key))
	req.Attributes.Request.Http.Headers["x-api-key"] = placeholder
	b, err := proto.Marshal(req)
	req.Attributes.Request.Http.Headers["x-api-key"] = key
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(b, []byte(placeholder)) != 1 {
		t.Fatalf("placeholder %q not found once", placeholder)
	}
	return bytes.Replace(b, []byte(placeholder), []byte(key), 1)
}
