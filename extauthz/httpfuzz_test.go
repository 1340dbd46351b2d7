package extauthz

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate/floodgate/limiter/storetest"
)

// FuzzHTTPDoor: any request net/http reads is decided: 200 or 429, never
// the failure mode (the in-memory store cannot fail, so a degraded answer
// would be a recovered panic) and never another status.
func FuzzHTTPDoor(f *testing.F) {
	f.Add("GET /authz/v1/x?y=1 HTTP/1.1\r\nHost: a\r\nX-Api-Key: k\r\nX-Forwarded-For: 1.2.3.4, 10.0.0.1\r\n\r\n")
	f.Add("POST /_floodgate HTTP/1.1\r\nHost: a\r\nX-Original-URI: /login?x\r\nX-Original-Method: post\r\nX-Forwarded-Host: SHOP.example:8443\r\n\r\n")
	f.Add("GET /%2e%2e/%2F;a=b/x HTTP/1.1\r\nHost: [::1]:80\r\nX-Forwarded-For: [2001:db8::1]:443,,\r\nContent-Type: application/grpc+proto\r\nX-Cost: 99999999999\r\n\r\n")
	f.Add("OPTIONS * HTTP/1.1\r\nHost: h\r\nX-Original-URI: \r\n\r\n")
	f.Add("GET http://h/authz/v1 HTTP/1.1\r\nHost: h\r\nX-Tenant: a\r\nX-Tenant: b\r\nX-Api-Key: \xff\xfe\r\n\r\n")
	eng := mustCompile(f,
		PolicySpec{Name: "api", Match: MatchSpec{PathPrefix: "/v1/"}, Key: []string{"header:x-api-key", "client_ip"}, Capacity: 5, RefillPerSecond: "1"},
		PolicySpec{Name: "login", Match: MatchSpec{Path: "/login", Methods: []string{"POST"}, Hosts: []string{"shop.example"}}, Key: []string{"client_ip"}, Capacity: 1, RefillPerSecond: "1/60"},
		PolicySpec{Name: "tenant", Match: MatchSpec{Headers: []HeaderMatchSpec{{Name: "x-tenant", Prefix: "a"}}}, Key: []string{"header:x-tenant", "fingerprint"},
			FingerprintHeaders: []string{"user-agent"}, Capacity: 2, RefillPerSecond: "1", CostHeader: "x-cost"},
	)
	s := NewServer(eng, storetest.Memory(nil), ServerOptions{})
	h := NewHTTPServer(s, eng.WithTrustedHops(1), HTTPOptions{Request: HTTPRequestOptions{PathPrefix: "/authz",
		OriginalURIHeader: "X-Original-URI", OriginalMethodHeader: "X-Original-Method", OriginalHostHeader: "X-Forwarded-Host"}})
	f.Fuzz(func(t *testing.T, raw string) {
		if len(raw) > 1<<16 {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http answers 400 or 431 before any handler
		}
		r.RemoteAddr = "192.0.2.1:5000"
		w := httptest.NewRecorder()
		before := testutil.ToFloat64(h.Metrics().Requests.WithLabelValues("degraded_allowed"))
		h.ServeHTTP(w, r)
		if w.Code != 200 && w.Code != 429 {
			t.Fatalf("status %d for %q", w.Code, raw)
		}
		if testutil.ToFloat64(h.Metrics().Requests.WithLabelValues("degraded_allowed")) != before || w.Header().Get("X-Ratelimit-Degraded") != "" {
			t.Fatalf("a degraded answer from the memory store (a panic?) for %q", raw)
		}
	})
}
