package check

import (
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// checkRequest builds an Envoy-shaped CheckRequest (extauthztest.CheckRequest).
var checkRequest = extauthztest.CheckRequest

// envoyRequests are Envoy-shaped CheckRequests, one per caller (extauthztest.EnvoyRequests).
var envoyRequests = extauthztest.EnvoyRequests

// fixture loads one of extauthz's Envoy-shaped CheckRequests
// (testdata/envoy).
func fixture(t testing.TB, name string) *authv3.CheckRequest {
	t.Helper()
	return extauthztest.Fixture(t, "../../../extauthz/testdata/envoy/"+name)
}
