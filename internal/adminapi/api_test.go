package adminapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/adminapi"
	"github.com/floodgate/floodgate/internal/door"
	checkdoor "github.com/floodgate/floodgate/internal/door/check"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/resilient"
	"github.com/floodgate/floodgate/limiter/storetest"
)

const policies = `
client_ip: {trusted_hops: 1}
policies:
  - name: keys
    match: {path_prefix: /v1/}
    key: [header:x-api-key, client_ip]
    capacity: 3
    refill_per_second: 1/60
  - name: tenant
    match: {headers: [{name: x-tenant, prefix: t-}]}
    key: [header:x-tenant]
    capacity: 2
    refill_per_second: 1/60
  - name: ips
    key: [client_ip]
    capacity: 5
    refill_per_second: 1/60
  - name: trial
    match: {path_prefix: /v1/}
    key: [client_ip]
    capacity: 1
    refill_per_second: 1/60
    mode: shadow
`

const (
	aliceToken = "alice-0123456789abcdef"
	bobToken   = "bob-fedcba9876543210"
)

// fixture is an admin API on real HTTP (127.0.0.1), a Check server on the
// same store, and what the API logs and counts.
type fixture struct {
	cfg    *door.Config
	check  *extauthz.Server
	client adminapi.Client
	url    string
	logs   *observer.ObservedLogs
	reg    *prometheus.Registry
	tokens string // the token file
}

// newFixture serves the API over store with yaml (the policies above
// when empty), admin_api's token file holding alice's and bob's tokens
// unless off.
func newFixture(t *testing.T, store limiter.Store, yaml string, off bool) *fixture {
	t.Helper()
	if yaml == "" {
		yaml = policies
	}
	f := &fixture{tokens: filepath.Join(t.TempDir(), "tokens")}
	writeFile(t, f.tokens, "alice:"+aliceToken+"\nbob:"+bobToken+"\n")
	if !off {
		yaml = "admin_api: {token_file: " + f.tokens + "}\n" + yaml
	}
	cfg, err := doors.LoadBytes("test.yaml", []byte("identity: {hash_secret_env: FG_ADMINAPI_SECRET}\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	core, logs := observer.New(zap.InfoLevel)
	f.logs, f.reg = logs, prometheus.NewRegistry()
	adj, _ := store.(limiter.Adjuster)
	api := adminapi.New(adminapi.Options{Config: func() *door.Config { return f.cfg }, Balances: adj, Log: zap.New(core), Registerer: f.reg})
	mux := http.NewServeMux()
	mux.Handle(adminapi.Prefix, api)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	f.client = adminapi.Client{Addr: srv.URL, Token: aliceToken}
	f.check = extauthz.NewServer(cfg.Engine, store, extauthz.ServerOptions{})
	return f
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) {
	os.Setenv("FG_ADMINAPI_SECRET", "0123456789abcdef-adminapi-test")
	os.Exit(m.Run())
}

// call sends method path (under the server's URL) with body, presenting
// token ("" for none), and returns the status and body.
func (f *fixture) call(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func checkReq(t *testing.T, path, source string, headers ...string) *authv3.CheckRequest {
	t.Helper()
	req, err := checkdoor.Request("GET", "api.example.com", path, source, headers, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func allowed(t *testing.T, s *extauthz.Server, req *authv3.CheckRequest) bool {
	t.Helper()
	resp, err := s.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus().GetCode() == 0
}

// decisions is what n Checks of req decide, in turn.
func decisions(t *testing.T, s *extauthz.Server, req *authv3.CheckRequest, n int) string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = "deny"
		if allowed(t, s, req) {
			out[i] = "allow"
		}
	}
	return strings.Join(out, " ")
}

func TestEveryV1PathIs404WithoutAdminAPI(t *testing.T) {
	f := newFixture(t, storetest.Memory(nil), "", true)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/buckets/keys?key=k"}, {"POST", "/v1/buckets/keys?key=k"}, {"POST", "/v1/explain"}, {"GET", "/v1/"}, {"GET", "/v1/other"},
	} {
		if code, body := f.call(t, c.method, c.path, aliceToken, `{"reset": true}`); code != http.StatusNotFound || !strings.Contains(body, "admin_api.token_file") {
			t.Errorf("%s %s: %d %s", c.method, c.path, code, body)
		}
	}
}

func TestAMissingOrWrongTokenIs401AndSpendsNothing(t *testing.T) {
	store := storetest.Memory(nil)
	f := newFixture(t, store, "", false)
	req := checkReq(t, "/v1/a", "10.0.0.1", "x-api-key: k1")
	allowed(t, f.check, req) // 2 of 3 left
	for _, tc := range []struct{ token, reason string }{
		{"", "missing_token"}, {"alice-0123456789abcdeX", "wrong_token"}, {aliceToken + "x", "wrong_token"}, {"alice", "wrong_token"},
	} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/buckets/keys?key=k1", ""}, {"POST", "/v1/buckets/keys?key=k1", `{"set": 0}`}, {"POST", "/v1/explain", `{"path": "/v1/a"}`},
		} {
			code, body := f.call(t, c.method, c.path, tc.token, c.body)
			if code != http.StatusUnauthorized || strings.Contains(body, aliceToken) {
				t.Errorf("token %q, %s %s: %d %s", tc.token, c.method, c.path, code, body)
			}
		}
	}
	if n := (counter(t, f.reg, "floodgate_admin_unauthorized_total", "reason", "missing_token")); n != 3 {
		t.Errorf("missing_token counted %v, want 3", n)
	}
	if n := (counter(t, f.reg, "floodgate_admin_unauthorized_total", "reason", "wrong_token")); n != 9 {
		t.Errorf("wrong_token counted %v, want 9", n)
	}
	// Nothing was set to 0: the two tokens left pay two requests.
	if got := decisions(t, f.check, req, 3); got != "allow allow deny" {
		t.Errorf("a refused call changed the bucket: %s", got)
	}
}

