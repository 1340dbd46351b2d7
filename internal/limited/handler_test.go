package limited

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// serveLimited answers one request to Handler over a real HTTP server.
func serveLimited(t *testing.T, r *Recorder, adminAddr, method, query, accept string) (*http.Response, string) {
	t.Helper()
	srv := httptest.NewServer(Handler(r, adminAddr))
	defer srv.Close()
	req, _ := http.NewRequest(method, srv.URL+"/debug/limited"+query, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func testRecorder() *Recorder {
	c := newClock()
	r := New(withDefaults(Options{Now: c.Now}))
	p := r.tally("per-key", false)
	for _, id := range []string{"a", "a", "a", "b", "<script>"} {
		p.Record(c.Now(), id, Label{"header:x-api-key", id}, true)
	}
	return r
}

func TestTheHandlerServesJSONUnlessABrowserAsks(t *testing.T) {
	r := testRecorder()
	for _, tc := range []struct{ query, accept, want string }{
		{"", "", "application/json"},
		{"", "*/*", "application/json"}, // curl
		{"", "application/json, text/html", "application/json"},
		{"", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "text/html; charset=utf-8"}, // a browser
		{"?format=html", "", "text/html; charset=utf-8"},
		{"?format=json", "text/html", "application/json"},
	} {
		resp, body := serveLimited(t, r, "127.0.0.1:9192", "GET", tc.query, tc.accept)
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != tc.want {
			t.Errorf("query %q, Accept %q: %s %q, want %q", tc.query, tc.accept, resp.Status, ct, tc.want)
			continue
		}
		if tc.want == "application/json" {
			var rep Report
			if err := json.Unmarshal([]byte(body), &rep); err != nil || rep.Policies[0].Top[0].Caller != "a" {
				t.Errorf("query %q: %v %+v", tc.query, err, rep)
			}
		}
	}
}

func TestTheHandlerRefusesWhatItCannotServe(t *testing.T) {
	r := testRecorder()
	for _, tc := range []struct {
		method, query string
		code          int
		msg           string
	}{
		{"POST", "", 405, "GET only"},
		{"GET", "?format=xml", 400, `format must be json or html, got "xml"`},
		{"GET", "?top=0", 400, `top must be a whole number >= 1 (callers per policy), got "0"`},
		{"GET", "?top=many", 400, `got "many"`},
	} {
		resp, body := serveLimited(t, r, "127.0.0.1:9192", tc.method, tc.query, "")
		if resp.StatusCode != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s %s: %s %q, want %d %q", tc.method, tc.query, resp.Status, body, tc.code, tc.msg)
		}
	}
	_, body := serveLimited(t, r, "127.0.0.1:9192", "GET", "?top=1", "")
	var rep Report
	if json.Unmarshal([]byte(body), &rep); len(rep.Policies) != 1 || len(rep.Policies[0].Top) != 1 {
		t.Errorf("?top=1: %s", body)
	}
}

// TestThePageSaysWhenTheAdminPortIsExposed: the admin port listens on
// loopback by default; bound elsewhere, the page says who can read it.
func TestThePageSaysWhenTheAdminPortIsExposed(t *testing.T) {
	r := testRecorder()
	for addr, exposed := range map[string]bool{
		"127.0.0.1:9192": false, "[::1]:9192": false, "localhost:9192": false,
		"0.0.0.0:9192": true, "[::]:9192": true, ":9192": true, "10.0.0.5:9192": true, "floodgate-0.floodgate:9192": true,
	} {
		_, page := serveLimited(t, r, addr, "GET", "?format=html", "")
		if got := strings.Contains(page, "is not loopback-only"); got != exposed {
			t.Errorf("admin on %s: warning shown %v, want %v", addr, got, exposed)
		}
		if !strings.Contains(page, "<code>&lt;script&gt;</code>") || strings.Contains(page, "<script>") {
			t.Errorf("admin on %s: a caller's label is not escaped", addr)
		}
	}
}
