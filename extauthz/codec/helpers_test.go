package codec

import (
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"os"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// checkRequest builds an Envoy-shaped CheckRequest (extauthztest.CheckRequest).
var checkRequest = extauthztest.CheckRequest

// envoyRequests are Envoy-shaped CheckRequests, one per caller (extauthztest.EnvoyRequests).
var envoyRequests = extauthztest.EnvoyRequests

// fixture loads an Envoy-shaped CheckRequest from extauthz's Envoy
// fixtures (extauthz/testdata/envoy, where its README says what each is).
func fixture(t testing.TB, name string) *authv3.CheckRequest {
	t.Helper()
	b, err := os.ReadFile("../testdata/envoy/" + name)
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{}
	if err := protojson.Unmarshal(b, req); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return req
}
