package extauthz

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRequestsWithoutAKeyAreCounted: a request whose key sources are all
// empty uses the policy's shared bucket and counts in
// floodgate_identity_missing_total{policy}; one with a key does not.
func TestRequestsWithoutAKeyAreCounted(t *testing.T) {
	p := PolicySpec{Name: "per-tenant", Key: []string{"header:x-tenant"}, Capacity: 100, RefillPerSecond: "1"}
	r := newRig(t, []PolicySpec{p}, Options{}, nil, ServerOptions{})
	missing := r.server.Metrics().IdentityMissing.WithLabelValues("per-tenant")
	r.check(t, checkRequest("198.51.100.1", map[string]string{"x-tenant": "acme"}))
	if n := testutil.ToFloat64(missing); n != 0 {
		t.Fatalf("a request with x-tenant counted as missing its key (%v)", n)
	}
	r.check(t, checkRequest("198.51.100.1", nil))
	r.check(t, checkRequest("198.51.100.2", map[string]string{"x-tenant": "  "}))
	if n := testutil.ToFloat64(missing); n != 2 {
		t.Fatalf("floodgate_identity_missing_total{policy=per-tenant} = %v, want 2", n)
	}
}
