package extauthz

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/storetest"
)

var offlineSpecs = []PolicySpec{
	{Name: "per-key", Match: MatchSpec{PathPrefix: "/api/"}, Key: []string{"header:x-api-key", "client_ip"},
		Capacity: 3, RefillPerSecond: "1/2", CostHeader: "x-cost"},
	{Name: "per-ip", Key: []string{"client_ip"}, Capacity: 5, RefillPerSecond: "1"},
	{Name: "shadow", Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1/4", Mode: "shadow"},
}

// TestPlanAndDecideAreWhatCheckDecides runs random requests through Check
// and through the decide path (View, Plan, Decider) on two in-memory
// stores sharing one injected clock: every decision must be the same.
func TestPlanAndDecideAreWhatCheckDecides(t *testing.T) {
	eng, err := Compile(offlineSpecs, Options{ClientIP: ClientIPSpec{TrustedHops: 1}})
	if err != nil {
		t.Fatal(err)
	}
	clock := limiter.NewManualClock(time.Unix(1_796_040_000, 0))
	srv := NewServer(eng, storetest.Memory(clock), ServerOptions{})
	dec := decide.Decider{Store: storetest.Memory(clock)}
	rng := rand.New(rand.NewPCG(16, 16))
	denied := 0
	for i := range 3000 {
		clock.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
		h := map[string]string{"x-forwarded-for": fmt.Sprintf("203.0.113.%d, 10.0.0.1", rng.IntN(4))}
		if k := rng.IntN(4); k > 0 {
			h["x-api-key"] = fmt.Sprintf("k%d", k)
		}
		if rng.IntN(4) == 0 {
			h["x-cost"] = "2"
		}
		h[":path"] = []string{"/api/x", "/other"}[rng.IntN(2)]
		req := checkRequest("10.0.0.1", h)
		resp, err := srv.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var plan Plan
		eng.Plan(NewView(req), &plan)
		res := make([]limiter.Result, len(plan.Buckets))
		d := dec.Decide(context.Background(), plan.Buckets, res)
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		ok := d.Allowed
		if served := resp.GetStatus().GetCode() == 0; ok != served {
			t.Fatalf("request %d: Check allowed = %v, Plan and Decide %v", i, served, ok)
		}
		if !ok {
			denied++
		}
	}
	if denied == 0 {
		t.Fatal("nothing was denied: the comparison needs both outcomes")
	}
}

// TestCallerNamesTheKeyIdentityChose checks the clear names of callers.
func TestCallerNamesTheKeyIdentityChose(t *testing.T) {
	eng, err := Compile(offlineSpecs, Options{ClientIP: ClientIPSpec{TrustedHops: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		headers     map[string]string
		source, val string
	}{
		{map[string]string{"x-api-key": " k1 ", "x-forwarded-for": "203.0.113.5, 10.0.0.1"}, "header:x-api-key", "k1"},
		{map[string]string{"x-api-key": "  ", "x-forwarded-for": "203.0.113.5, 10.0.0.1"}, "client_ip", "203.0.113.5"},
		{map[string]string{"x-forwarded-for": "6.6.6.6"}, "client_ip", "10.0.0.1"}, // too short: the peer
	} {
		v := NewView(checkRequest("10.0.0.1", tc.headers))
		if src, val := eng.Caller(eng.Policies[0], v); src != tc.source || val != tc.val {
			t.Errorf("%v: Caller = %q %q, want %q %q", tc.headers, src, val, tc.source, tc.val)
		}
	}
	if in := eng.Inputs(); !slices.Equal(in.Headers, []string{"x-api-key", "x-cost", "x-forwarded-for"}) ||
		!slices.Equal(in.Sources, []string{"client_ip", "header:x-api-key"}) {
		t.Errorf("Inputs = %+v", in)
	}
}
