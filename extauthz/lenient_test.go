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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
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
	for name, c := range map[string]encoding.CodecV2{"fast": grpccodec.Fast(), "protobuf": grpccodec.Protobuf()} {
		t.Run(name, func(t *testing.T) {
			eng, err := Compile([]PolicySpec{p}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv := NewServer(eng, storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0))), ServerOptions{})
			conn := extauthztest.Serve(t, srv, grpc.ForceServerCodecV2(c))
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

// Envoy copies the dynamic metadata namespaces named in
// metadata_context_namespaces into metadata_context whole, as other filters
// left them (fillMetadataContext, source/extensions/filters/http/ext_authz/ext_authz.cc),
// and serialises them without a depth limit, so a Struct nested thousands
// deep reaches Floodgate. It
// was refused by protobuf-go's recursion limit: gRPC INTERNAL, an outage to
// Envoy. Under either decoder it is now decided, and the metadata a policy
// reads above the limit still names the caller's bucket.
func TestDeeplyNestedMetadataIsDecidedNotAnRPCError(t *testing.T) {
	deep := func(user string) *authv3.CheckRequest {
		inner := &structpb.Struct{}
		for range 6000 {
			inner = &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStructValue(inner)}}
		}
		req := checkRequest("198.51.100.1", nil)
		req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": {
			Fields: map[string]*structpb.Value{"sub": structpb.NewStringValue(user), "claims": structpb.NewStructValue(inner)}}}}
		return req
	}
	if err := proto.Unmarshal(mustMarshal(t, deep("alice")), &authv3.CheckRequest{}); err == nil {
		t.Fatal("protobuf-go reads the nested request: the test tests nothing")
	}
	p := PolicySpec{Name: "per-user", Key: []string{"metadata:envoy.filters.http.jwt_authn:sub"}, OnMissingKey: "skip", Capacity: 1, RefillPerSecond: "1/60"}
	for name, c := range map[string]encoding.CodecV2{"fast": grpccodec.Fast(), "protobuf": grpccodec.Protobuf()} {
		t.Run(name, func(t *testing.T) {
			srv := NewServer(mustCompile(t, p), storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0))), ServerOptions{})
			conn := extauthztest.Serve(t, srv, grpc.ForceServerCodecV2(c))
			check := func(req *authv3.CheckRequest) *authv3.CheckResponse {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				resp := &authv3.CheckResponse{}
				if err := conn.Invoke(ctx, "/envoy.service.auth.v3.Authorization/Check", rawRequest(mustMarshal(t, req)), resp, grpc.ForceCodecV2(rawClientCodec{})); err != nil {
					t.Fatalf("Check returned an RPC error (Envoy would treat it as an outage): %v", err)
				}
				return resp
			}
			if !allowed(check(deep("alice"))) {
				t.Fatal("alice's first request denied")
			}
			if allowed(check(deep("alice"))) {
				t.Error("alice's second request allowed: her metadata did not name her bucket")
			}
			if !allowed(check(deep("bob"))) {
				t.Error("bob shares alice's bucket")
			}
		})
	}
}

// mustMarshal is proto.Marshal, which has no nesting limit.
func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Values that differ only in bytes that are not UTF-8 name different
// buckets, and none of them shares a bucket with a valid value: k-\xff,
// k-\xfe and k-? are three callers (under either decoder). Envoy itself
// keeps such bytes only with encode_raw_headers (raw_value is bytes); in
// `headers` it rewrites each as '!' (MessageUtil::sanitizeUtf8String,
// source/common/protobuf/utility.cc), which no server can undo.
func TestInvalidUTF8BytesStayDistinct(t *testing.T) {
	e, p := compileOne(t, PolicySpec{Key: []string{"header:x-api-key"}}, Options{})
	for name, decode := range map[string]func([]byte, *authv3.CheckRequest) error{
		"fast":     grpccodec.DecodeCheckRequest,
		"protobuf": func(b []byte, r *authv3.CheckRequest) error { return grpccodec.DecodeLenient(b, r) },
	} {
		seen := map[string]string{}
		for _, key := range []string{"k-\xff", "k-\xfe", "k-?", "k-!", "k-\xff\xfe", "k-\xc3"} {
			b := marshalLoose(t, checkRequest("198.51.100.1", map[string]string{"x-api-key": key}))
			var got authv3.CheckRequest
			if err := decode(b, &got); err != nil {
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
