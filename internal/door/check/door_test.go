package check_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/door/check"
	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/internal/grpccodec/codectest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// The Check door through the codec: extauthz's handler served over a real
// gRPC connection with each of the codecs floodgate serve can run, on
// requests protobuf-go refuses, and the handler's responses against the
// encoder.

// codecs are the server codecs of listen.decoder, fast and protobuf, as
// floodgate serve builds them for Check.
func codecs() map[string]encoding.CodecV2 {
	return map[string]encoding.CodecV2{"fast": grpccodec.Fast(check.Codec()), "protobuf": grpccodec.Protobuf(check.Codec())}
}

func allowed(resp *authv3.CheckResponse) bool { return resp.GetStatus().GetCode() == 0 }

// checkOver serves srv with codec c and returns a function sending a
// request in wire form over a real gRPC connection, failing the test on an
// RPC error (Envoy would treat it as an outage).
func checkOver(t *testing.T, srv *extauthz.Server, c encoding.CodecV2) func(req []byte) *authv3.CheckResponse {
	conn := extauthztest.Serve(t, srv, grpc.ForceServerCodecV2(c))
	return func(req []byte) *authv3.CheckResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp := &authv3.CheckResponse{}
		if err := conn.Invoke(ctx, "/envoy.service.auth.v3.Authorization/Check", codectest.RawRequest(req), resp, grpc.ForceCodecV2(codectest.RawClientCodec{})); err != nil {
			t.Fatalf("Check returned an RPC error (Envoy would treat it as an outage): %v", err)
		}
		return resp
	}
}

