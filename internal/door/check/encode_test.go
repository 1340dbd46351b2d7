package check

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/grpccodec"
)

// assertEncodesAsProto checks that the codec writes resp as proto.Marshal
// does (SameAsProto).
func assertEncodesAsProto(t testing.TB, resp *authv3.CheckResponse) {
	t.Helper()
	if err := SameAsProto(resp); err != nil {
		t.Error(err)
	}
}

func opt(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// handlerAllow and handlerDeny are responses as extauthz's handler builds
// them (an allow with both RateLimit header families, a gRPC caller's deny);
// extauthz's tests check the handler's own against the encoder too.
func handlerAllow() *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
		ResponseHeadersToAdd: []*corev3.HeaderValueOption{opt("ratelimit-limit", "1000000000"), opt("ratelimit-remaining", "999999998"),
			opt("ratelimit-reset", "1"), opt("ratelimit-policy", `"per-key";q=1000000000;w=1000`), opt("ratelimit", `"per-key";r=999999998;t=1`)}}}}
}

func handlerDeny() *authv3.CheckResponse {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: 8, Message: "rate limited"}, HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
		Headers: []*corev3.HeaderValueOption{opt("ratelimit-limit", "2"), opt("ratelimit-remaining", "0"), opt("ratelimit-reset", "120"),
			opt("retry-after", "90"), opt("grpc-status", "8"), opt("grpc-retry-pushback-ms", "90000"), opt("content-type", "application/json")},
		Body: `{"error":"rate_limited","policy":"api","retry_after":90}`}}}
}

// TestTheEncoderIsProtoMarshal: responses as the handler builds them, and
// the edges of the encoding (zero values left out, empty messages kept,
// lengths of more than one byte, negative codes), come out as proto.Marshal
// writes them; what the encoder does not cover is handed to proto.Marshal.
func TestTheEncoderIsProtoMarshal(t *testing.T) {
	long := strings.Repeat("x", 300)
	cases := map[string]*authv3.CheckResponse{
		"allow":         handlerAllow(),
		"deny":          handlerDeny(),
		"tcp deny":      {Status: &rpcstatus.Status{Code: 8, Message: "rate limited"}},
		"empty":         {},
		"empty status":  {Status: &rpcstatus.Status{}},
		"negative code": {Status: &rpcstatus.Status{Code: -3, Message: "m"}},
		"empty ok":      {Status: &rpcstatus.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}}},
		"empty deny":    {HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{}}},
		"long values": {Status: &rpcstatus.Status{Code: 8, Message: long}, HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}, Headers: []*corev3.HeaderValueOption{opt(long, long), opt("k", ""), opt("", "v")}, Body: long}}},
		"option without header or action": {HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			ResponseHeadersToAdd: []*corev3.HeaderValueOption{{}, {Header: &corev3.HeaderValue{}}}}}},
		"zero http status": {HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Status: &typev3.HttpStatus{}}}},
	}
	var many []*corev3.HeaderValueOption
	for i := 0; i < 40; i++ {
		many = append(many, opt(fmt.Sprintf("h%d", i), strings.Repeat("v", i*7)))
	}
	cases["many headers"] = &authv3.CheckResponse{Status: &rpcstatus.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{ResponseHeadersToAdd: many}}}
	for name, r := range cases {
		if _, ok := EncodeCheckResponse(r); !ok {
			t.Errorf("%s: the encoder declined it", name)
		}
		assertEncodesAsProto(t, r)
	}

	declined := map[string]*authv3.CheckResponse{
		"dynamic metadata":  {Status: &rpcstatus.Status{}, DynamicMetadata: &structpb.Struct{}},
		"upstream headers":  {HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{opt("a", "b")}}}},
		"headers to remove": {HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{HeadersToRemove: []string{"a"}}}},
		"deprecated append": {HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{ResponseHeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "a"}, Append: wrapperspb.Bool(true)}}}}},
		"raw value":         {HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "a", RawValue: []byte("b")}}}}}},
		"nil option":        {HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Headers: []*corev3.HeaderValueOption{nil}}}},
		"invalid UTF-8":     {HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Body: "\xff"}}},
		"nil ok":            {HttpResponse: &authv3.CheckResponse_OkResponse{}},
		"error response":    {HttpResponse: &authv3.CheckResponse_ErrorResponse{ErrorResponse: &authv3.DeniedHttpResponse{}}},
	}
	for name, r := range declined {
		if _, ok := EncodeCheckResponse(r); ok {
			t.Errorf("%s: the encoder wrote a response it does not cover", name)
		}
		// The codec still answers what protobuf answers.
		got, gotErr := grpccodec.Fast(Codec()).Marshal(r)
		want, wantErr := proto.Marshal(r)
		if (gotErr == nil) != (wantErr == nil) || (gotErr == nil && !bytes.Equal(got.Materialize(), want)) {
			t.Errorf("%s: codec %x, %v; proto.Marshal %x, %v", name, got.Materialize(), gotErr, want, wantErr)
		}
	}
}