// counter is the value of name's series with label=value in reg (0 when
// there is none).
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The Done-when flow on Redis: a caller denied, one call of the API adds
// to its balance, and the next request passes; the answer names the
// bucket the decisions wrote, and the change is logged with who asked.
func TestAnOperatorRaisesACallersBalanceAndTheNextRequestPasses(t *testing.T) {
	srv := redistest.Start(t)
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: 50 * time.Millisecond, DialTimeout: 250 * time.Millisecond})
	defer rc.Close()
	rs, err := resilient.New(redisstore.New(rc, ""), resilient.Options{Timeout: 50 * time.Millisecond, OverLimitEntries: 100,
		Breaker: resilient.BreakerOptions{Failures: 5, OpenFor: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, rs, "", false)
	req := checkReq(t, "/v1/a", "10.0.0.1", "x-api-key: k_live_42")
	for i := 0; i < 3; i++ {
		if !allowed(t, f.check, req) {
			t.Fatalf("request %d of 3 denied", i+1)
		}
	}
	if allowed(t, f.check, req) {
		t.Fatal("the 4th request passed")
	}
	ctx := context.Background()
	got, err := f.client.Bucket(ctx, "keys", "", "k_live_42", "", nil)
	if err != nil || got.Remaining != 0 || got.Limit != 3 || got.Source != "header:x-api-key" || got.Scope != "shared" || got.Reset < 179 {
		t.Fatalf("read: %+v, %v", got, err)
	}
	if n, err := srv.Client().Exists(ctx, "keys:{"+got.Identity+"}").Result(); n != 1 || err != nil {
		t.Fatalf("the identity read, %s, is not the key the decisions wrote", got.Identity)
	}
	n := int64(2)
	got, err = f.client.Bucket(ctx, "keys", "", "k_live_42", "", &adminapi.Change{Add: &n})
	if err != nil || got.Remaining != 2 || got.Op != "add" || got.By != "alice" {
		t.Fatalf("add 2: %+v, %v", got, err)
	}
	if got := decisions(t, f.check, req, 3); got != "allow allow deny" {
		t.Fatalf("the 2 tokens added did not pay exactly 2 requests: %s", got)
	}
	logged := f.logs.FilterMessage("admin API: bucket adjusted").All()
	if len(logged) != 1 || logged[0].ContextMap()["by"] != "alice" || logged[0].ContextMap()["identity"] != got.Identity {
		t.Errorf("logged %v", logged)
	}
	if strings.Contains(fmt.Sprint(f.logs.All()), "k_live_42") {
		t.Error("the caller's API key reached the log")
	}
	if v := (counter(t, f.reg, "floodgate_admin_adjustments_total", "op", "add")); v != 1 {
		t.Errorf("adjustments counted %v", v)
	}
	// bob resets it; a set outside the capacity is a 400 that changes nothing.
	bob := adminapi.Client{Addr: f.url, Token: bobToken}
	if got, err = bob.Bucket(ctx, "keys", "", "k_live_42", "", &adminapi.Change{Reset: true}); err != nil || got.Remaining != 3 || got.By != "bob" {
		t.Fatalf("reset: %+v, %v", got, err)
	}
	if code, body := f.call(t, "POST", "/v1/buckets/keys?key=k_live_42", aliceToken, `{"set": 4}`); code != http.StatusBadRequest || !strings.Contains(body, "outside [-3, 3]") {
		t.Errorf("set 4: %d %s", code, body)
	}
	// Redis stopped: a clear 503 within the store's deadline, not a hang.
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	code, body := f.call(t, "GET", "/v1/buckets/keys?key=k_live_42", aliceToken, "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "the store is unavailable") || time.Since(start) > 2*time.Second {
		t.Errorf("Redis paused: %d %s after %v", code, body, time.Since(start))
	}
}

func TestBadBucketRequestsSayWhatToFix(t *testing.T) {
	f := newFixture(t, storetest.Memory(nil), "", false)
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"GET", "/v1/buckets/nope?key=k", "", 404, "no policy named nope (policies: keys, tenant, ips, trial)"},
		{"GET", "/v1/buckets/keys", "", 400, "give ?key=VALUE"},
		{"GET", "/v1/buckets/keys?key=k&id=x", "", 400, "give ?key=VALUE"},
		{"GET", "/v1/buckets/ips?key=nothing", "", 400, "takes an IP address"},
		{"GET", "/v1/buckets/keys?key=k&source=header:x-other", "", 400, "its key sources: header:x-api-key, client_ip"},
		{"GET", "/v1/buckets/keys?id=x}y", "", 400, `is no identity of policy keys`},
		{"GET", "/v1/buckets/keys?id=%2Bheader:x-other", "", 400, `is no identity of policy keys`},
		{"GET", "/v1/buckets/keys?id=hpWaTFU8A8tDQlOY30ltYw", "", 200, `"identity": "hpWaTFU8A8tDQlOY30ltYw"`},
		{"GET", "/v1/buckets/keys?id=%2Bheader:x-api-key", "", 200, `"identity": "+header:x-api-key"`},
		{"GET", "/v1/buckets/keys?id=-", "", 200, `"identity": "-"`},
		{"POST", "/v1/buckets/keys?key=k", `{"add": 1, "set": 2}`, 400, `exactly one of`},
		{"POST", "/v1/buckets/keys?key=k", `{"give": 1}`, 400, `unknown field`},
		{"DELETE", "/v1/buckets/keys?key=k", "", 405, "GET reads a bucket"},
		{"GET", "/v1/explain", "", 405, "POST a request"},
		{"POST", "/v1/explain", `{"source": "nowhere"}`, 400, "is not an IP address"},
		{"POST", "/v1/explain", `{"headers": ["no colon"]}`, 400, "want 'name: value'"},
	} {
		code, body := f.call(t, tc.method, tc.path, aliceToken, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: %d %s, want %d %q", tc.method, tc.path, tc.body, code, body, tc.code, tc.want)
		}
	}
}

