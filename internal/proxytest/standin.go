package proxytest

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// StandIn answers authorization requests the way Floodgate's HTTP door
// answers them (shared/DESIGN, "The HTTP authorization door" and "Response
// headers"), from DoorConfig's policies in memory, for the recipes' tests
// until the door exists: 200 with the RateLimit headers (legacy and
// structured) to allow, 429 with them, Retry-After, content-type
// application/json and the JSON body to deny, 200 alone when no policy
// matches. Buckets never refill within a test (one token an hour). It also
// records every authorization request, which the recipes' own tests read to
// pin what each proxy sends.
type StandIn struct {
	recorder
	cfg  DoorConfig
	addr string
	srv  *http.Server

	mu        sync.Mutex
	used      map[string]int64 // tokens taken, by policy name and key
	paused    chan struct{}    // closed by Resume; nil when not paused
	storeDown bool
	stopped   bool
}

// StartStandIn serves a StandIn for cfg on a free loopback port until the
// test ends.
func StartStandIn(t testing.TB, cfg DoorConfig) *StandIn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &StandIn{cfg: cfg, addr: l.Addr().String(), used: map[string]int64{}}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(l)
	t.Cleanup(s.Stop)
	return s
}

// Addr is the stand-in's address.
func (s *StandIn) Addr() string { return s.addr }

// Pause makes the stand-in hold every request without an answer until
// Resume or until the proxy gives up on it; a held request is recorded but
// decides nothing.
func (s *StandIn) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused == nil {
		s.paused = make(chan struct{})
	}
}

// Resume answers again.
func (s *StandIn) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused != nil {
		close(s.paused)
		s.paused = nil
	}
}

// Stop closes the listener and every connection.
func (s *StandIn) Stop() {
	s.mu.Lock()
	stopped := s.stopped
	s.stopped = true
	s.mu.Unlock()
	if !stopped {
		s.Resume()
		s.srv.Close()
	}
}

// StoreDown makes every later decision the failure mode's: allowed, marked
// x-ratelimit-degraded: true (store.on_failure: allow).
func (s *StandIn) StoreDown() {
	s.mu.Lock()
	s.storeDown = true
	s.mu.Unlock()
}

// Original returns the method and URI of the request a proxy asks about, as
// the door reads them: from the configured headers when the proxy sent
// them, else the authorization request's own, with path_prefix stripped.
func (cfg DoorConfig) Original(r *http.Request) (method, uri string) {
	method, uri = r.Method, r.RequestURI
	if rest, ok := strings.CutPrefix(uri, cfg.PathPrefix); ok && cfg.PathPrefix != "" {
		uri = rest
		if !strings.HasPrefix(uri, "/") {
			uri = "/" + uri
		}
	}
	if h := cfg.OriginalMethodHeader; h != "" && r.Header.Get(h) != "" {
		method = r.Header.Get(h)
	}
	if h := cfg.OriginalURIHeader; h != "" && r.Header.Get(h) != "" {
		uri = r.Header.Get(h)
	}
	return method, uri
}

// ClientIP returns the client address the door takes for r: the
// (TrustedHops+1)-th entry from the right of X-Forwarded-For (all its
// fields, comma-joined), else the connection's peer when the list is
// shorter or that entry is not an address (shared/DESIGN, "Client IP").
func (cfg DoorConfig) ClientIP(r *http.Request) string {
	var xff []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		for _, e := range strings.Split(v, ",") {
			xff = append(xff, strings.TrimSpace(e))
		}
	}
	if i := len(xff) - 1 - cfg.TrustedHops; i >= 0 {
		if a, err := netip.ParseAddr(xff[i]); err == nil {
			return a.String()
		}
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	return host
}

func (p *Policy) matches(method, path string) bool {
	switch {
	case p.Path != "" && path != p.Path:
		return false
	case p.PathPrefix != "" && !strings.HasPrefix(path, p.PathPrefix):
		return false
	}
	return len(p.Methods) == 0 || slices.ContainsFunc(p.Methods, func(m string) bool { return strings.EqualFold(m, method) })
}

func (cfg DoorConfig) key(p *Policy, r *http.Request) string {
	for _, src := range p.Key {
		if name, ok := strings.CutPrefix(src, "header:"); ok {
			if v := r.Header.Get(name); v != "" {
				return src + "=" + v
			}
			continue
		}
		if src == "client_ip" {
			return "client_ip=" + cfg.ClientIP(r)
		}
	}
	return ""
}

// standInResult is one policy's part of a decision.
type standInResult struct {
	p         *Policy
	remaining int64 // tokens left after the decision
}

func (s *StandIn) serve(w http.ResponseWriter, r *http.Request) {
	s.record(r)
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if paused != nil {
		select {
		case <-paused:
		case <-r.Context().Done():
			return // the proxy gave up: it never learns a decision
		}
	}

	method, uri := s.cfg.Original(r)
	path, _, _ := strings.Cut(uri, "?")
	var matched []*Policy
	for i := range s.cfg.Policies {
		if p := &s.cfg.Policies[i]; p.matches(method, path) {
			matched = append(matched, p)
		}
	}
	if len(matched) == 0 {
		w.WriteHeader(http.StatusOK)
		return
	}

	s.mu.Lock()
	if s.storeDown {
		s.mu.Unlock()
		w.Header().Set("X-Ratelimit-Degraded", "true")
		w.WriteHeader(http.StatusOK)
		return
	}
	// All or nothing: a request passes only when every matched policy has a
	// token, and a denied one takes none.
	results := make([]standInResult, len(matched))
	deny := -1
	for i, p := range matched {
		k := p.Name + "\x00" + s.cfg.key(p, r)
		results[i] = standInResult{p: p, remaining: p.Capacity - s.used[k]}
		if results[i].remaining < 1 && deny < 0 {
			deny = i
		}
	}
	if deny < 0 {
		for i, p := range matched {
			s.used[p.Name+"\x00"+s.cfg.key(p, r)]++
			results[i].remaining--
		}
	}
	s.mu.Unlock()

	h := w.Header()
	legacy := deny
	if legacy < 0 {
		legacy = 0
		for i := range results {
			if results[i].remaining < results[legacy].remaining {
				legacy = i
			}
		}
	}
	lr := results[legacy]
	h.Set("RateLimit-Limit", strconv.FormatInt(lr.p.Capacity, 10))
	h.Set("RateLimit-Remaining", strconv.FormatInt(lr.remaining, 10))
	h.Set("RateLimit-Reset", strconv.FormatInt((lr.p.Capacity-lr.remaining)*RefillSeconds, 10))
	var policy, state []string
	for _, res := range results {
		policy = append(policy, fmt.Sprintf(`"%s";q=%d;w=%d`, res.p.Name, res.p.Capacity, res.p.Capacity*RefillSeconds))
		state = append(state, fmt.Sprintf(`"%s";r=%d;t=%d`, res.p.Name, res.remaining, (res.p.Capacity-res.remaining)*RefillSeconds))
	}
	h.Set("RateLimit-Policy", strings.Join(policy, ", "))
	h.Set("RateLimit", strings.Join(state, ", "))
	if deny < 0 {
		w.WriteHeader(http.StatusOK)
		return
	}
	h.Set("Retry-After", strconv.Itoa(RefillSeconds))
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprintf(w, `{"error":"rate_limited","policy":"%s","retry_after":%d}`, results[deny].p.Name, RefillSeconds)
}