func memoryServer(t testing.TB, specs ...extauthz.PolicySpec) *extauthz.Server {
	t.Helper()
	eng, err := extauthz.Compile(specs, extauthz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return extauthz.NewServer(eng, storetest.Memory(limiter.NewManualClock(time.Unix(1_800_000_000, 0))), extauthz.ServerOptions{})
}

// Envoy sanitises header values, path and host in `headers`, but not
// header_map keys nor the TLS SNI (CheckRequestUtils::setRequestHeader and
// setTLSSession, source/extensions/filters/common/ext_authz/check_request_utils.cc).
// A string that is not valid UTF-8 made the request fail to decode: an RPC
// error, which Envoy treats as an outage (GrpcClientImpl::onFailure, a
// bypass under failure_mode_allow). Under either decoder such a request is
// now decided.
func TestInvalidUTF8IsDecidedNotAnRPCError(t *testing.T) {
	base := extauthztest.CheckRequest("198.51.100.1", map[string]string{"x-api-key": "kAAAA"})
	base.Attributes.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "x-BBBB", Value: "vCCCC"}}}
	base.Attributes.TlsSession = &authv3.AttributeContext_TLSSession{Sni: "sniDDDD"}
	base.Attributes.Source.Principal = "spiffe://EEEE"
	good := mustMarshal(t, base)
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
	p := extauthz.PolicySpec{Name: "keys", Key: []string{"header:x-api-key"}, Capacity: 1, RefillPerSecond: "1/60"}
	for name, c := range codecs() {
		t.Run(name, func(t *testing.T) {
			check := checkOver(t, memoryServer(t, p), c)
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
// deep reaches Floodgate. It was refused by protobuf-go's recursion limit:
// gRPC INTERNAL, an outage to Envoy. Under either decoder it is now decided,
// and the metadata a policy reads above the limit still names the caller's
// bucket.
func TestDeeplyNestedMetadataIsDecidedNotAnRPCError(t *testing.T) {
	deep := func(user string) []byte {
		inner := &structpb.Struct{}
		for range 6000 {
			inner = &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStructValue(inner)}}
		}
		req := extauthztest.CheckRequest("198.51.100.1", nil)
		req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": {
			Fields: map[string]*structpb.Value{"sub": structpb.NewStringValue(user), "claims": structpb.NewStructValue(inner)}}}}
		return mustMarshal(t, req)
	}
	if err := proto.Unmarshal(deep("alice"), &authv3.CheckRequest{}); err == nil {
		t.Fatal("protobuf-go reads the nested request: the test tests nothing")
	}
	p := extauthz.PolicySpec{Name: "per-user", Key: []string{"metadata:envoy.filters.http.jwt_authn:sub"}, OnMissingKey: "skip", Capacity: 1, RefillPerSecond: "1/60"}
	for name, c := range codecs() {
		t.Run(name, func(t *testing.T) {
			check := checkOver(t, memoryServer(t, p), c)
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
func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Values that differ only in bytes that are not UTF-8 name different
// buckets, and none of them shares a bucket with a valid value: k-\xff,
// k-\xfe and k-? are three callers (under either decoder): on a limit of
// one each is allowed once, and denied the second time. Envoy itself keeps
// such bytes only with encode_raw_headers (raw_value is bytes); in `headers`
// it rewrites each as '!' (MessageUtil::sanitizeUtf8String,
// source/common/protobuf/utility.cc), which no server can undo.
func TestInvalidUTF8BytesStayDistinct(t *testing.T) {
	p := extauthz.PolicySpec{Name: "keys", Key: []string{"header:x-api-key"}, Capacity: 1, RefillPerSecond: "1/60"}
	keys := []string{"k-\xff", "k-\xfe", "k-?", "k-!", "k-\xff\xfe", "k-\xc3"}
	for name, c := range codecs() {
		t.Run(name, func(t *testing.T) {
			check := checkOver(t, memoryServer(t, p), c)
			for _, key := range keys {
				if !allowed(check(marshalLoose(t, key))) {
					t.Errorf("%q: its first request denied: it shares a bucket with a key before it", key)
				}
			}
			for _, key := range keys {
				if allowed(check(marshalLoose(t, key))) {
					t.Errorf("%q: its second request allowed: it named no bucket", key)
				}
			}
		})
	}
}

// marshalLoose is a CheckRequest with x-api-key key, in wire form even when
// key is not valid UTF-8 (protobuf-go refuses to marshal that): the key is
// written as a placeholder of its length and patched.
func marshalLoose(t testing.TB, key string) []byte {
	t.Helper()
	placeholder := strings.Repeat("Z", len(key))
	b := mustMarshal(t, extauthztest.CheckRequest("198.51.100.1", map[string]string{"x-api-key": placeholder}))
	if bytes.Count(b, []byte(placeholder)) != 1 {
		t.Fatalf("placeholder %q not found once", placeholder)
	}
	return bytes.Replace(b, []byte(placeholder), []byte(key), 1)
}

// failingStore cannot decide: the handler answers by its failure mode.
type failingStore struct{}

func (failingStore) Take(context.Context, []limiter.Request, []limiter.Result) (bool, error) {
	return false, errors.New("store down")
}

// TestEveryResponseKindEncodesAsProto: each kind of response the handler
// builds (an allow with both header families, an allow marked degraded,
// denials for an HTTP and a gRPC caller, for a cost that can never fit, by
// the failure mode and for TCP, and the plain allow of a request no policy
// matches) is covered by the encoder and comes out as proto.Marshal writes
// it (the encoder's own tests cover the encoding's edges).
func TestEveryResponseKindEncodesAsProto(t *testing.T) {
	api := extauthz.PolicySpec{Name: "api", Match: extauthz.MatchSpec{PathPrefix: "/v1/"}, Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1/60", CostHeader: "x-cost", MaxCost: 10}
	tcp := extauthz.PolicySpec{Name: "tcp", Match: extauthz.MatchSpec{Protocol: "tcp"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1"}
	eng, err := extauthz.Compile([]extauthz.PolicySpec{api, tcp}, extauthz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	srv := extauthz.NewServer(eng, storetest.Memory(clock), extauthz.ServerOptions{Registerer: prometheus.NewRegistry()})
	down := extauthz.NewServer(eng, failingStore{}, extauthz.ServerOptions{Registerer: prometheus.NewRegistry()})
	downClosed := extauthz.NewServer(eng, failingStore{}, extauthz.ServerOptions{Registerer: prometheus.NewRegistry(), OnFailure: decide.Deny, FailureRetryAfter: time.Second})

	http := func(ip string, h map[string]string) *authv3.CheckRequest {
		hs := map[string]string{":path": "/v1/items"}
		for k, v := range h {
			hs[k] = v
		}
		return extauthztest.CheckRequest(ip, hs)
	}
	// A request without HTTP attributes is a TCP connection's.
	tcpReq := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: extauthztest.CheckRequest("198.51.100.9", nil).Attributes.Source}}
	unmatched := http("198.51.100.10", map[string]string{":path": "/health"})

	type kind struct {
		srv   *extauthz.Server
		req   *authv3.CheckRequest
		allow bool
	}
	kinds := []struct {
		name  string
		steps []kind // the last step's response is the kind's
	}{
		{"allow", []kind{{srv, http("198.51.100.1", nil), true}}},
		{"allow degraded", []kind{{down, http("198.51.100.2", nil), true}}},
		{"deny", []kind{{srv, http("198.51.100.3", nil), true}, {srv, http("198.51.100.3", nil), true}, {srv, http("198.51.100.3", nil), false}}},
		{"deny grpc", []kind{{srv, http("198.51.100.4", map[string]string{"x-cost": "2", "content-type": "application/grpc"}), true}, {srv, http("198.51.100.4", map[string]string{"content-type": "application/grpc"}), false}}},
		{"deny exceeding", []kind{{srv, http("198.51.100.5", map[string]string{"x-cost": "3"}), false}}},
		{"deny by the failure mode", []kind{{downClosed, http("198.51.100.6", nil), false}}},
		{"tcp deny", []kind{{srv, tcpReq, true}, {srv, tcpReq, false}}},
		{"plain ok", []kind{{srv, unmatched, true}}},
	}
	for _, k := range kinds {
		var resp *authv3.CheckResponse
		for i, s := range k.steps {
			var err error
			if resp, err = s.srv.Check(context.Background(), s.req); err != nil {
				t.Fatalf("%s, step %d: %v", k.name, i, err)
			}
			if allowed(resp) != s.allow {
				t.Fatalf("%s, step %d: allowed %v, want %v: the test does not build the kind it names (%v)", k.name, i, allowed(resp), s.allow, resp)
			}
		}
		if _, ok := check.EncodeCheckResponse(resp); !ok {
			t.Errorf("%s: the encoder declined it", k.name)
		}
		if err := check.SameAsProto(resp); err != nil {
			t.Errorf("%s: %v", k.name, err)
		}
	}
}

// FuzzCheck: any CheckRequest the wire can carry, read as the fast codec
// reads it, gets a normal, valid response from the whole handler, never an
// error or a panic, and the encoder writes that response as proto.Marshal
// does.
func FuzzCheck(f *testing.F) {
	for _, name := range []string{"checkrequest-get-apikey.json", "checkrequest-xff-two-proxies.json", "checkrequest-raw-header-map-h2-tls.json"} {
		f.Add(mustMarshal(f, extauthztest.Fixture(f, "../../../extauthz/testdata/envoy/"+name)))
	}
	f.Add([]byte{})
	eng, err := extauthz.Compile([]extauthz.PolicySpec{
		{Name: "keys", Match: extauthz.MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"}, Capacity: 5, RefillPerSecond: "1", CostHeader: "x-cost"},
		{Name: "ctx", Match: extauthz.MatchSpec{Context: map[string]string{"route": "items"}}, Key: []string{"context:virtual_host", "metadata:ns:a.b", "fingerprint"}, FingerprintHeaders: []string{"user-agent"}, Capacity: 3, RefillPerSecond: "1/60"},
		{Name: "tcp", Match: extauthz.MatchSpec{Protocol: "tcp"}, Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1"},
		{Name: "shadow", Mode: "shadow", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1"},
	}, extauthz.Options{ClientIP: extauthz.ClientIPSpec{TrustedHops: 1}})
	if err != nil {
		f.Fatal(err)
	}
	s := extauthz.NewServer(eng, memory.New(memory.Options{Clock: limiter.NewManualClock(time.Unix(0, 0)), MaxBuckets: 10000, Shards: 256}), extauthz.ServerOptions{})
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &authv3.CheckRequest{}
		if check.DecodeCheckRequest(data, req) != nil {
			return // malformed: gRPC's error, as protobuf-go's (FuzzDecoder)
		}
		resp, err := s.Check(context.Background(), req)
		if err != nil || resp == nil || resp.GetStatus() == nil {
			t.Fatalf("Check = %v, %v", resp, err)
		}
		if err := resp.ValidateAll(); err != nil {
			t.Fatalf("invalid response: %v", err)
		}
		if err := check.SameAsProto(resp); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkCheckGRPC calls Check through a real gRPC connection on loopback
// (client and server in this process), 64 calls in flight, deciding in the
// in-memory store: with gRPC's own protobuf codec, and with Fast as
// floodgate serve runs it.
func BenchmarkCheckGRPC(b *testing.B) {
	b.Run("proto-codec", func(b *testing.B) { benchGRPC(b) })
	b.Run("server-codec", func(b *testing.B) { benchGRPC(b, grpc.ForceServerCodecV2(grpccodec.Fast(check.Codec()))) })
}

func benchGRPC(b *testing.B, opts ...grpc.ServerOption) {
	perKey := extauthz.PolicySpec{Name: "per-key", Match: extauthz.MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"},
		Capacity: 1_000_000_000, RefillPerSecond: "1000000"}
	eng, err := extauthz.Compile([]extauthz.PolicySpec{perKey}, extauthz.Options{HashSecret: []byte("benchmark-secret-0123456789")})
	if err != nil {
		b.Fatal(err)
	}
	srv := extauthz.NewServer(eng, storetest.Memory(nil), extauthz.ServerOptions{Registerer: prometheus.NewRegistry()})
	client := authv3.NewAuthorizationClient(extauthztest.Serve(b, srv, opts...))
	reqs := extauthztest.EnvoyRequests(1024)
	extauthztest.BenchmarkChecks(b, client, reqs)
}
