package extauthz

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

var explainSpecs = []PolicySpec{
	{Name: "per-key", Match: MatchSpec{PathPrefix: "/api/", Methods: []string{"GET", "POST"}}, Key: []string{"header:x-api-key", "client_ip"},
		Capacity: 3, RefillPerSecond: "1/2", CostHeader: "x-cost"},
	{Name: "tenant", Match: MatchSpec{Headers: []HeaderMatchSpec{{Name: "x-tenant", Prefix: "t-"}}}, Key: []string{"header:x-tenant"}, Capacity: 4, RefillPerSecond: "1"},
	{Name: "admin-host", Match: MatchSpec{Hosts: []string{"admin.example.com"}, Path: "/login"}, Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1/60"},
	{Name: "skip-anon", Key: []string{"header:authorization"}, OnMissingKey: "skip", Capacity: 5, RefillPerSecond: "1"},
	{Name: "per-ip", Key: []string{"client_ip"}, Capacity: 5, RefillPerSecond: "1"},
	{Name: "shadow", Key: []string{"client_ip"}, Capacity: 2, RefillPerSecond: "1/4", Mode: "shadow"},
}

// recording is a store that remembers every request a decision asked of it.
type recording struct {
	limiter.Store
	mu   sync.Mutex
	reqs []limiter.Request
}

func (r *recording) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, reqs...)
	r.mu.Unlock()
	return r.Store.Take(ctx, reqs, res)
}

func (r *recording) drain() []limiter.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// TestExplainPlansWhatCheckDecides runs random requests through Check and
// through Explain: the buckets Explain says a request draws from are, in
// order and request for request (name, identity, limit, cost), those
// Check asks the store for, and every other policy says why not.
func TestExplainPlansWhatCheckDecides(t *testing.T) {
	eng, err := Compile(explainSpecs, Options{ClientIP: ClientIPSpec{TrustedHops: 1}, HashSecret: []byte("0123456789abcdef-explain")})
	if err != nil {
		t.Fatal(err)
	}
	clock := limiter.NewManualClock(time.Unix(1_796_040_000, 0))
	store := &recording{Store: storetest.Memory(clock)}
	shadow := &recording{Store: storetest.Memory(clock)}
	srv := NewServer(eng, store, ServerOptions{ShadowStore: shadow})
	rng := rand.New(rand.NewPCG(47, 2))
	for i := range 2000 {
		clock.Advance(time.Duration(rng.IntN(500)) * time.Millisecond)
		h := map[string]string{"x-forwarded-for": fmt.Sprintf("203.0.113.%d, 10.0.0.1", rng.IntN(4))}
		if k := rng.IntN(4); k > 0 {
			h["x-api-key"] = fmt.Sprintf("k%d", k)
		}
		if rng.IntN(3) == 0 {
			h["x-tenant"] = []string{"t-1", "u-2", "t-3"}[rng.IntN(3)]
		}
		if rng.IntN(3) == 0 {
			h["authorization"] = "Bearer " + fmt.Sprint(rng.IntN(3))
		}
		if rng.IntN(4) == 0 {
			h["x-cost"] = "2"
		}
		h[":path"] = []string{"/api/x", "/other", "/login"}[rng.IntN(3)]
		h[":method"] = []string{"GET", "POST", "DELETE"}[rng.IntN(3)]
		h[":authority"] = []string{"api.example.com", "admin.example.com"}[rng.IntN(2)]
		req := checkRequest("10.0.0.1", h)
		if _, err := srv.Check(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		asked := append(store.drain(), shadow.drain()...)
		var planned []limiter.Request
		for _, x := range eng.Explain(NewView(req)) {
			switch {
			case x.Planned:
				planned = append(planned, x.Request)
			case x.Failed == "":
				t.Fatalf("request %d: policy %s is not planned and says no reason", i, x.Policy.Name)
			}
		}
		if !sameRequests(asked, planned) {
			t.Fatalf("request %d (%v):\nCheck asked %v\nExplain plans %v", i, h, asked, planned)
		}
	}
}

// sameRequests compares the buckets of two decisions, in any order (the
// shadow buckets are decided beside the enforced ones).
func sameRequests(a, b []limiter.Request) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(r limiter.Request) string {
		return fmt.Sprintf("%s/%s/%v/%d/%v", r.Name, r.ID, r.Limit, r.Cost, r.Lease)
	}
	seen := map[string]int{}
	for _, r := range a {
		seen[key(r)]++
	}
	for _, r := range b {
		if seen[key(r)]--; seen[key(r)] < 0 {
			return false
		}
	}
	return true
}

