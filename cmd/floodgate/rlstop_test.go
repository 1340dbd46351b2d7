package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/limiter/redistest"
)

const rlsTopLimits = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: generic_key
    value: api
    descriptors:
      - key: api_key
        rate_limit: {unit: hour, requests_per_unit: 3, name: per-key}
  - key: path
    value: /login*
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

const rlsTopConfig = `
listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
identity: {hash_secret_file: %q}
store:
  backend: redis
  redis: {addresses: ["%s"]}
rls: {config: %q}
policies:
  - {name: unused, key: [client_ip], capacity: 3, refill_per_second: 1}
`

// askRLS sends one ShouldRateLimit in domain edge with one descriptor of
// the key/value pairs.
func askRLS(t *testing.T, p *proc, pairs ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(pairs); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: pairs[i], Value: pairs[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(p.Conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// TestTopShowsTheRateLimitServicesDenials drives rate limit service
// denials over gRPC into two floodgate processes sharing one Redis, then
// reads /debug/limited and `floodgate top --once --json` over both: each
// configured limit is a policy (rls:DOMAIN/LIMIT, the shadow one apart),
// the counts add up exactly, an API key appears only as the bucket
// identity its Redis key carries, an address as itself, and no descriptor
// value reaches the report, the table, Redis or the log.
func TestTopShowsTheRateLimitServicesDenials(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	secret, limits := filepath.Join(dir, "secret"), filepath.Join(dir, "ratelimit")
	os.WriteFile(secret, []byte("rls-top-test-secret-0123456789ab"), 0o600)
	os.Mkdir(limits, 0o755)
	if err := os.WriteFile(filepath.Join(limits, "edge.yaml"), []byte(rlsTopLimits), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(rlsTopConfig, secret, srv.Addr, limits)
	a, b := startFloodgate(t, cfg), startFloodgate(t, cfg)

	for i := range 5 { // alpha alternates: 3 allowed, 2 denied between them
		askRLS(t, []*proc{a, b}[i%2], "generic_key", "api", "api_key", "alpha-secret-key")
	}
	for range 4 { // beta on b only: 3 allowed, 1 denied
		askRLS(t, b, "generic_key", "api", "api_key", "beta-secret-key")
	}
	for i := range 4 { // 2 allowed, 2 denied, one of each on each replica
		askRLS(t, []*proc{a, b}[i%2], "remote_address", "192.0.2.7")
	}
	for range 3 { // shadow: 1 allowed, 2 would-be denials, none denied
		if r := askRLS(t, a, "path", "/login/secret-token"); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("a shadow limit denied: %v", r)
		}
	}

	// The bucket identities, as the Redis keys carry them.
	keys, err := srv.Client().Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, k := range keys {
		if strings.Contains(k, "secret") {
			t.Errorf("a descriptor value reached Redis: %s", k)
		}
		if _, rest, ok := strings.Cut(k, "rls/edge/edge.generic_key_api.api_key:{"); ok {
			ids[strings.TrimSuffix(rest, "}")] = true
		}
	}
	got := topJSON(t, "--admin", a.Admin+","+b.Admin)
	if len(got.Policies) != 2 || len(got.Policies[0].Top) != 2 {
		t.Fatalf("floodgate top --json: %+v", got)
	}
	alpha, beta := got.Policies[0].Top[0].Caller, got.Policies[0].Top[1].Caller
	if len(ids) != 2 || !ids[alpha] || !ids[beta] || alpha == beta {
		t.Fatalf("the API keys' callers %q and %q are not their buckets' identities in Redis (%v)", alpha, beta, ids)
	}
	shadowID := got.Shadow[0].Top[0].Caller
	want := topReport{Replicas: []string{a.Admin, b.Admin}, Report: limited.Report{WindowSeconds: 60,
		Policies: []limited.PolicyReport{
			{Name: "rls:edge/per-key", Denied: 3, Top: []limited.Caller{
				{Caller: alpha, Key: "generic_key=api,api_key", Denied: 2, Allowed: 3},
				{Caller: beta, Key: "generic_key=api,api_key", Denied: 1, Allowed: 3},
			}},
			{Name: "rls:edge/edge.remote_address", Denied: 2, Top: []limited.Caller{{Caller: "192.0.2.7", Key: "remote_address", Denied: 2, Allowed: 2}}},
		},
		Shadow: []limited.PolicyReport{
			{Name: "rls:edge/edge.path_/login*", Denied: 2, Top: []limited.Caller{{Caller: shadowID, Key: "path", Denied: 2, Allowed: 1}}},
		},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("floodgate top --once --json:\n got %+v\nwant %+v", got, want)
	}

	// Each replica's own view holds its share, and the two add up.
	ra, rb := getLimited(t, a), getLimited(t, b)
	if len(ra.Policies) == 0 || len(rb.Policies) == 0 {
		t.Fatalf("a replica saw none of the denials: %+v / %+v", ra, rb)
	}
	ra.Merge(rb)
	if !reflect.DeepEqual(ra, want.Report) {
		t.Errorf("the replicas' views add up to\n%+v\nwant %+v", ra, want.Report)
	}

	table := topText(t, "--admin", a.Admin+","+b.Admin, "--once")
	if !strings.Contains(table, "rls:edge/per-key") || !strings.Contains(table, "192.0.2.7") {
		t.Errorf("the table lacks the rate limit service's limits:\n%s", table)
	}
	for _, out := range []string{table, fmt.Sprint(got), a.Output(), b.Output()} {
		if strings.Contains(out, "secret-") {
			t.Errorf("a descriptor value is shown in the clear:\n%s", out)
		}
	}
}
