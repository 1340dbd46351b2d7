package proxytest

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/floodgatetest"
)

func TestMain(m *testing.M) { os.Exit(floodgatetest.Main(m)) }

// TestTheDoorsConfigurationIsOneFloodgateServes: DoorConfig's YAML is a
// configuration floodgate accepts, with the HTTP door on and every setting
// where the recipes' tests put it.
func TestTheDoorsConfigurationIsOneFloodgateServes(t *testing.T) {
	cfg := DoorConfig{PathPrefix: "/authz", OriginalURIHeader: "X-Original-URI", OriginalMethodHeader: "X-Original-Method", TrustedHops: 1, OnFailure: "deny",
		Policies: []Policy{apiPolicy, loginPolicy}}
	c, err := doors.Parse("proxytest.yaml", []byte(cfg.YAML("127.0.0.1:6379")))
	if err != nil {
		t.Fatalf("%v\n%s", err, cfg.YAML("127.0.0.1:6379"))
	}
	h := c.HTTPAuthz
	if c.Listen.HTTP != "127.0.0.1:0" || h.PathPrefix != "/authz" || h.OriginalURIHeader != "X-Original-URI" || h.OriginalMethodHeader != "X-Original-Method" ||
		c.ClientIP.TrustedHops != 1 || c.Store.OnFailure != "deny" || c.Store.Redis.Timeout != 50*time.Millisecond || len(c.Policies) != 2 {
		t.Errorf("read back: %+v", c.Config)
	}
	login := c.Policies[1]
	if login.Match.Path != "/login" || len(login.Match.Methods) != 1 || login.Capacity != 1 || login.RefillPerSecond != "1/3600" || login.Key[0] != "client_ip" {
		t.Errorf("login policy: %+v", login)
	}
}

// TestStartDoorRunsFloodgate drives the door StartDoor starts directly: a
// burst and its 429, then each fault the recipes' suite puts it through.
func TestStartDoorRunsFloodgate(t *testing.T) {
	d := StartDoor(t, DoorConfig{OriginalURIHeader: "X-Original-URI", Policies: []Policy{{Name: "api", PathPrefix: "/api/", Key: []string{"header:x-api-key"}, Capacity: 1}}})
	ask := func(key string, timeout time.Duration) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.Addr()+"/_floodgate", nil)
		req.Header.Set("X-Original-URI", "/api/x")
		req.Header.Set("X-Api-Key", key)
		resp, err := (&http.Transport{}).RoundTrip(req)
		if err == nil {
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	for _, want := range []int{200, 429} {
		if resp, err := ask("k", 5*time.Second); err != nil || resp.StatusCode != want {
			t.Fatalf("%v %v, want %d", resp, err, want)
		}
	}
	d.Pause()
	if resp, err := ask("k2", 300*time.Millisecond); err == nil {
		t.Errorf("a paused door answered %d", resp.StatusCode)
	}
	d.Resume() // the held request is decided now, for nobody
	if resp, err := ask("k3", 5*time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after Resume: %v %v", resp, err)
	}
	d.StoreDown()
	if resp, err := ask("k4", 5*time.Second); err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Degraded") != "true" {
		t.Errorf("store down: %v %v, want 200 marked degraded", resp, err)
	}
	d.Stop()
	if resp, err := ask("k5", time.Second); err == nil {
		t.Errorf("a stopped door answered %d", resp.StatusCode)
	}
}

// TestStandInRecordsAndPasses: every request is recorded and let through.
func TestStandInRecordsAndPasses(t *testing.T) {
	s := StartStandIn(t)
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr()+"/auth?x=1", nil)
	req.Header.Set("X-Original-URI", "/api/x")
	req.Host = "shop.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Limit") != "" {
		t.Errorf("%d %v, want a plain 200", resp.StatusCode, resp.Header)
	}
	seen := s.Requests()
	if len(seen) != 1 || seen[0].URI != "/auth?x=1" || seen[0].Header.Get("X-Original-URI") != "/api/x" || seen[0].Header.Get("Host") != "shop.example" {
		t.Errorf("recorded %+v", seen)
	}
}

// TestStandInPausesAndStops: a paused stand-in answers nothing until the
// caller gives up; a stopped one refuses connections.
func TestStandInPausesAndStops(t *testing.T) {
	s := StartStandIn(t)
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
