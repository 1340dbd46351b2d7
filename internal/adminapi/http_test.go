package adminapi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/adminapi"
	"github.com/floodgate/floodgate/internal/door/httpauthz"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestExplainSaysWhatTheHTTPDoorThenAnswers explains random requests as
// the HTTP door reads them (its own trusted hops, the original URI and
// method in nginx's headers or Envoy's path prefix), then asks the door
// over real HTTP on the same store and clock: 200 where explain said
// allow, 429 where it said deny.
func TestExplainSaysWhatTheHTTPDoorThenAnswers(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_796_040_000, 0))
	store := storetest.Memory(clock)
	f := newFixture(t, store, "listen: {http: 127.0.0.1:0}\nhttp_authz: {trusted_hops: 2, path_prefix: /authz, original_uri_header: X-Original-URI, original_method_header: X-Original-Method}\n"+driftPolicies, false)
	door := extauthz.NewHTTPServer(f.check, httpauthz.Engine(f.cfg), extauthz.HTTPOptions{Request: httpauthz.RequestOptions(f.cfg)})
	srv := httptest.NewServer(door)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	rng := rand.New(rand.NewPCG(47, 5))
	denials, quotaDenials := 0, 0
	for i := 0; i < 300; i++ {
		clock.Advance(time.Duration(rng.IntN(20)) * time.Second)
		a := httpauthz.ClientArgs{Addr: addr, Method: []string{"GET", "POST"}[rng.IntN(2)], Host: "api.example.com",
			Path: []string{"/v1/a", "/other"}[rng.IntN(2)], Source: fmt.Sprintf("203.0.113.%d", rng.IntN(3))}
		if rng.IntN(2) == 0 {
			a.URIHeader, a.MethodHeader = "X-Original-URI", "X-Original-Method"
		} else {
			a.Prefix = "/authz"
		}
		if k := rng.IntN(3); k > 0 {
			a.Headers = append(a.Headers, fmt.Sprintf("x-api-key: k%d", k))
		}
		if rng.IntN(2) == 0 {
			a.Headers = append(a.Headers, "x-forwarded-for: 198.51.100."+fmt.Sprint(rng.IntN(3)))
		}
		e, err := f.client.Explain(context.Background(), adminapi.ExplainRequest{Door: "http", Method: a.Method, Host: a.Host, Path: a.Path,
			Source: a.Source, Headers: a.Headers, PathPrefix: a.Prefix, URIHeader: a.URIHeader, MethodHeader: a.MethodHeader})
		if err != nil {
			t.Fatal(err)
		}
		req, err := httpauthz.Request(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if contains(e.DeniedBy, "hourly") {
			quotaDenials++
		}
		want := map[string]int{"allow": http.StatusOK, "deny": http.StatusTooManyRequests}[e.Decision]
		if e.Door != "http" || resp.StatusCode != want {
			t.Fatalf("request %d (%+v): explain said %s (%s), the door answered %d\n%s", i, a, e.Decision, e.Door, resp.StatusCode, e.Text())
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			denials++
		}
	}
	if denials < 30 {
		t.Errorf("only %d denials among 300 requests: the comparison says little", denials)
	}
	if quotaDenials < 10 {
		t.Errorf("the hourly quota denied only %d requests: the comparison says little of quotas", quotaDenials)
	}
}
