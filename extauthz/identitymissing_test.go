package extauthz

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Under Istio the CUSTOM ext_authz filter runs before jwt_authn and Istio
// sets no metadata_context_namespaces (pilot/pkg/networking/core/listener_builder.go,
// pilot/pkg/security/authz/builder/extauthz.go), so a metadata key source is
// always empty there and every request falls into the shared bucket. Each
// such request is counted, and logged at most once a minute per policy.
func TestAnEmptyIdentityIsCountedAndLoggedOncePerMinutePerPolicy(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	jwt := PolicySpec{Name: "per-user", Key: []string{"metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"}, Capacity: 100, RefillPerSecond: "1"}
	other := PolicySpec{Name: "per-tenant", Key: []string{"header:x-tenant"}, Capacity: 100, RefillPerSecond: "1"}
	keyed := PolicySpec{Name: "per-ip", Key: []string{"client_ip"}, Capacity: 100, RefillPerSecond: "1"}
	r := newRig(t, []PolicySpec{jwt, other, keyed}, Options{}, nil, ServerOptions{Logger: zap.New(core)})
	r.server.missing.clock = r.clock

	for i := 0; i < 5; i++ {
		r.check(t, checkRequest("198.51.100.1", nil))
	}
	r.check(t, checkRequest("198.51.100.1", map[string]string{"x-tenant": "acme"}))
	m := r.server.Metrics().IdentityMissing
	if n := testutil.ToFloat64(m.WithLabelValues("per-user")); n != 6 {
		t.Errorf("per-user missing = %v, want 6", n)
	}
	if n := testutil.ToFloat64(m.WithLabelValues("per-tenant")); n != 5 {
		t.Errorf("per-tenant missing = %v, want 5", n)
	}
	if n := testutil.ToFloat64(m.WithLabelValues("per-ip")); n != 0 {
		t.Errorf("per-ip missing = %v, want 0 (the source address is there)", n)
	}
	lines := func(policy string) int {
		n := 0
		for _, e := range logs.All() {
			if e.ContextMap()["policy"] == policy {
				n++
			}
		}
		return n
	}
	if lines("per-user") != 1 || lines("per-tenant") != 1 || lines("per-ip") != 0 {
		t.Fatalf("log lines per-user %d, per-tenant %d, per-ip %d; want 1, 1, 0", lines("per-user"), lines("per-tenant"), lines("per-ip"))
	}
	r.clock.Advance(MissingLogInterval - time.Second)
	r.check(t, checkRequest("198.51.100.1", nil))
	if lines("per-user") != 1 {
		t.Errorf("logged again %v after the last line, within the minute", MissingLogInterval-time.Second)
	}
	r.clock.Advance(time.Second)
	r.check(t, checkRequest("198.51.100.1", nil))
	if lines("per-user") != 2 || lines("per-tenant") != 2 {
		t.Errorf("a minute on: per-user %d, per-tenant %d lines, want 2 each", lines("per-user"), lines("per-tenant"))
	}
	if e := logs.All()[0]; e.ContextMap()["key"] == nil {
		t.Errorf("the log line does not name the key sources: %v", e.ContextMap())
	}
}

// source_principal keys a policy on the caller's workload identity:
// attributes.source.principal, which Envoy fills from the peer certificate
// (URI SAN first; Istio's SPIFFE ID under mTLS), so in-mesh callers cannot
// forge it (source/extensions/filters/common/ext_authz/check_request_utils.cc,
// CheckRequestUtils::setAttrContextPeer).
func TestSourcePrincipalKeysOnTheCallersWorkloadIdentity(t *testing.T) {
	p := PolicySpec{Name: "per-workload", Key: []string{"source_principal"}, Capacity: 1, RefillPerSecond: "1/60"}
	r := newRig(t, []PolicySpec{p}, Options{}, nil, ServerOptions{})
	req := func(principal string) bool {
		q := checkRequest("10.0.0.7", map[string]string{"x-forwarded-for": "1.2.3.4"})
		q.Attributes.Source.Principal = principal
		return allowed(r.check(t, q))
	}
	a, b := "spiffe://cluster.local/ns/shop/sa/cart", "spiffe://cluster.local/ns/shop/sa/checkout"
	if !req(a) || req(a) {
		t.Fatal("workload a: want one allowed, then denied")
	}
	if !req(b) {
		t.Error("workload b shares a's bucket")
	}
	if n := testutil.ToFloat64(r.server.Metrics().IdentityMissing.WithLabelValues("per-workload")); n != 0 {
		t.Errorf("missing = %v with principals present", n)
	}
	if !req("") || req("") {
		t.Error("without a principal: want the shared bucket (one allowed, then denied)")
	}
	if n := testutil.ToFloat64(r.server.Metrics().IdentityMissing.WithLabelValues("per-workload")); n != 2 {
		t.Errorf("missing = %v, want 2", n)
	}
	if _, err := Compile([]PolicySpec{{Name: "x", Key: []string{"source_principal:foo"}, Capacity: 1, RefillPerSecond: "1"}}, Options{}); err == nil {
		t.Error("source_principal:foo compiled")
	}
}