// TestTheEncoderKnowsEveryField: every field of the messages the encoder
// writes is either written or makes it decline (see encodable); a field
// added by a new version of the API fails here until it is weighed. The
// field numbers the encoder writes are the schema's.
func TestTheEncoderKnowsEveryField(t *testing.T) {
	known := map[protoreflect.ProtoMessage]map[string]protowireNumber{
		&authv3.CheckResponse{}:      {"status": fCheckResponseStatus, "denied_response": fCheckResponseDenied, "ok_response": fCheckResponseOk, "dynamic_metadata": declines, "error_response": declines},
		&rpcstatus.Status{}:          {"code": fStatusCode, "message": fStatusMessage, "details": declines},
		&authv3.DeniedHttpResponse{}: {"status": fDeniedStatus, "headers": fDeniedHeaders, "body": fDeniedBody},
		&typev3.HttpStatus{}:         {"code": fHTTPStatusCode},
		&authv3.OkHttpResponse{}:     {"response_headers_to_add": fOkResponseHeadersToAdd, "headers": declines, "headers_to_remove": declines, "dynamic_metadata": declines, "query_parameters_to_set": declines, "query_parameters_to_remove": declines},
		&corev3.HeaderValueOption{}:  {"header": fOptionHeader, "append_action": fOptionAppendAction, "append": declines, "keep_empty_value": declines},
		&corev3.HeaderValue{}:        {"key": fHeaderKey, "value": fHeaderValue, "raw_value": declines},
	}
	for m, fields := range known {
		d := m.ProtoReflect().Descriptor()
		fs := d.Fields()
		for i := 0; i < fs.Len(); i++ {
			f := fs.Get(i)
			num, ok := fields[string(f.Name())]
			if !ok {
				t.Errorf("%s.%s (%d) is new to the encoder: write it or decline responses that set it", d.FullName(), f.Name(), f.Number())
				continue
			}
			if num != declines && num != f.Number() {
				t.Errorf("%s.%s is field %d, the encoder writes it as %d", d.FullName(), f.Name(), f.Number(), num)
			}
			if num != declines && num >= 16 {
				t.Errorf("%s.%s is field %d: its tag takes two bytes, the encoder writes one", d.FullName(), f.Name(), num)
			}
		}
	}
}

type protowireNumber = protoreflect.FieldNumber

// declines marks a field whose presence makes the encoder hand the
// response to proto.Marshal.
const declines protowireNumber = -1

// BenchmarkEncodeCheckResponse: an allow with both header families, as
// the handler builds it, through proto.Marshal and through the encoder.
func BenchmarkEncodeCheckResponse(b *testing.B) {
	resp := handlerAllow()
	b.Run("proto.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, ok := EncodeCheckResponse(resp); !ok {
				b.Fatal("declined")
			}
		}
	})
}
