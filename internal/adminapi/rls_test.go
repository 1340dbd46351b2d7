package adminapi_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/adminapi"
	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const edgeLimits = `domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestExplainSaysWhatTheRateLimitServiceThenAnswers explains random rate
// limit requests, then asks the rate limit service the same over gRPC on
// the same store and clock: explain's decision is the service's overall
// code, and the descriptors it says deny are those answered OVER_LIMIT.
func TestExplainSaysWhatTheRateLimitServiceThenAnswers(t *testing.T) {
	t.Run("token buckets", func(t *testing.T) { explainRLSDrift(t, "") })
	t.Run("rls.windows: fixed", func(t *testing.T) { explainRLSDrift(t, "fixed") })
}

// explainRLSDrift is the comparison under rls.windows (the quotas of
// fixed windows, or token buckets).
func explainRLSDrift(t *testing.T, windows string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(edgeLimits), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := limiter.NewManualClock(time.Unix(1_796_040_000, 0))
	store := storetest.Memory(clock)
	rlsYAML := "rls: {config: " + dir + "}\n"
	if windows != "" {
		rlsYAML = "rls: {config: " + dir + ", windows: " + windows + "}\n"
	}
	f := newFixture(t, store, rlsYAML, false)
	svc := rls.NewService(ratelimit.Limits(f.cfg), rls.ServiceOptions{Hash: f.cfg.Engine.HashIdentity, Store: store})
	svc.SetFixedWindows(windows == "fixed")
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, svc)
	client := rlsv3.NewRateLimitServiceClient(extauthztest.ServeGRPC(t, gs))
	rng := rand.New(rand.NewPCG(47, 4))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	overLimit := 0
	for i := 0; i < 300; i++ {
		clock.Advance(time.Duration(rng.IntN(15)) * time.Second)
		var descs []string
		for n := 1 + rng.IntN(3); n > 0; n-- {
			descs = append(descs, pick("api_key=k1", "api_key=k2", "tenant=t1", "tenant=t1,path=/x", "blocked=b", "free=f", "trial=t", "unknown=u"))
		}
		hits := uint64(pick("0", "1", "2")[0] - '0')
		e, err := f.client.Explain(context.Background(), adminapi.ExplainRequest{Domain: "edge", Descriptors: descs, Hits: hits})
		if err != nil {
			t.Fatal(err)
		}
		req, err := ratelimit.Request("edge", descs, hits)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		if over != (e.Decision == "deny") {
			t.Fatalf("request %d (%v, hits %d): explain said %s, the service answered %v\n%s", i, descs, hits, e.Decision, resp.GetOverallCode(), e.Text())
		}
		if over {
			overLimit++
		}
		for j, st := range resp.GetStatuses() {
			v := e.Descriptors[j].Verdict
			denies := v == "denies" || strings.HasPrefix(v, "over the limit") // a charge that overdraws is answered OVER_LIMIT
			if (st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT) != denies {
				t.Fatalf("request %d (%v), descriptor %d: explain said %q, the service %v\n%s", i, descs, j, e.Descriptors[j].Verdict, st.GetCode(), e.Text())
			}
		}
	}
	if overLimit < 30 {
		t.Errorf("only %d of 300 requests over the limit: the comparison says little", overLimit)
	}
}

func TestExplainNamesEachDescriptorsLimit(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(edgeLimits), 0o600)
	f := newFixture(t, storetest.Memory(nil), "rls: {config: "+dir+"}\n", false)
	e, err := f.client.Explain(context.Background(), adminapi.ExplainRequest{Domain: "edge", Descriptors: []string{"tenant=t1,path=/x", "free=f", "unknown=u", "blocked=b"}})
	if err != nil {
		t.Fatal(err)
	}
	text := e.Text()
	for _, want := range []string{
		"deny (ratelimit): denied by edge.blocked\n",
		"  tenant=t1,path=/x: limit edge.tenant.path (2 per minute), look 0, identity ",
		"  free=f: unlimited\n",
		"  unknown=u: no limit\n",
		"  blocked=b: limit edge.blocked (0 per minute), take 1: denies\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("explain lacks %q:\n%s", want, text)
		}
	}
}

// Under rls.shadow_mode the service answers OK: explain says allow, and
// what would deny.
func TestExplainUnderShadowModeSaysAllowAndWhatWouldDeny(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(edgeLimits), 0o600)
	f := newFixture(t, storetest.Memory(nil), "rls: {config: "+dir+", shadow_mode: true}\n", false)
	e, err := f.client.Explain(context.Background(), adminapi.ExplainRequest{Domain: "edge", Descriptors: []string{"blocked=b"}})
	if err != nil {
		t.Fatal(err)
	}
	if e.Decision != "allow" || strings.Join(e.DeniedBy, ",") != "edge.blocked" || !strings.Contains(e.Text(), "note: rls.shadow_mode: the service answers every request OK; denied_by is what would deny (edge.blocked)") {
		t.Errorf("%+v\n%s", e, e.Text())
	}
}
