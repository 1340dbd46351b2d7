package ratelimit_test

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/grpccodec/codectest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// The rate limit door through the codec: floodgate's rate limit service
// served over a real gRPC connection as floodgate serve serves it.

// rlsRequest is a RateLimitRequest in wire form for domain edge and one
// descriptor api_key = value, written by hand: value may hold bytes that
// are not UTF-8, as Envoy's rate limit filter copies them from a header
// (RequestHeadersAction, source/common/router/router_ratelimit.cc), which
// protobuf-go would refuse to marshal.
func rlsRequest(value string) []byte {
	e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "api_key")
	e = protowire.AppendString(protowire.AppendTag(e, 2, protowire.BytesType), value)
	d := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), e)
	b := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "edge")
	return protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), d)
}

// serveRLS serves a rate limit service of 2 requests a minute per api_key
// with the server codec c (nil: gRPC's own) and returns a function asking
// it, in wire form, over a real gRPC connection.
func serveRLS(t *testing.T, c encoding.CodecV2) func(req []byte) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	cfg, err := rls.Parse([]string{"edge.yaml"}, map[string][]byte{"edge.yaml": []byte(`
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
`)})
	if err != nil {
		t.Fatal(err)
	}
	svc := rls.NewService(cfg, rls.ServiceOptions{
		Hash:  func(tag, value string) string { return tag + "|" + value },
		Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0))),
	})
	var opts []grpc.ServerOption
	if c != nil {
		opts = append(opts, grpc.ForceServerCodecV2(c))
	}
	gs := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(gs, svc)
	conn := extauthztest.ServeGRPC(t, gs)
	return func(req []byte) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp := &rlsv3.RateLimitResponse{}
		err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", codectest.RawRequest(req), resp, grpc.ForceCodecV2(codectest.RawClientCodec{}))
		return resp, err
	}
}

// A descriptor value that is not valid UTF-8 was refused by gRPC's
// protobuf decoder (INTERNAL) before the service ran, and Envoy's rate
// limit filter, failure_mode_deny false by default, let the request through
// unlimited (Filter::complete, source/extensions/filters/http/ratelimit/ratelimit.cc).
// Under either of floodgate's codecs it is decided: limited like any other
// caller, and values that differ only in bytes that are not UTF-8 (or from
// a valid value) count in buckets of their own.
func TestRateLimitRequestsWithInvalidUTF8AreDecided(t *testing.T) {
	if proto.Unmarshal(rlsRequest("k\xff"), &rlsv3.RateLimitRequest{}) == nil {
		t.Fatal("protobuf-go reads the request: the test tests nothing")
	}
	ask := serveRLS(t, nil)
	if _, err := ask(rlsRequest("k\xff")); status.Code(err) != codes.Internal {
		t.Fatalf("gRPC's own codec answered %v; want INTERNAL, the outage this test is about", err)
	}
	for name, c := range map[string]encoding.CodecV2{"fast": grpccodec.Fast(ratelimit.Codec()), "protobuf": grpccodec.Protobuf(ratelimit.Codec())} {
		t.Run(name, func(t *testing.T) {
			ask := serveRLS(t, c)
			code := func(value string) rlsv3.RateLimitResponse_Code {
				t.Helper()
				resp, err := ask(rlsRequest(value))
				if err != nil {
					t.Fatalf("%q: an RPC error (Envoy lets the request through unlimited): %v", value, err)
				}
				return resp.GetOverallCode()
			}
			values := []string{"k\xff", "k\xfe", "k\xff\xfe", "k?", "k!", "k\xc3"}
			for round := 1; round <= 2; round++ {
				for _, v := range values {
					if got := code(v); got != rlsv3.RateLimitResponse_OK {
						t.Errorf("%q, request %d of a limit of 2: %v; it shares a bucket with another value", v, round, got)
					}
				}
			}
			for _, v := range values {
				if got := code(v); got != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Errorf("%q, request 3 of a limit of 2: %v, want OVER_LIMIT", v, got)
				}
			}
		})
	}
}
