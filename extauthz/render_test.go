package extauthz

import (
	"context"
	"net/netip"
	"testing"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// Responses are rendered from pooled buffers into a few allocations; these
// tests pin down that the result is what the field-by-field rendering gave
// and that no two responses share memory.

func TestResponsesShareNothing(t *testing.T) {
	eng, err := Compile([]PolicySpec{{Name: "api", Key: []string{"client_ip"}, Capacity: 10, RefillPerSecond: "1/60"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(eng, storetest.Memory(nil), ServerOptions{})
	req := checkRequest("198.51.100.7", nil)
	a, _ := s.Check(context.Background(), req)
	b, _ := s.Check(context.Background(), req)
	if headerOf(a, HeaderRemaining) != "9" || headerOf(b, HeaderRemaining) != "8" {
		t.Fatalf("remaining %q then %q, want 9 then 8", headerOf(a, HeaderRemaining), headerOf(b, HeaderRemaining))
	}
	if headerOf(a, HeaderRateLimit) != `"api";r=9;t=60` || headerOf(b, HeaderRateLimit) != `"api";r=8;t=120` {
		t.Errorf("RateLimit %q then %q", headerOf(a, HeaderRateLimit), headerOf(b, HeaderRateLimit))
	}
	for _, h := range a.GetOkResponse().GetResponseHeadersToAdd() {
		h.Header.Value = "changed"
	}
	if headerOf(b, HeaderRemaining) != "8" || headerOf(b, HeaderPolicy) != `"api";q=10;w=600` {
		t.Errorf("changing one response changed another: %v", b.GetOkResponse().GetResponseHeadersToAdd())
	}
	if got := eng.Policies[0].policyMember; got != `"api";q=10;w=600` {
		t.Errorf("changing a response changed the policy's rendered member: %q", got)
	}
}

// A decision the fallback made on a scaled limit reports that limit, not
// the policy's capacity.
func TestRateLimitLimitIsTheDecidingBucketsCapacity(t *testing.T) {
	eng, err := Compile([]PolicySpec{{Name: "api", Key: []string{"client_ip"}, Capacity: 10, RefillPerSecond: "1"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := eng.Policies[0]
	for _, limit := range []int64{10, 5} {
		o := &outcome{policies: []*Policy{p}, results: []limiter.Result{{Allowed: true, Limit: limit, Remaining: 3}}, allowed: true}
		if got, want := headerOf(eng.okResponse(o), HeaderLimit), map[int64]string{10: "10", 5: "5"}[limit]; got != want {
			t.Errorf("result limit %d: RateLimit-Limit %q, want %q", limit, got, want)
		}
	}
}

func TestTheIdentityOfAnAddressIsTheIdentityOfItsText(t *testing.T) {
	h := newHasher([]byte("a secret of some length"))
	for _, s := range []string{"203.0.113.7/32", "203.0.113.0/24", "2001:db8:1:2::/64", "2001:db8::1/128", "0.0.0.0/0"} {
		p := netip.MustParsePrefix(s)
		if a, b := h.idPrefix("client_ip", p), h.id("client_ip", p.String()); a != b {
			t.Errorf("%s: %q from the prefix, %q from its text", s, a, b)
		}
	}
}

// TestAnAllowedCheckAllocatesLittle pins the allocations of the common
// path (one policy, allowed, in-memory store): the identity, the response
// block, its headers and the string of their values. A regression shows up
// here before it shows up in make bench.
func TestAnAllowedCheckAllocatesLittle(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: allocation counts mean nothing")
	}
	s := NewServer(mustCompile(t, benchPerKey), storetest.Memory(nil), ServerOptions{})
	req := benchRequests(1)[0]
	ctx := context.Background()
	s.Check(ctx, req)
	if n := testing.AllocsPerRun(200, func() { s.Check(ctx, req) }); n > 4 {
		t.Errorf("an allowed Check allocates %v times, want at most 4", n)
	}
}

func mustCompile(t testing.TB, specs ...PolicySpec) *Engine {
	t.Helper()
	e, err := Compile(specs, Options{HashSecret: []byte("benchmark-secret-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
