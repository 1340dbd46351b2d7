package extauthz

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter/storetest"
)

// The HTTP door's benchmarks call ServeHTTP in-process, as BenchmarkCheckDirect
// calls Check: no HTTP server, no network; what they measure is reading the
// request, deciding in the in-memory store and writing the answer.

// benchHTTPRequests are authorization requests as nginx's recipe sends
// them, one per caller (the callers of benchRequests).
func benchHTTPRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r, _ := http.NewRequest(http.MethodGet, "http://floodgate/_floodgate", nil)
		r.RequestURI, r.Host, r.RemoteAddr = "/_floodgate", "api.example.com", "127.0.0.1:40000"
		r.Header = http.Header{
			"X-Original-Uri":    {"/v1/items/" + strconv.Itoa(i)},
			"X-Original-Method": {"GET"},
			"X-Api-Key":         {"k_live_" + strconv.Itoa(100000+i)},
			"X-Forwarded-For":   {"203.0.113." + strconv.Itoa(i&255) + ", 127.0.0.1"},
			"User-Agent":        {"bench/1.0"},
			"Accept":            {"application/json"},
		}
		reqs[i] = r
	}
	return reqs
}

// discardWriter is a ResponseWriter whose header map is cleared between
// requests, as net/http gives each request a fresh one.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

func benchHTTPDoor(b *testing.B, wantStatus int, reqs []*http.Request, policies ...PolicySpec) {
	eng := mustCompile(b, policies...)
	s := NewServer(eng, storetest.Memory(nil), ServerOptions{Registerer: prometheus.NewRegistry()})
	h := NewHTTPServer(s, eng.WithTrustedHops(1), HTTPOptions{Registerer: prometheus.NewRegistry(),
		Request: HTTPRequestOptions{OriginalURIHeader: "X-Original-URI", OriginalMethodHeader: "X-Original-Method"}})
	w := &discardWriter{h: http.Header{}}
	for _, r := range reqs {
		h.ServeHTTP(w, r)
		clear(w.h)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.ServeHTTP(w, reqs[i%len(reqs)])
		if w.status != wantStatus {
			b.Fatalf("request %d: status %d, want %d", i, w.status, wantStatus)
		}
		clear(w.h)
	}
}

// BenchmarkHTTPDoorDirect calls HTTPServer.ServeHTTP in-process.
func BenchmarkHTTPDoorDirect(b *testing.B) {
	b.Run("allowed", func(b *testing.B) { benchHTTPDoor(b, 200, benchHTTPRequests(benchKeys), benchPerKey) })
	b.Run("two-policies", func(b *testing.B) { benchHTTPDoor(b, 200, benchHTTPRequests(benchKeys), benchPerKey, benchPerIP) })
	b.Run("denied", func(b *testing.B) { benchHTTPDoor(b, 429, benchHTTPRequests(benchKeys), benchTight) })
	b.Run("unmatched", func(b *testing.B) {
		reqs := benchHTTPRequests(benchKeys)
		for _, r := range reqs {
			r.Header["X-Original-Uri"] = []string{"/health"}
		}
		benchHTTPDoor(b, 200, reqs, benchPerKey)
	})
}

// TestAnAllowedHTTPRequestAllocatesLittle pins the door's allocations on
// the common path, as TestAnAllowedCheckAllocatesLittle does Check's: the
// identity, the values' string, the headers' value slice, and what
// net/http's header map needs for the headers set.
func TestAnAllowedHTTPRequestAllocatesLittle(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: allocation counts mean nothing")
	}
	eng := mustCompile(t, benchPerKey)
	h := NewHTTPServer(NewServer(eng, storetest.Memory(nil), ServerOptions{}), eng, HTTPOptions{
		Request: HTTPRequestOptions{OriginalURIHeader: "X-Original-URI", OriginalMethodHeader: "X-Original-Method"}})
	r := benchHTTPRequests(1)[0]
	w := &discardWriter{h: make(http.Header, 16)}
	h.ServeHTTP(w, r)
	if n := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, r) }); n > 4 {
		t.Errorf("an allowed HTTP door request allocates %v times, want at most 4", n)
	}
}