func TestExplainSaysWhichConditionFailed(t *testing.T) {
	eng, err := Compile(explainSpecs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := checkRequest("10.0.0.1", map[string]string{":path": "/other", ":method": "DELETE", "x-tenant": "u-2"})
	got := map[string]string{}
	for _, x := range eng.Explain(NewView(req)) {
		got[x.Policy.Name] = x.Failed
	}
	for name, want := range map[string]string{
		"per-key":    `match.path_prefix: the request's path "/other" does not start with "/api/"`,
		"tenant":     `match.headers[0]: x-tenant "u-2" does not start with "t-"`,
		"admin-host": `match.path: the request's path "/other" is not "/login"`,
		"skip-anon":  "on_missing_key: skip, and none of its key sources (header:authorization) has a value",
		"per-ip":     "",
	} {
		if got[name] != want {
			t.Errorf("%s: got %q\nwant %q", name, got[name], want)
		}
	}
	req = checkRequest("10.0.0.1", map[string]string{":path": "/api/x", ":method": "DELETE"})
	if x := eng.Explain(NewView(req))[0]; x.Matched || x.Failed != `match.methods: "DELETE" is not one of GET, POST` {
		t.Errorf("per-key on DELETE: %+v", x)
	}
	req = checkRequest("10.0.0.1", map[string]string{":path": "/login"})
	if x := eng.Explain(NewView(req))[2]; x.Matched || x.Failed != `match.hosts: "api.example.com" is not one of the policy's hosts` {
		t.Errorf("admin-host on api.example.com: %+v", x)
	}
}

// TestBucketOfNamesTheBucketADecisionDraws: the identity an operator names
// by the value the caller sends (a header, an address grouped by its
// prefix, a repeated header, no key at all) is the one the decision drew.
func TestBucketOfNamesTheBucketADecisionDraws(t *testing.T) {
	specs := []PolicySpec{
		{Name: "per-key", Key: []string{"header:x-api-key", "client_ip"}, Capacity: 3, RefillPerSecond: "1"},
		{Name: "per-ip", Key: []string{"client_ip"}, Capacity: 3, RefillPerSecond: "1"},
		{Name: "shared", Key: []string{"header:x-user"}, Capacity: 3, RefillPerSecond: "1"},
	}
	eng, err := Compile(specs, Options{ClientIP: ClientIPSpec{TrustedHops: 1}, HashSecret: []byte("0123456789abcdef-bucketof")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		policy, source, value string
		req                   *authv3.CheckRequest
	}{
		{"per-key", "", "k_live_1", checkRequest("10.0.0.1", map[string]string{"x-api-key": "k_live_1"})},
		{"per-key", "header:x-api-key", " k_live_1 ", checkRequest("10.0.0.1", map[string]string{"x-api-key": "k_live_1"})},
		{"per-key", "client_ip", "203.0.113.9", checkRequest("10.0.0.1", map[string]string{"x-forwarded-for": "203.0.113.9, 10.0.0.1"})},
		{"per-ip", "", "2001:db8:1:2::5", checkRequest("10.0.0.1", map[string]string{"x-forwarded-for": "2001:db8:1:2:ffff::1, 10.0.0.1"})},
		{"per-key", "", "a,b", checkRequest("10.0.0.1", map[string]string{"x-api-key": "c,d"})},
		{"shared", "", "", checkRequest("10.0.0.1", nil)},
	} {
		p := eng.Policy(tc.policy)
		got, err := eng.BucketOf(p, tc.source, tc.value)
		if err != nil {
			t.Fatalf("%s %s=%q: %v", tc.policy, tc.source, tc.value, err)
		}
		var want string
		for _, x := range eng.Explain(NewView(tc.req)) {
			if x.Policy == p {
				want = x.Request.ID
			}
		}
		if got.ID != want || got.Limit != p.Limit {
			t.Errorf("%s %s=%q: identity %q, the decision drew %q", tc.policy, tc.source, tc.value, got.ID, want)
		}
	}
	if _, err := eng.BucketOf(eng.Policy("per-ip"), "header:x-api-key", "k"); err == nil || !strings.Contains(err.Error(), "its key sources: client_ip") {
		t.Errorf("a source the policy lacks: %v", err)
	}
	if _, err := eng.BucketOf(eng.Policy("per-ip"), "", "not-an-ip"); err == nil || !strings.Contains(err.Error(), "takes an IP address") {
		t.Errorf("a client_ip that is no address: %v", err)
	}
}
