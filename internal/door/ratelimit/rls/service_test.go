package rls

import (
	"context"
	"errors"
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"math"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const testConfig = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-key}
  - key: api_key
    value: vip
    rate_limit: {unlimited: true}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /login*
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: tier
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2, name: gold-user, replaces: [{name: per-key}]}
`

func mustConfig(t *testing.T, yaml string) *Limits {
	t.Helper()
	cfg, err := Parse([]string{"test.yaml"}, map[string][]byte{"test.yaml": []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func plainHash(tag, val string) string { return tag + "|" + val }

// serve runs the service over real gRPC on loopback and returns a client.
func serve(t *testing.T, s *Service) rlsv3.RateLimitServiceClient {
	t.Helper()
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, s)
	return rlsv3.NewRateLimitServiceClient(extauthztest.ServeGRPC(t, srv))
}

func memoryService(t *testing.T, clock *limiter.ManualClock) rlsv3.RateLimitServiceClient {
	store := storetest.Memory(clock)
	return serve(t, NewService(mustConfig(t, testConfig), ServiceOptions{Hash: plainHash, Store: store}))
}

func desc(pairs ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(pairs); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	return d
}

func ask(t *testing.T, c rlsv3.RateLimitServiceClient, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestABurstPassesUpToTheLimitThenIsOverIt: requests_per_unit pass, then
// OVER_LIMIT with duration_until_reset until a token is back, a JSON
// raw_body and its content-type. Envoy's rate limit filter sends raw_body
// as the local reply and lets the service's content-type replace the one
// sendLocalReply set (Filter::populateResponseHeaders,
// source/extensions/filters/http/ratelimit/ratelimit.cc), and builds
// X-RateLimit-Reset from duration_until_reset.
func TestABurstPassesUpToTheLimitThenIsOverIt(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_000_000, 0))
	c := memoryService(t, clock)
	for i := 2; i >= 0; i-- {
		r := ask(t, c, desc("api_key", "k1"))
		st := r.Statuses[0]
		if r.OverallCode != rlsv3.RateLimitResponse_OK || st.LimitRemaining != uint32(i) || st.CurrentLimit.GetRequestsPerUnit() != 3 ||
			st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.CurrentLimit.GetName() != "per-key" {
			t.Fatalf("request %d: %v", 3-i, r)
		}
		// Until full: each spent token takes 20 s to come back.
		if got, want := st.DurationUntilReset.AsDuration(), time.Duration(3-i)*20*time.Second; got != want {
			t.Fatalf("request %d: duration_until_reset %v, want %v", 3-i, got, want)
		}
	}
	r := ask(t, c, desc("api_key", "k1"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("fourth request: %v", r)
	}
	// Over the limit, the wait is until one token is back: 20 s.
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 20*time.Second {
		t.Fatalf("over the limit: duration_until_reset %v, want 20s", got)
	}
	if string(r.RawBody) != `{"error":"rate_limited","retry_after":20}` || len(r.ResponseHeadersToAdd) != 2 ||
		headerValue(r, "content-type") != "application/json" || headerValue(r, "retry-after") != "20" {
		t.Fatalf("denial body and headers: %q %v", r.RawBody, r.ResponseHeadersToAdd)
	}
	// Another key has its own bucket.
	if r := ask(t, c, desc("api_key", "k2")); r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("another key: %v", r)
	}
	clock.Advance(20 * time.Second)
	if r := ask(t, c, desc("api_key", "k1")); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("after 20 s: %v", r)
	}
}

func TestDescriptorsDecideTogetherAndADenialTakesNothing(t *testing.T) {
	c := memoryService(t, limiter.NewManualClock(time.Unix(1_000_000, 0)))
	ask(t, c, desc("remote_address", "10.0.0.1"))
	ask(t, c, desc("remote_address", "10.0.0.1")) // the address's 2 tokens spent
	r := ask(t, c, desc("api_key", "k1"), desc("remote_address", "10.0.0.1"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].Code != rlsv3.RateLimitResponse_OK || r.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("key + spent address: %v", r)
	}
	if r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("the key's bucket paid for a denied request: %d left, want 3", r.Statuses[0].LimitRemaining)
	}
	if r := ask(t, c, desc("api_key", "k1")); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the key alone afterwards: %d left, want 2", r.Statuses[0].LimitRemaining)
	}
}

func TestUnlimitedUnknownShadowNeverAndReplaces(t *testing.T) {
	c := memoryService(t, limiter.NewManualClock(time.Unix(1_000_000, 0)))
	r := ask(t, c, desc("api_key", "vip"), desc("nothing", "here"))
	if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil ||
		r.Statuses[1].CurrentLimit != nil || r.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unlimited and unknown: %v", r)
	}
	for i := 0; i < 3; i++ {
		r = ask(t, c, desc("path", "/login/form"))
		if r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow request %d denied: %v", i+1, r)
		}
	}
	if r.Statuses[0].LimitRemaining != 0 || r.Statuses[0].DurationUntilReset.AsDuration() != time.Minute {
		t.Fatalf("a shadow limit still reports its bucket: %v", r.Statuses[0])
	}
	r = ask(t, c, desc("blocked", "x"))
	if r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
		t.Fatalf("a limit of 0: %v", r)
	}
	// gold-user replaces per-key: the key's limit is not counted.
	r = ask(t, c, desc("api_key", "k9"), desc("tier", "gold", "user", "u1"))
	if r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit.GetName() != "gold-user" || r.Statuses[1].LimitRemaining != 1 {
		t.Fatalf("replaces: %v", r)
	}
	if r := ask(t, c, desc("api_key", "k9")); r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the replaced limit was counted: %v", r)
	}
}

func TestHitsAddendAndOverrides(t *testing.T) {
	c := memoryService(t, limiter.NewManualClock(time.Unix(1_000_000, 0)))
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*rlcommon.RateLimitDescriptor{desc("api_key", "k1")}})
	if err != nil || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits_addend 2: %v %v", resp, err)
	}
	own := desc("api_key", "k1")
	own.HitsAddend = wrapperspb.UInt64(0) // look, do not count
	if r := ask(t, c, own); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits_addend 0 on the descriptor: %v", r)
	}
	back := desc("api_key", "k1")
	back.HitsAddend, back.IsNegativeHits = wrapperspb.UInt64(1), true // give a token back
	if r := ask(t, c, back); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("is_negative_hits: %v", r)
	}
	over := desc("api_key", "k1")
	over.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_HOUR}
	r := ask(t, c, over)
	if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 || r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("override: %v", r)
	}
}

type failingStore struct{}

func (failingStore) Take(context.Context, []limiter.Request, []limiter.Result) (bool, error) {
	return false, errors.New("store down")
}

func TestTheFailureModeAnswersWhenTheStoreCannotDecide(t *testing.T) {
	for _, c := range []struct {
		mode decide.OnFailure
		code rlsv3.RateLimitResponse_Code
		rpc  codes.Code
	}{
		{decide.Allow, rlsv3.RateLimitResponse_OK, codes.OK},
		{decide.Deny, rlsv3.RateLimitResponse_OVER_LIMIT, codes.OK},
		{decide.Error, 0, codes.Unavailable},
	} {
		client := serve(t, NewService(mustConfig(t, testConfig), ServiceOptions{Hash: plainHash, Store: failingStore{}, OnFailure: c.mode}))
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("api_key", "k")}})
		if status.Code(err) != c.rpc || (err == nil && resp.OverallCode != c.code) {
			t.Errorf("mode %d: %v %v", c.mode, resp, err)
		}
	}
}
