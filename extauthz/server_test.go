package extauthz

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

type rig struct {
	client authv3.AuthorizationClient
	server *Server
	clock  *limiter.ManualClock
	reg    *prometheus.Registry
}

// newRig serves policies over a real gRPC connection on loopback, deciding
// in an in-memory store on a manual clock (or in store, when given).
func newRig(t *testing.T, policies []PolicySpec, opts Options, store limiter.Store, so ServerOptions) *rig {
	t.Helper()
	eng, err := Compile(policies, opts)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	r := &rig{clock: limiter.NewManualClock(time.Unix(1_800_000_000, 0)), reg: prometheus.NewRegistry()}
	if store == nil {
		store = storetest.Memory(r.clock)
	}
	so.Registerer = r.reg
	r.server = NewServer(eng, store, so)
	// gRPC's own codec: floodgate serve's (internal/grpccodec, with internal/door/check's messages) is tested
	// with this handler there, on every kind of response it builds.
	r.client = authv3.NewAuthorizationClient(extauthztest.Serve(t, r.server))
	return r
}

// check sends req and checks the response against Envoy's contract: the RPC
// succeeds, the response validates, every header overwrites, and nothing is
// sent upstream.
func (r *rig) check(t *testing.T, req *authv3.CheckRequest) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := r.client.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check returned an RPC error (Envoy would treat it as an outage): %v", err)
	}
	if err := resp.ValidateAll(); err != nil {
		t.Fatalf("response fails go-control-plane validation: %v", err)
	}
	var hs []*corev3.HeaderValueOption
	if ok := resp.GetOkResponse(); ok != nil {
		if len(ok.GetHeaders()) > 0 {
			t.Errorf("allow sent headers upstream (ok_response.headers): %v", ok.GetHeaders())
		}
		hs = ok.GetResponseHeadersToAdd()
	}
	hs = append(hs, resp.GetDeniedResponse().GetHeaders()...)
	for _, h := range hs {
		//lint:ignore SA1019 the test checks that the deprecated append is never set
		appendSet := h.GetAppend() != nil
		if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD || appendSet {
			t.Errorf("header %s: append_action %v, append set %v; want OVERWRITE_IF_EXISTS_OR_ADD and no append", h.GetHeader().GetKey(), h.GetAppendAction(), appendSet)
		}
	}
	return resp
}

