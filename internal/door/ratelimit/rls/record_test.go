package rls

import (
	"crypto/sha256"
	"encoding/base64"
	"reflect"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const recordConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: generic_key
    value: api
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 3, name: per-key}
  - key: generic_key
    value: ping
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /login*
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: masked_remote_address
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// digest stands for Floodgate's keyed identity hash: opaque, and never the
// value.
func digest(tag, val string) string {
	sum := sha256.Sum256([]byte(tag + "\x00" + val))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// TestTheRecorderHearsEveryLimitByDomainAndDescriptor drives denials of
// every kind over gRPC and reads the recorder: one policy per configured
// limit (rls:DOMAIN/LIMIT, shadow limits apart), each descriptor counted
// under its bucket identity, an address shown as itself, entries the
// configuration fixes shown with their value, a bucket every request
// shares as "-", a request's own limit under rls:DOMAIN/override; the
// other limits of a denied answer are not counted, and no descriptor value
// reaches the report.
func TestTheRecorderHearsEveryLimitByDomainAndDescriptor(t *testing.T) {
	rec := limited.New(limited.DefaultOptions())
	store := storetest.Memory(limiter.NewManualClock(time.Unix(1_000_000, 0)))
	c := serve(t, NewService(mustConfig(t, recordConfig), ServiceOptions{Hash: digest, Store: store, Recorder: rec}))

	for range 3 { // 2 allowed, 1 denied
		ask(t, c, desc("remote_address", "192.0.2.7"))
	}
	// Denied by the spent address: the key's limit paid nothing and is
	// not counted either way.
	if r := ask(t, c, desc("generic_key", "api", "api_key", "alpha-secret"), desc("remote_address", "192.0.2.7")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a spent address: %v", r)
	}
	for range 5 { // 3 allowed, 2 denied
		ask(t, c, desc("generic_key", "api", "api_key", "alpha-secret"))
	}
	// Envoy's remote_address and masked_remote_address actions name their
	// entries so (envoy source/common/router/router_ratelimit.cc,
	// RemoteAddressAction and MaskedRemoteAddressAction::populateDescriptor);
	// the masked one's value is the network, 10.0.0.0/16 for a mask of 16.
	for range 2 { // 1 allowed, 1 denied
		ask(t, c, desc("masked_remote_address", "10.0.0.0/16"))
	}
	for range 2 { // one bucket for every request: 1 allowed, 1 denied
		ask(t, c, desc("generic_key", "ping"))
	}
	for range 3 { // shadow: 1 allowed, 2 would-be denials, all answered OK
		if r := ask(t, c, desc("path", "/login/secret-token")); r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("a shadow limit denied: %v", r)
		}
	}
	ask(t, c, desc("blocked", "gamma-secret"))        // no request passes a limit of 0
	ask(t, c, desc("free", "x"), desc("nothing", "")) // unlimited and unknown: nothing to record
	for range 2 {                                     // a request's own limit of 1 an hour: 1 allowed, 1 denied
		own := desc("api_key", "delta-secret")
		own.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		ask(t, c, own)
	}

	id := func(pairs ...string) string {
		var es []Entry
		for i := 0; i < len(pairs); i += 2 {
			es = append(es, Entry{pairs[i], pairs[i+1]})
		}
		return digest("rls:edge", descriptorText(es))
	}
	got := rec.Snapshot(0)
	want := limited.Report{WindowSeconds: 60,
		Policies: []limited.PolicyReport{
			{Name: "rls:edge/edge.remote_address", Denied: 2, Top: []limited.Caller{
				{Caller: "192.0.2.7", Key: "remote_address", Denied: 2, Allowed: 2}}},
			{Name: "rls:edge/per-key", Denied: 2, Top: []limited.Caller{
				{Caller: id("generic_key", "api", "api_key", "alpha-secret"), Key: "generic_key=api,api_key", Denied: 2, Allowed: 3}}},
			{Name: "rls:edge/edge.blocked", Denied: 1, Top: []limited.Caller{
				{Caller: id("blocked", "gamma-secret"), Key: "blocked", Denied: 1}}},
			{Name: "rls:edge/edge.generic_key_ping", Denied: 1, Top: []limited.Caller{
				{Caller: "-", Key: "generic_key=ping", Denied: 1, Allowed: 1}}},
			{Name: "rls:edge/edge.masked_remote_address", Denied: 1, Top: []limited.Caller{
				{Caller: "10.0.0.0/16", Key: "masked_remote_address", Denied: 1, Allowed: 1}}},
			{Name: "rls:edge/override", Denied: 1, Top: []limited.Caller{
				{Caller: id("api_key", "delta-secret"), Key: "api_key", Denied: 1, Allowed: 1}}},
		},
		Shadow: []limited.PolicyReport{
			{Name: "rls:edge/edge.path_/login*", Denied: 2, Top: []limited.Caller{
				{Caller: id("path", "/login/secret-token"), Key: "path", Denied: 2, Allowed: 1}}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("report:\n got %+v\nwant %+v", got, want)
	}
	if s := strings.ToLower(reportText(got)); strings.Contains(s, "secret") {
		t.Errorf("a descriptor value reached the report: %s", s)
	}
}

func reportText(r limited.Report) string {
	var b strings.Builder
	for _, ps := range [][]limited.PolicyReport{r.Policies, r.Shadow} {
		for _, p := range ps {
			for _, c := range p.Top {
				b.WriteString(c.Caller + " " + c.Key + "\n")
			}
		}
	}
	return b.String()
}

// TestAReloadKeepsTheWindowOfTheLimitsItKeeps: a configuration swapped in
// reports under the same names, so the counts go on; a store that cannot
// decide is not a decision and is not counted.
func TestAReloadKeepsTheWindowOfTheLimitsItKeeps(t *testing.T) {
	rec := limited.New(limited.DefaultOptions())
	store := storetest.Memory(limiter.NewManualClock(time.Unix(1_000_000, 0)))
	s := NewService(mustConfig(t, recordConfig), ServiceOptions{Hash: digest, Store: store, Recorder: rec})
	c := serve(t, s)
	for range 3 {
		ask(t, c, desc("remote_address", "192.0.2.7"))
	}
	s.SetLimits(mustConfig(t, recordConfig))
	ask(t, c, desc("remote_address", "192.0.2.7"))
	got := rec.Snapshot(0).Policies
	if len(got) != 1 || got[0].Name != "rls:edge/edge.remote_address" || got[0].Denied != 2 || got[0].Top[0].Allowed != 2 {
		t.Fatalf("after a reload: %+v", got)
	}

	down := limited.New(limited.DefaultOptions())
	c = serve(t, NewService(mustConfig(t, recordConfig), ServiceOptions{Hash: digest, Store: failingStore{}, OnFailure: decide.Deny, Recorder: down}))
	if r := ask(t, c, desc("remote_address", "192.0.2.7")); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("store down, on_failure deny: %v", r)
	}
	if rep := down.Snapshot(0); len(rep.Policies)+len(rep.Shadow) != 0 {
		t.Fatalf("a failure-mode answer was counted: %+v", rep)
	}
}
