package proxytest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStandInAnswersAsTheDoor drives the stand-in directly: a burst of
// allowed answers with the RateLimit headers, then the 429 with Retry-After
// and the JSON body, one bucket per key, nothing for a path no policy
// matches, and the store failure's marked allow.
func TestStandInAnswersAsTheDoor(t *testing.T) {
	s := StartStandIn(t, DoorConfig{OriginalURIHeader: "X-Original-URI", Policies: []Policy{{Name: "api", PathPrefix: "/api/", Key: []string{"header:x-api-key", "client_ip"}, Capacity: 2}}})
	ask := func(uri, key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr()+"/auth", nil)
		req.Header.Set("X-Original-URI", uri)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, want := range []string{"1", "0"} {
		resp := ask("/api/x", "k")
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Remaining") != want || resp.Header.Get("RateLimit-Limit") != "2" ||
			resp.Header.Get("RateLimit-Policy") != `"api";q=2;w=7200` || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"api";r=`+want+";t=") {
			t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, resp.Header)
		}
	}
	resp := ask("/api/x", "k")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" || resp.Header.Get("Content-Type") != "application/json" ||
		string(body) != `{"error":"rate_limited","policy":"api","retry_after":3600}` || resp.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("after the burst: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if resp := ask("/api/x", "other"); resp.StatusCode != 200 {
		t.Errorf("another key: %d, want 200", resp.StatusCode)
	}
	if resp := ask("/public", "k"); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Limit") != "" {
		t.Errorf("an unmatched path: %d %v, want a plain 200", resp.StatusCode, resp.Header)
	}
	s.StoreDown()
	if resp := ask("/api/x", "k"); resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Degraded") != "true" {
		t.Errorf("store down: %d %v, want 200 marked degraded", resp.StatusCode, resp.Header)
	}
	if n := len(s.Requests()); n != 6 {
		t.Errorf("recorded %d requests, want 6", n)
	}
}

// TestStandInPausesAndStops: a paused stand-in answers nothing until the
// caller gives up; a stopped one refuses connections.
func TestStandInPausesAndStops(t *testing.T) {
	s := StartStandIn(t, DoorConfig{})
	s.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr()+"/", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a paused stand-in answered %d", resp.StatusCode)
	}
	s.Resume()
	resp, err := http.Get("http://" + s.Addr() + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after Resume: %v %v", resp, err)
	}
	resp.Body.Close()
	s.Stop()
	if resp, err := http.Get("http://" + s.Addr() + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("a stopped stand-in answered")
	}
}

// TestClientIPAndOriginal pins how the stand-in reads a request, which is
// shared/DESIGN's rule for the door.
func TestClientIPAndOriginal(t *testing.T) {
	for _, tc := range []struct {
		hops int
		xff  []string
		want string
	}{
		{0, []string{"198.51.100.1, 127.0.0.2"}, "127.0.0.2"},
		{1, []string{"198.51.100.1, 127.0.0.2"}, "198.51.100.1"},
		{1, []string{"6.6.6.6, 198.51.100.1", "127.0.0.2"}, "198.51.100.1"}, // two header lines are one list
		{2, []string{"198.51.100.1, 127.0.0.2"}, "192.0.2.9"},               // too short: the peer
		{1, []string{"not-an-ip, 127.0.0.2"}, "192.0.2.9"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.9:4000"
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := (DoorConfig{TrustedHops: tc.hops}).ClientIP(r); got != tc.want {
			t.Errorf("trusted_hops %d, X-Forwarded-For %q: %s, want %s", tc.hops, tc.xff, got, tc.want)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/authz/api/x?q=1", nil)
	if m, u := (DoorConfig{PathPrefix: "/authz"}).Original(r); m != "POST" || u != "/api/x?q=1" {
		t.Errorf("path_prefix /authz: %s %s, want POST /api/x?q=1", m, u)
	}
	r.Header.Set("X-Forwarded-Uri", "/login")
	r.Header.Set("X-Forwarded-Method", "PUT")
	if m, u := (DoorConfig{}).Original(r); m != "POST" || u != "/authz/api/x?q=1" {
		t.Errorf("headers not configured: %s %s, want them ignored", m, u)
	}
	if m, u := (DoorConfig{OriginalURIHeader: "X-Forwarded-Uri", OriginalMethodHeader: "X-Forwarded-Method"}).Original(r); m != "PUT" || u != "/login" {
		t.Errorf("headers configured: %s %s, want PUT /login", m, u)
	}
}

// TestRenderReplacesEveryAddress: each old string is replaced wherever it
// occurs.
func TestRenderReplacesEveryAddress(t *testing.T) {
	got := Render(t, "listen 127.0.0.1:8080; # 127.0.0.1:8080\nserver 127.0.0.1:9193;", "127.0.0.1:8080", "127.0.0.1:1", "127.0.0.1:9193", "127.0.0.1:2")
	if want := "listen 127.0.0.1:1; # 127.0.0.1:1\nserver 127.0.0.1:2;"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestUpstreamRecords: the upstream answers 200 with its body and its own
// RateLimit-Limit, and records method, URI, Host and body.
func TestUpstreamRecords(t *testing.T) {
	u := StartUpstream(t)
	req, _ := http.NewRequest(http.MethodPost, "http://"+u.Addr+"/a?b=c", strings.NewReader("payload"))
	req.Host = "shop.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != UpstreamBody || resp.Header.Get("RateLimit-Limit") != UpstreamRateLimit {
		t.Fatalf("%d %v %q", resp.StatusCode, resp.Header, body)
	}
	seen := u.Requests()
	if len(seen) != 1 || seen[0].Method != "POST" || seen[0].URI != "/a?b=c" || seen[0].Header.Get("Host") != "shop.example" || string(seen[0].Body) != "payload" {
		t.Fatalf("recorded %+v", seen)
	}
	if n := u.Count(func(s Seen) bool { return s.Method == "GET" }); n != 0 {
		t.Errorf("Count of GETs: %d", n)
	}
}