func headerOf(resp *authv3.CheckResponse, name string) string {
	hs := append(resp.GetOkResponse().GetResponseHeadersToAdd(), resp.GetDeniedResponse().GetHeaders()...)
	for _, h := range hs {
		if h.GetHeader().GetKey() == name {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

func allowed(resp *authv3.CheckResponse) bool { return resp.GetStatus().GetCode() == 0 }

var apiPolicy = PolicySpec{Name: "api", Match: MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"}, Capacity: 3, RefillPerSecond: "1"}

func TestABurstPassesWithHeadersForTheClientThenA429(t *testing.T) {
	r := newRig(t, []PolicySpec{apiPolicy}, Options{}, nil, ServerOptions{})
	req := fixture(t, "checkrequest-get-apikey.json")
	for n := 1; n <= 3; n++ {
		resp := r.check(t, req)
		if !allowed(resp) {
			t.Fatalf("request %d of the burst denied", n)
		}
		left, reset := strconv.Itoa(3-n), strconv.Itoa(n) // 1 token/s: n seconds to refill n tokens
		want := map[string]string{
			HeaderLimit: "3", HeaderRemaining: left, HeaderReset: reset,
			HeaderPolicy: `"api";q=3;w=3`, HeaderRateLimit: `"api";r=` + left + ";t=" + reset,
		}
		for k, v := range want {
			if got := headerOf(resp, k); got != v {
				t.Errorf("request %d: %s = %q, want %q", n, k, got, v)
			}
		}
	}
	resp := r.check(t, req)
	if allowed(resp) || resp.GetStatus().GetCode() != 8 {
		t.Fatalf("4th request: status %v, want RESOURCE_EXHAUSTED", resp.GetStatus())
	}
	d := resp.GetDeniedResponse()
	if d.GetStatus().GetCode() != 429 {
		t.Errorf("denied HTTP status %v, want 429", d.GetStatus().GetCode())
	}
	if got := headerOf(resp, HeaderRetryAfter); got != "1" {
		t.Errorf("retry-after = %q, want 1", got)
	}
	if got := headerOf(resp, "content-type"); got != "application/json" {
		t.Errorf("content-type = %q", got)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(d.GetBody()), &body); err != nil {
		t.Fatalf("body %q is not JSON: %v", d.GetBody(), err)
	}
	if body["error"] != "rate_limited" || body["policy"] != "api" || body["retry_after"] != 1.0 {
		t.Errorf("body = %v", body)
	}
	// Retry-After is honest: after it, one request passes.
	r.clock.Advance(time.Second)
	if !allowed(r.check(t, req)) {
		t.Error("denied again after waiting Retry-After")
	}
}

func TestRetryAfterRoundsUpAndResetCountsToFull(t *testing.T) {
	p := PolicySpec{Name: "slow", Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1/30"}
	r := newRig(t, []PolicySpec{p}, Options{}, nil, ServerOptions{})
	req := checkRequest("198.51.100.1", nil)
	r.check(t, req)
	r.check(t, req)
	r.clock.Advance(10500 * time.Millisecond)
	resp := r.check(t, req)
	if got := headerOf(resp, HeaderRetryAfter); got != "20" { // 19.5 s to the next token
		t.Errorf("retry-after = %s, want 20", got)
	}
	if got := headerOf(resp, HeaderReset); got != "50" { // 49.5 s to full
		t.Errorf("reset = %s, want 50", got)
	}
	if got := headerOf(resp, HeaderPolicy); got != `"slow";q=2;w=60` {
		t.Errorf("policy = %s", got)
	}
}

func TestUnmatchedRequestsPassUntouched(t *testing.T) {
	r := newRig(t, []PolicySpec{apiPolicy}, Options{}, nil, ServerOptions{})
	for i := 0; i < 10; i++ {
		resp := r.check(t, checkRequest("198.51.100.1", map[string]string{":path": "/healthz"}))
		if !allowed(resp) || len(resp.GetOkResponse().GetResponseHeadersToAdd()) != 0 {
			t.Fatalf("unmatched request: %v", resp)
		}
	}
	if n := testutil.ToFloat64(r.server.Metrics().Checks.WithLabelValues("unmatched")); n != 10 {
		t.Errorf("unmatched checks counted %v, want 10", n)
	}
}

func TestHeaderFamiliesFollowTheConfiguration(t *testing.T) {
	for _, tc := range []struct {
		families []string
		want     []string
		not      []string
	}{
		{[]string{"legacy"}, []string{HeaderLimit, HeaderRemaining, HeaderReset}, []string{HeaderPolicy, HeaderRateLimit}},
		{[]string{"structured"}, []string{HeaderPolicy, HeaderRateLimit}, []string{HeaderLimit, HeaderRemaining, HeaderReset}},
	} {
		r := newRig(t, []PolicySpec{apiPolicy}, Options{Headers: tc.families}, nil, ServerOptions{})
		resp := r.check(t, fixture(t, "checkrequest-get-apikey.json"))
		for _, h := range tc.want {
			if headerOf(resp, h) == "" {
				t.Errorf("%v: %s missing", tc.families, h)
			}
		}
		for _, h := range tc.not {
			if headerOf(resp, h) != "" {
				t.Errorf("%v: %s sent", tc.families, h)
			}
		}
	}
}

func TestTCPChecksAreAllowedUnlessATCPPolicyLimitsThem(t *testing.T) {
	tcpReq := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: checkRequest("198.51.100.7", nil).Attributes.Source}}
	r := newRig(t, []PolicySpec{apiPolicy}, Options{}, nil, ServerOptions{})
	for i := 0; i < 5; i++ {
		if !allowed(r.check(t, tcpReq)) {
			t.Fatal("a TCP check was denied with no tcp policy")
		}
	}
	tcp := PolicySpec{Name: "conns", Match: MatchSpec{Protocol: "tcp"}, Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1"}
	r = newRig(t, []PolicySpec{apiPolicy, tcp}, Options{}, nil, ServerOptions{})
	r.check(t, tcpReq)
	r.check(t, tcpReq)
	resp := r.check(t, tcpReq)
	if allowed(resp) || resp.GetHttpResponse() != nil {
		t.Fatalf("3rd connection: %v, want a non-OK status and no HTTP response", resp)
	}
	// HTTP requests do not touch the tcp policy's bucket, and vice versa.
	if !allowed(r.check(t, checkRequest("198.51.100.7", map[string]string{":path": "/v1/x"}))) {
		t.Error("an HTTP request was limited by a tcp policy")
	}
}

func TestCostFromAHeaderIsBounded(t *testing.T) {
	p := PolicySpec{Name: "cost", Key: []string{"client_ip"}, Capacity: 10, RefillPerSecond: "1/60", CostHeader: "x-cost", MaxCost: 4}
	r := newRig(t, []PolicySpec{p}, Options{}, nil, ServerOptions{})
	for _, tc := range []struct {
		cost      string
		remaining string
	}{{"3", "7"}, {"1000", "3"}, {"-5", "2"}, {"abc", "1"}, {"", "0"}} {
		h := map[string]string{}
		if tc.cost != "" {
			h["x-cost"] = tc.cost
		}
		resp := r.check(t, checkRequest("198.51.100.1", h))
		if got := headerOf(resp, HeaderRemaining); got != tc.remaining {
			t.Errorf("x-cost %q: remaining %s, want %s", tc.cost, got, tc.remaining)
		}
	}
}

func TestACostAboveTheCapacityIsDeniedWithoutARetryAfter(t *testing.T) {
	p := PolicySpec{Name: "big", Key: []string{"client_ip"}, Capacity: 5, RefillPerSecond: "1", CostHeader: "x-cost", MaxCost: 100}
	r := newRig(t, []PolicySpec{p}, Options{}, nil, ServerOptions{})
	resp := r.check(t, checkRequest("198.51.100.1", map[string]string{"x-cost": "6"}))
	if allowed(resp) || resp.GetDeniedResponse().GetStatus().GetCode() != 429 {
		t.Fatalf("cost 6 of 5: %v", resp)
	}
	if headerOf(resp, HeaderRetryAfter) != "" || !strings.Contains(resp.GetDeniedResponse().GetBody(), "never pass") {
		t.Errorf("an impossible request got retry-after %q, body %s", headerOf(resp, HeaderRetryAfter), resp.GetDeniedResponse().GetBody())
	}
	if got := headerOf(r.check(t, checkRequest("198.51.100.1", map[string]string{"x-cost": "5"})), HeaderRemaining); got != "0" {
		t.Errorf("the impossible request took tokens: remaining after cost 5 = %s, want 0", got)
	}
}

func TestShadowPoliciesCountButNeverDeny(t *testing.T) {
	p := PolicySpec{Name: "trial", Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1/60", Mode: "shadow"}
	r := newRig(t, []PolicySpec{p}, Options{}, nil, ServerOptions{})
	for i := 0; i < 5; i++ {
		resp := r.check(t, checkRequest("198.51.100.1", nil))
		if !allowed(resp) || len(resp.GetOkResponse().GetResponseHeadersToAdd()) != 0 {
			t.Fatalf("shadow request %d: %v", i, resp)
		}
	}
	if n := testutil.ToFloat64(r.server.Metrics().Decisions.WithLabelValues("trial", "shadow_denied")); n != 3 {
		t.Errorf("shadow_denied = %v, want 3", n)
	}
	if n := testutil.ToFloat64(r.server.Metrics().Decisions.WithLabelValues("trial", "shadow_allowed")); n != 2 {
		t.Errorf("shadow_allowed = %v, want 2", n)
	}
}

func TestAnUnreachableStoreAnswersByTheFailureMode(t *testing.T) {
	c := unreachableRedis(t)
	store := redisstore.New(c, "")

	open := newRig(t, []PolicySpec{apiPolicy}, Options{}, store, ServerOptions{OnFailure: decide.Allow})
	resp := open.check(t, fixture(t, "checkrequest-get-apikey.json"))
	if !allowed(resp) || headerOf(resp, HeaderDegraded) != "true" {
		t.Errorf("fail open: %v", resp)
	}
	closed := newRig(t, []PolicySpec{apiPolicy}, Options{}, store, ServerOptions{OnFailure: decide.Deny, FailureRetryAfter: 2 * time.Second})
	resp = closed.check(t, fixture(t, "checkrequest-get-apikey.json"))
	if allowed(resp) || resp.GetDeniedResponse().GetStatus().GetCode() != 429 || headerOf(resp, HeaderRetryAfter) != "2" || headerOf(resp, HeaderDegraded) != "true" {
		t.Errorf("fail closed: %v", resp)
	}
	if n := testutil.ToFloat64(closed.server.Metrics().StoreErrors); n != 1 {
		t.Errorf("store errors = %v, want 1", n)
	}
}

func TestSwappingTheEngineChangesPoliciesAtOnce(t *testing.T) {
	r := newRig(t, []PolicySpec{apiPolicy}, Options{}, nil, ServerOptions{})
	req := fixture(t, "checkrequest-get-apikey.json")
	if got := headerOf(r.check(t, req), HeaderLimit); got != "3" {
		t.Fatalf("limit %s", got)
	}
	bigger := apiPolicy
	bigger.Capacity = 50
	eng, err := Compile([]PolicySpec{bigger}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.server.SetEngine(eng)
	if got := headerOf(r.check(t, req), HeaderLimit); got != "50" {
		t.Errorf("after the swap the limit is %s, want 50", got)
	}
}

// TestAFailClosedServerNeedsItsRetryAfter: the Retry-After of a FailClosed
// denial is taken as given (serve passes store.failure_retry_after); none
// is the caller's mistake, not a default. Failing open needs none.
func TestAFailClosedServerNeedsItsRetryAfter(t *testing.T) {
	eng := mustCompile(t, apiPolicy)
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "positive FailureRetryAfter") {
				t.Errorf("recovered %v, want a panic naming FailureRetryAfter", r)
			}
		}()
		NewServer(eng, storetest.Memory(nil), ServerOptions{OnFailure: decide.Deny})
	}()
	NewServer(eng, storetest.Memory(nil), ServerOptions{}) // fail open: no Retry-After to give
}

// TestAShadowStoreThatCannotDecideNeverDenies: a Check whose shadow store
// is a dead Redis answers by its enforced policies, counts a store error,
// and counts no shadow decision.
func TestAShadowStoreThatCannotDecideNeverDenies(t *testing.T) {
	c := unreachableRedis(t)
	eng := mustCompile(t,
		PolicySpec{Name: "shadow-ip", Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60", Mode: "shadow"},
		PolicySpec{Name: "per-key", Key: []string{"header:x-api-key"}, Capacity: 2, RefillPerSecond: "1/60"},
		PolicySpec{Name: "per-ip", Key: []string{"client_ip"}, Capacity: 5, RefillPerSecond: "1/60"})
	s := NewServer(eng, storetest.Memory(nil), ServerOptions{ShadowStore: redisstore.New(c, "")})
	req := checkRequest("198.51.100.7", map[string]string{"x-api-key": "k1"})
	for i, want := range []bool{true, true, false} {
		resp, err := s.Check(context.Background(), req)
		if err != nil || allowed(resp) != want || headerOf(resp, HeaderDegraded) != "" {
			t.Fatalf("check %d: %v, %v; want allowed %v, not degraded", i+1, resp, err, want)
		}
	}
	m := s.Metrics()
	if n := testutil.ToFloat64(m.StoreErrors); n != 3 {
		t.Errorf("store errors = %v, want 3", n)
	}
	if n := testutil.ToFloat64(m.Decisions.WithLabelValues("shadow-ip", "shadow_allowed")) + testutil.ToFloat64(m.Decisions.WithLabelValues("shadow-ip", "shadow_denied")); n != 0 {
		t.Errorf("%v shadow decisions counted without a shadow store", n)
	}
	if n := testutil.ToFloat64(m.Decisions.WithLabelValues("per-key", "denied")); n != 1 {
		t.Errorf("per-key denied = %v, want 1", n)
	}
}

// unreachableRedis is a client of a Redis address that refuses every
// connection (redistest.RefusedAddr: no other test's server can take it),
// closed when t ends.
func unreachableRedis(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.RefusedAddr(t), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}
