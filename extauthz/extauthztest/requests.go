package extauthztest

import (
	"os"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// CheckRequest builds an HTTP CheckRequest as Envoy sends it in its
// default (headers map) mode, from source (port 40000); pseudo-headers
// default to GET / on api.example.com and headers may override them.
func CheckRequest(source string, headers map[string]string) *authv3.CheckRequest {
	h := map[string]string{":method": "GET", ":path": "/", ":authority": "api.example.com", ":scheme": "http"}
	for k, v := range headers {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: source, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: h[":method"], Path: h[":path"], Host: h[":authority"], Scheme: "http", Protocol: "HTTP/1.1", Headers: h,
		}},
	}}
}

// EnvoyRequests are n Envoy-shaped CheckRequests (headers map), one per
// caller (its own address, API key and path), as the benchmarks send them.
func EnvoyRequests(n int) []*authv3.CheckRequest {
	reqs := make([]*authv3.CheckRequest, n)
	for i := range reqs {
		reqs[i] = CheckRequest("10.1."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255), map[string]string{
			":path": "/v1/items/" + strconv.Itoa(i), "x-api-key": "k_live_" + strconv.Itoa(100000+i),
			"x-forwarded-for": "203.0.113." + strconv.Itoa(i&255), "user-agent": "bench/1.0", "accept": "application/json",
		})
	}
	return reqs
}

// Fixture loads an Envoy-shaped CheckRequest written as protojson at path
// (extauthz/testdata/envoy holds them, its README says what each is).
func Fixture(t testing.TB, path string) *authv3.CheckRequest {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{}
	if err := protojson.Unmarshal(b, req); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return req
}
