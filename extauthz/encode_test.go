package extauthz

import (
	"bytes"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/extauthz/codec"
	"github.com/floodgate/floodgate/limiter"
)

// assertEncodesAsProto checks that the codec writes resp as proto.Marshal
// does: byte for byte when its encoder covers it, through proto.Marshal
// itself when it does not.
func assertEncodesAsProto(t testing.TB, resp *authv3.CheckResponse) {
	t.Helper()
	want, wantErr := proto.Marshal(resp)
	got, ok := codec.EncodeCheckResponse(resp)
	if !ok {
		if wantErr == nil && coveredByEncoder(resp) {
			t.Errorf("the encoder declined a response it covers: %v", resp)
		}
		return
	}
	if wantErr != nil {
		t.Fatalf("the encoder wrote a response proto.Marshal refuses (%v): %v", wantErr, resp)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Errorf("encoder and proto.Marshal differ from byte %d (%d and %d bytes) for a response with status %v and %d headers",
			i, len(got), len(want), resp.GetStatus(), len(resp.GetOkResponse().GetResponseHeadersToAdd())+len(resp.GetDeniedResponse().GetHeaders()))
	}
}

// coveredByEncoder is what every response Floodgate builds is: a status,
// and an allow with client headers or a deny.
func coveredByEncoder(r *authv3.CheckResponse) bool {
	return r.DynamicMetadata == nil && len(r.GetStatus().GetDetails()) == 0 && len(r.GetOkResponse().GetHeaders()) == 0
}

// TestEveryResponseKindEncodesAsProto: each kind of response the handler
// builds is covered by the codec's encoder and comes out as proto.Marshal
// writes it (the codec's own tests cover the encoding's edges).
func TestEveryResponseKindEncodesAsProto(t *testing.T) {
	eng := mustCompile(t,
		PolicySpec{Name: "api", Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1/60"},
		PolicySpec{Name: "tcp", Match: MatchSpec{Protocol: "tcp"}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1"})
	p := eng.Policies[0]
	cases := map[string]*authv3.CheckResponse{
		"allow":          eng.okResponse(&outcome{policies: []*Policy{p}, results: []limiter.Result{{Allowed: true, Limit: 2, Remaining: 1}}, allowed: true}),
		"allow degraded": eng.okResponse(&outcome{policies: []*Policy{p}, results: []limiter.Result{{Allowed: true, Limit: 2}}, allowed: true, degraded: true}),
		"deny":           eng.denyResponse(&outcome{policies: []*Policy{p}, results: []limiter.Result{{Limit: 2, RetryAfter: 90e9, ResetAfter: 120e9}}}, 90e9),
		"deny grpc":      eng.denyResponse(&outcome{policies: []*Policy{p}, results: []limiter.Result{{Limit: 2, RetryAfter: 90e9, ResetAfter: 120e9}}, grpc: true}, 90e9),
		"deny exceeding": eng.denyResponse(&outcome{policies: []*Policy{p}, results: []limiter.Result{{Limit: 2, ExceedsCapacity: true}}}, 0),
		"tcp deny":       tcpDeny(),
		"plain ok":       plainOK(),
	}
	for name, r := range cases {
		if _, ok := codec.EncodeCheckResponse(r); !ok {
			t.Errorf("%s: the encoder declined it", name)
		}
		assertEncodesAsProto(t, r)
	}
}
