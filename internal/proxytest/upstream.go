package proxytest

import (
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/headerbytes"
)

// Seen is one request as a server in this package received it.
type Seen struct {
	Method string
	// URI is the request target as sent (path and query).
	URI    string
	Header http.Header
	Body   []byte
}

// recorder keeps the requests a server has seen, in order.
type recorder struct {
	mu   sync.Mutex
	seen []Seen
}

func (r *recorder) record(req *http.Request) Seen {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	h := req.Header.Clone()
	if req.Host != "" {
		h.Set("Host", req.Host) // net/http moves Host out of the header map
	}
	s := Seen{Method: req.Method, URI: req.RequestURI, Header: h, Body: body}
	r.mu.Lock()
	r.seen = append(r.seen, s)
	r.mu.Unlock()
	return s
}

// Requests returns a copy of what was seen so far.
func (r *recorder) Requests() []Seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Seen(nil), r.seen...)
}

// UpstreamBody is what the upstream answers every request with.
const UpstreamBody = "from the upstream\n"

// UpstreamRateLimit is the RateLimit-Limit header the upstream sets on every
// answer: an application's own stale value, which a recipe must not let
// reach the client beside (or instead of) Floodgate's.
const UpstreamRateLimit = "999"

// Upstream is the application behind the proxy: it answers every request
// 200 with UpstreamBody and records it.
type Upstream struct {
	recorder
	// Addr is its 127.0.0.1 address.
	Addr string
}

// StartUpstream serves an Upstream on a free loopback port until the test
// ends.
func StartUpstream(t testing.TB) *Upstream {
	t.Helper()
	u := &Upstream{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Addr = l.Addr().String()
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.record(r)
		w.Header().Set("RateLimit-Limit", UpstreamRateLimit)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, UpstreamBody)
	})}
	// Any bytes a proxy forwards in a header value reach the handler, as
	// they would an application that is not Go's net/http (which refuses
	// control bytes with a 400 of its own and would hide a request the
	// proxy let through).
	go srv.Serve(headerbytes.Listener(l))
	t.Cleanup(func() { srv.Close() })
	return u
}

// Count returns how many requests the upstream saw that match.
func (u *Upstream) Count(match func(Seen) bool) int {
	n := 0
	for _, s := range u.Requests() {
		if match(s) {
			n++
		}
	}
	return n
}
