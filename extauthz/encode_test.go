package extauthz

import (
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/floodgate/floodgate/internal/grpccodec"
	"github.com/floodgate/floodgate/limiter"
)

// assertEncodesAsProto checks that the codec writes resp as proto.Marshal
// does (grpccodec.SameAsProto).
func assertEncodesAsProto(t testing.TB, resp *authv3.CheckResponse) {
	t.Helper()
	if err := grpccodec.SameAsProto(resp); err != nil {
		t.Error(err)
	}
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
		if _, ok := grpccodec.EncodeCheckResponse(r); !ok {
			t.Errorf("%s: the encoder declined it", name)
		}
		assertEncodesAsProto(t, r)
	}
}
