package proxytest

import (
	"net/http"
	"strings"
	"testing"
)

// Sent is what one client request through a proxy produced: the
// authorization request the door's stand-in got and the requests the
// application got.
type Sent struct {
	Door Seen
	App  []Seen
}

// SendThrough sends a client's POST /api/orders?id=7, body "a body", Host
// shop.example, with the headers given, through the proxy start runs (as
// Recipe.Start) in front of a stand-in for the door, requires the proxy's
// 200 and exactly one authorization request, and returns what was sent.
func SendThrough(t *testing.T, proxy string, start func(t *testing.T, authz, upstream string) string, header map[string]string) Sent {
	t.Helper()
	standIn := StartStandIn(t)
	up := StartUpstream(t)
	addr := start(t, standIn.Addr(), up.Addr)

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/orders?id=7", strings.NewReader("a body"))
	req.Host = "shop.example"
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST through %s: %d", proxy, resp.StatusCode)
	}
	seen := standIn.Requests()
	if len(seen) != 1 {
		t.Fatalf("the door saw %d authorization requests, want 1", len(seen))
	}
	return Sent{Door: seen[0], App: up.Requests()}
}

// WantAuthorization requires that got is GET /_floodgate with no body and
// each header of want as given (repeated values joined with " | "; "":
// absent).
func WantAuthorization(t *testing.T, got Seen, want map[string]string) {
	t.Helper()
	if got.Method != http.MethodGet || got.URI != "/_floodgate" {
		t.Errorf("authorization request %s %s, want GET /_floodgate", got.Method, got.URI)
	}
	for k, v := range want {
		if g := strings.Join(got.Header.Values(k), " | "); g != v {
			t.Errorf("the door got %s %q, want %q", k, g, v)
		}
	}
	if len(got.Body) != 0 || got.Header.Get("Content-Length") != "" {
		t.Errorf("the authorization request carried a body (%q) or a Content-Length (%q)", got.Body, got.Header.Get("Content-Length"))
	}
}

// CheckWhatItSends pins the authorization request a recipe's proxy makes,
// as docs/http-authz.md describes it for nginx and HAProxy alike: a client's
// POST /api/orders?id=7 with a body becomes GET /_floodgate with the
// client's headers, the original URI (path and query) and method in the
// headers the door reads (the client's own copies replaced), X-Forwarded-For
// with the proxy's peer appended, and no body.
func CheckWhatItSends(t *testing.T, proxy string, start func(t *testing.T, authz, upstream string) string) {
	t.Helper()
	sent := SendThrough(t, proxy, start, map[string]string{
		"X-Api-Key": "key-1", "X-Forwarded-For": "198.51.100.1", "X-Original-URI": "/spoofed", "X-Original-Method": "GET",
	})
	WantAuthorization(t, sent.Door, map[string]string{
		"X-Original-URI":    "/api/orders?id=7",
		"X-Original-Method": "POST",
		"X-Forwarded-For":   "198.51.100.1, 127.0.0.1",
		"X-Api-Key":         "key-1",
		"Host":              "shop.example",
	})
}