func TestTheMemoryStoresAnswerSaysItIsThisReplicas(t *testing.T) {
	f := newFixture(t, storetest.Memory(nil), "", false)
	b, err := f.client.Bucket(context.Background(), "ips", "", "203.0.113.7", "", nil)
	if err != nil || b.Scope != "replica" || !strings.Contains(b.Note, "this replica's buckets only") || b.Source != "client_ip" {
		t.Fatalf("%+v, %v", b, err)
	}
}

func TestARotatedTokenFileTakesEffectWithoutARestart(t *testing.T) {
	f := newFixture(t, storetest.Memory(nil), "", false)
	if code, _ := f.call(t, "GET", "/v1/buckets/ips?key=10.0.0.1", aliceToken, ""); code != 200 {
		t.Fatalf("alice before: %d", code)
	}
	writeFile(t, f.tokens, "carol:carol-0123456789abcdef-new\n")
	future := time.Now().Add(time.Minute)
	os.Chtimes(f.tokens, future, future) // a rewrite within the same clock tick is seen too
	if code, _ := f.call(t, "GET", "/v1/buckets/ips?key=10.0.0.1", aliceToken, ""); code != 401 {
		t.Errorf("alice after the rotation: %d", code)
	}
	if code, _ := f.call(t, "GET", "/v1/buckets/ips?key=10.0.0.1", "carol-0123456789abcdef-new", ""); code != 200 {
		t.Errorf("carol after the rotation: %d", code)
	}
	writeFile(t, f.tokens, "carol:short\n")
	os.Chtimes(f.tokens, future.Add(time.Minute), future.Add(time.Minute))
	if code, body := f.call(t, "GET", "/v1/buckets/ips?key=10.0.0.1", "carol-0123456789abcdef-new", ""); code != 503 || strings.Contains(body, "short") {
		t.Errorf("an unreadable token file: %d %s", code, body)
	}
}

// TestExplainSaysWhatCheckThenDecides explains random requests, then
// decides each with Check on the same store and clock: the decision and
// the denying policies explain gave are Check's, a calendar quota's among
// them.
func TestExplainSaysWhatCheckThenDecides(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_796_040_000, 0))
	f := newFixture(t, storetest.Memory(clock), driftPolicies, false)
	rng := rand.New(rand.NewPCG(47, 3))
	denials, quotaDenials := 0, 0
	for i := 0; i < 300; i++ {
		clock.Advance(time.Duration(rng.IntN(20)) * time.Second)
		path := []string{"/v1/a", "/other"}[rng.IntN(2)]
		source := fmt.Sprintf("10.0.0.%d", rng.IntN(3))
		var hs []string
		if k := rng.IntN(3); k > 0 {
			hs = append(hs, fmt.Sprintf("x-api-key: k%d", k))
		}
		if rng.IntN(2) == 0 {
			hs = append(hs, "x-tenant: "+[]string{"t-1", "u-1"}[rng.IntN(2)])
		}
		e, err := f.client.Explain(context.Background(), adminapi.ExplainRequest{Path: path, Source: source, Host: "api.example.com", Headers: hs})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := f.check.Check(context.Background(), checkReq(t, path, source, hs...))
		if err != nil {
			t.Fatal(err)
		}
		checkAllowed := resp.GetStatus().GetCode() == 0
		if contains(e.DeniedBy, "hourly") {
			quotaDenials++
		}
		if (e.Decision == "allow") != checkAllowed {
			t.Fatalf("request %d (%s %v): explain said %s (%v), Check allowed %v\n%s", i, path, hs, e.Decision, e.DeniedBy, checkAllowed, e.Text())
		}
		if !checkAllowed {
			denials++
			var body struct{ Policy string }
			json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &body)
			if !contains(e.DeniedBy, body.Policy) {
				t.Fatalf("request %d: Check denied by %s, explain named %v", i, body.Policy, e.DeniedBy)
			}
		}
	}
	if denials < 30 {
		t.Errorf("only %d denials among 300 requests: the comparison says little", denials)
	}
	if quotaDenials < 10 {
		t.Errorf("the hourly quota denied only %d requests: the comparison says little of quotas", quotaDenials)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestExplainNamesEveryPolicyAndWhy(t *testing.T) {
	f := newFixture(t, storetest.Memory(nil), "", false)
	req := checkReq(t, "/v1/a", "10.0.0.1", "x-forwarded-for: 203.0.113.5")
	for i := 0; i < 5; i++ {
		allowed(t, f.check, req)
	}
	e, err := f.client.Explain(context.Background(), adminapi.ExplainRequest{Path: "/v1/a", Headers: []string{"x-forwarded-for: 203.0.113.5"}, Source: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Decision != "deny" || strings.Join(e.DeniedBy, ",") != "keys" {
		t.Fatalf("%+v", e)
	}
	by := map[string]adminapi.PolicyExplained{}
	for _, p := range e.Policies {
		by[p.Policy] = p
	}
	if p := by["keys"]; p.KeySource != "client_ip" || p.Bucket.Remaining != 0 || p.Verdict != "denies" || p.RetryAfter != 60 {
		t.Errorf("keys: %+v", p)
	}
	if p := by["tenant"]; p.Matched || p.Reason != "match.headers[0]: the request does not send x-tenant" {
		t.Errorf("tenant: %+v", p)
	}
	if p := by["ips"]; p.Verdict != "pays" || p.Bucket.Remaining != 2 {
		t.Errorf("ips: %+v", p)
	}
	if p := by["trial"]; p.Mode != "shadow" || p.Verdict != "would deny" {
		t.Errorf("trial: %+v", p)
	}
	if !strings.Contains(e.Text(), "deny (check): denied by keys") {
		t.Errorf("text:\n%s", e.Text())
	}
}
