package proxytest

import (
	"bufio"
	"fmt"
	"google.golang.org/grpc/codes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Recipe is one proxy's shipped configuration, as RunRecipe drives it.
type Recipe struct {
	// Door is the http_authz part of the Floodgate configuration the recipe
	// needs (its header names); RunRecipe adds the policies and
	// client_ip.trusted_hops.
	Door DoorConfig
	// Start runs the proxy in front of the door at authz and the upstream at
	// upstream (both 127.0.0.1 host:port) and returns the address its
	// clients use.
	Start func(t *testing.T, authz, upstream string) string
	// FailureHeader is the request header the upstream sees, with the value
	// "true", on a request the proxy let through because it got no answer
	// from the door (its failure mode); the recipe removes a client's own.
	FailureHeader string
	// NoRateLimitHeaders says the proxy cannot put Floodgate's RateLimit
	// headers on an allowed response (Traefik's ForwardAuth gives them to
	// the upstream only); RunAttacks then does not ask for them.
	NoRateLimitHeaders bool
	// GRPCStart, for RunGRPC, runs the proxy's front for gRPC clients (h2c)
	// in front of the door at authz and a gRPC application at upstream and
	// returns the address gRPC clients dial.
	GRPCStart func(t *testing.T, authz, upstream string) string
	// GRPCDenied is the status a spent gRPC client gets:
	// codes.ResourceExhausted where the proxy can answer in gRPC itself;
	// codes.Unavailable where it can only relay the door's HTTP 429
	// (grpc-go's HTTPStatusConvTab).
	GRPCDenied codes.Code
	// GRPCDoorDown is the status a gRPC call gets with the door down:
	// codes.OK for a recipe that fails open (the call marked for the
	// application), another code for a proxy that cannot (Traefik's 500
	// reads as UNKNOWN).
	GRPCDoorDown codes.Code
	// FailsClosed says the proxy never lets a request through without the
	// door's answer (Traefik's ForwardAuth: a 500): a 5xx there refuses the
	// request, as a 4xx does.
	FailsClosed bool
}

// Policies RunRecipe configures the door with.
var (
	apiPolicy   = Policy{Name: "api", PathPrefix: "/api/", Key: []string{"header:x-api-key", "client_ip"}, Capacity: 3}
	loginPolicy = Policy{Name: "login", Path: "/login", Methods: []string{"POST"}, Key: []string{"client_ip"}, Capacity: 1}
)

// recipeEnv is one run of a recipe: its door, upstream and proxy.
type recipeEnv struct {
	t        *testing.T
	r        Recipe
	door     Door
	upstream *Upstream
	proxy    string
	client   *http.Client
}

func setup(t *testing.T, r Recipe) *recipeEnv { t.Helper(); return setupFailing(t, r, "allow") }

// setupFailing is setup with store.on_failure set to onFailure.
func setupFailing(t *testing.T, r Recipe, onFailure string) *recipeEnv {
	t.Helper()
	return setupWith(t, r, func(cfg *DoorConfig) { cfg.OnFailure = onFailure })
}

// setupWith is setup with the door's configuration changed by change.
func setupWith(t *testing.T, r Recipe, change func(*DoorConfig)) *recipeEnv {
	t.Helper()
	cfg := r.Door
	cfg.Policies = []Policy{apiPolicy, loginPolicy}
	cfg.OnFailure = "allow"
	change(&cfg)
	// One trusted load balancer in front of the proxy: the tests' client
	// plays it, writing the address it saw into X-Forwarded-For.
	cfg.TrustedHops = 1
	e := &recipeEnv{t: t, r: r, door: StartDoor(t, cfg), upstream: StartUpstream(t)}
	e.proxy = r.Start(t, e.door.Addr(), e.upstream.Addr)
	e.client = &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// Response is what a client of the proxy got.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

func (r Response) String() string {
	return fmt.Sprintf("%d %v %q", r.Status, r.Header, r.Body)
}

// forgedMarker is the value of the failure marker every client request
// carries: the upstream must see none, or "true" from the proxy itself.
const forgedMarker = "forged-by-the-client"

// do sends one request to the proxy. Every request carries the headers a
// client could use to lie to the door (the original URI and method headers
// of every recipe, with spoofURI and the same method flipped) and the
// failure marker: a recipe must replace or remove them all.
func (e *recipeEnv) do(method, uri, spoofURI string, header map[string]string) Response {
	e.t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("user=someone")
	}
	req, err := http.NewRequest(method, "http://"+e.proxy+uri, body)
	if err != nil {
		e.t.Fatal(err)
	}
	flipped := http.MethodPost
	if method == http.MethodPost {
		flipped = http.MethodGet
	}
	for _, h := range []string{"X-Original-URI", "X-Forwarded-Uri"} {
		req.Header.Set(h, spoofURI)
	}
	for _, h := range []string{"X-Original-Method", "X-Forwarded-Method"} {
		req.Header.Set(h, flipped)
	}
	req.Header.Set(e.r.FailureHeader, forgedMarker)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s through the proxy: %v", method, uri, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// one returns the single value of header name, failing when it appears more
// than once (an upstream's copy beside Floodgate's) and returning "" when
// it is absent.
func (e *recipeEnv) one(resp Response, name string) string {
	e.t.Helper()
	v := resp.Header.Values(name)
	if len(v) > 1 {
		e.t.Errorf("%s appears %d times %q: the client must see Floodgate's alone\n%s", name, len(v), v, resp)
	}
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// allowed requires the upstream's answer, with no RateLimit header but
// Floodgate's.
func (e *recipeEnv) allowed(what string, resp Response) {
	e.t.Helper()
	if resp.Status != http.StatusOK || resp.Body != UpstreamBody {
		e.t.Fatalf("%s: got %v, want the upstream's 200", what, resp)
	}
	if e.one(resp, "RateLimit-Limit") == UpstreamRateLimit {
		e.t.Errorf("%s: the upstream's own RateLimit-Limit reached the client\n%v", what, resp)
	}
}

// unmarked requires that no request the upstream saw carries the failure
// marker: every one of them was decided by the door.
func (e *recipeEnv) unmarked() {
	e.t.Helper()
	if n := e.upstream.Count(func(s Seen) bool { return s.Header.Get(e.r.FailureHeader) != "" }); n > 0 {
		e.t.Errorf("the upstream saw %s on %d requests the door decided: the client's own header got through", e.r.FailureHeader, n)
	}
}

// retryAfter parses a denial's Retry-After: whole seconds, at most the
// policies' refill time and no less than a minute under it.
func (e *recipeEnv) retryAfter(resp Response) int {
	e.t.Helper()
	n, err := strconv.Atoi(e.one(resp, "Retry-After"))
	if err != nil || n > RefillSeconds || n < RefillSeconds-60 {
		e.t.Fatalf("Retry-After %q: want whole seconds near %d\n%v", resp.Header.Get("Retry-After"), RefillSeconds, resp)
	}
	return n
}

// RunRecipe checks a recipe from its client's side, each case on a proxy,
// door and upstream of its own: a burst passes, then a 429 with Retry-After,
// the RateLimit headers and the JSON body, and the upstream saw exactly the
// requests that passed; the API key and the client address (through the
// proxy's X-Forwarded-For, one trusted hop) are the identity; the original
// URI and method reach the door, whatever the client claims in headers; a
// store failure gives what on_failure promises; a door that is down or hung
// meets the proxy's own failure mode (fail open, marked upstream); and no
// way around it a spent client tries (runAttacks) reaches the upstream.
func RunRecipe(t *testing.T, r Recipe) {
	t.Run("a burst passes, then 429 with Retry-After and the RateLimit headers", func(t *testing.T) {
		e := setup(t, r)
		key := map[string]string{"X-Api-Key": "key-1"}
		for i := int64(1); i <= apiPolicy.Capacity; i++ {
			what := fmt.Sprintf("request %d of the burst", i)
			resp := e.do(http.MethodGet, fmt.Sprintf("/api/items?page=%d", i), "/public/spoofed", key)
			e.allowed(what, resp)
			left := apiPolicy.Capacity - i
			if got, want := e.one(resp, "RateLimit-Limit"), strconv.FormatInt(apiPolicy.Capacity, 10); got != want {
				t.Errorf("%s: RateLimit-Limit %q, want %q", what, got, want)
			}
			if got, want := e.one(resp, "RateLimit-Remaining"), strconv.FormatInt(left, 10); got != want {
				t.Errorf("%s: RateLimit-Remaining %q, want %q", what, got, want)
			}
			if got, want := e.one(resp, "RateLimit-Policy"), fmt.Sprintf(`"api";q=%d;w=%d`, apiPolicy.Capacity, apiPolicy.Capacity*RefillSeconds); got != want {
				t.Errorf("%s: RateLimit-Policy %q, want %q", what, got, want)
			}
			if got, want := e.one(resp, "RateLimit"), fmt.Sprintf(`"api";r=%d;t=`, left); !strings.HasPrefix(got, want) {
				t.Errorf("%s: RateLimit %q, want %s...", what, got, want)
			}
			if e.one(resp, "RateLimit-Reset") == "" {
				t.Errorf("%s: no RateLimit-Reset", what)
			}
		}
		resp := e.do(http.MethodGet, "/api/items?page=4", "/public/spoofed", key)
		if resp.Status != http.StatusTooManyRequests {
			t.Fatalf("the request after the burst: %v, want 429", resp)
		}
		n := e.retryAfter(resp)
		if ct := e.one(resp, "Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("429 content-type %q, want application/json", ct)
		}
		if want := fmt.Sprintf(`{"error":"rate_limited","policy":"api","retry_after":%d}`, n); strings.TrimSpace(resp.Body) != want {
			t.Errorf("429 body %q, want %s", resp.Body, want)
		}
		if e.one(resp, "RateLimit-Remaining") != "0" || e.one(resp, "RateLimit-Limit") != "3" || !strings.HasPrefix(e.one(resp, "RateLimit"), `"api";r=0;`) {
			t.Errorf("429 RateLimit headers: %v", resp.Header)
		}
		if got := e.upstream.Count(func(s Seen) bool { return s.Header.Get("X-Api-Key") == "key-1" }); got != int(apiPolicy.Capacity) {
			t.Errorf("the upstream saw %d requests of key-1, want the %d that passed", got, apiPolicy.Capacity)
		}
		e.allowed("another API key after key-1 ran out", e.do(http.MethodGet, "/api/items", "/public/spoofed", map[string]string{"X-Api-Key": "key-2"}))
		e.unmarked()
	})

	t.Run("without an API key the client address is the X-Forwarded-For entry one hop from the right", func(t *testing.T) {
		e := setup(t, r)
		xff := func(v string) map[string]string { return map[string]string{"X-Forwarded-For": v} }
		for i := int64(1); i <= apiPolicy.Capacity; i++ {
			e.allowed(fmt.Sprintf("request %d from 198.51.100.1", i), e.do(http.MethodGet, "/api/items", "/public/spoofed", xff("198.51.100.1")))
		}
		// The leftmost entries are the client's to write: they change nothing.
		if resp := e.do(http.MethodGet, "/api/items", "/public/spoofed", xff("203.0.113.66, 198.51.100.1")); resp.Status != http.StatusTooManyRequests {
			t.Errorf("198.51.100.1 with a forged entry in front: %v, want 429 (its own bucket is empty)", resp)
		}
		e.allowed("another client address", e.do(http.MethodGet, "/api/items", "/public/spoofed", xff("198.51.100.2")))
		if got := e.upstream.Count(func(s Seen) bool {
			return strings.Contains(strings.Join(s.Header.Values("X-Forwarded-For"), ","), "198.51.100.1")
		}); got != int(apiPolicy.Capacity) {
			t.Errorf("the upstream saw %d requests of 198.51.100.1, want %d", got, apiPolicy.Capacity)
		}
		e.unmarked()
	})

	t.Run("a path no policy matches is not limited: the original URI reached the door", func(t *testing.T) {
		e := setup(t, r)
		for i := int64(1); i <= apiPolicy.Capacity+2; i++ {
			resp := e.do(http.MethodGet, "/public/page", "/api/spoofed", map[string]string{"X-Api-Key": "key-1"})
			e.allowed(fmt.Sprintf("request %d to /public/page", i), resp)
			if v := resp.Header.Values("RateLimit-Limit"); len(v) > 0 {
				t.Errorf("request %d to /public/page: RateLimit-Limit %q, want none (no policy matched)", i, v)
			}
		}
		if got, want := e.upstream.Count(func(s Seen) bool { return s.URI == "/public/page" }), int(apiPolicy.Capacity+2); got != want {
			t.Errorf("the upstream saw %d requests to /public/page, want %d", got, want)
		}
		e.unmarked()
	})

	t.Run("the original method reaches the door", func(t *testing.T) {
		e := setup(t, r)
		ip := map[string]string{"X-Forwarded-For": "198.51.100.7"}
		e.allowed("the first POST /login", e.do(http.MethodPost, "/login", "/public/spoofed", ip))
		if resp := e.do(http.MethodPost, "/login", "/public/spoofed", ip); resp.Status != http.StatusTooManyRequests {
			t.Errorf("the second POST /login: %v, want 429", resp)
		}
		for i := 1; i <= 3; i++ {
			e.allowed(fmt.Sprintf("GET /login %d (the policy limits POST)", i), e.do(http.MethodGet, "/login", "/public/spoofed", ip))
		}
		if got := e.upstream.Count(func(s Seen) bool { return s.Method == http.MethodPost && string(s.Body) == "user=someone" }); got != 1 {
			t.Errorf("the upstream saw %d POSTs with their body, want 1", got)
		}
		e.unmarked()
	})

	// Redis hangs: each decision waits out the door's store timeout, and
	// the door answers by on_failure before the proxy gives up on it (an
	// answer after the proxy's timeout would reach the client as the
	// proxy's own failure mode, marked for the upstream, which unmarked
	// and the degraded mark rule out).
	t.Run("the store down: the client gets what on_failure: allow promises", func(t *testing.T) {
		e := setup(t, r)
		e.door.StoreDown()
		for i := 1; i <= 2; i++ {
			resp := e.do(http.MethodGet, "/api/items", "/public/spoofed", map[string]string{"X-Api-Key": "key-1"})
			e.allowed(fmt.Sprintf("request %d while the store is down (on_failure: allow)", i), resp)
			if got := e.one(resp, "X-Ratelimit-Degraded"); got != "true" {
				t.Errorf("request %d: x-ratelimit-degraded %q, want true: the client must learn the decision was degraded", i, got)
			}
		}
		e.unmarked()
	})

	t.Run("the store down: the client gets what on_failure: deny promises", func(t *testing.T) {
		e := setupFailing(t, r, "deny")
		e.door.StoreDown()
		resp := e.do(http.MethodGet, "/api/items", "/public/spoofed", map[string]string{"X-Api-Key": "key-1"})
		if resp.Status != http.StatusTooManyRequests || e.one(resp, "Retry-After") != "1" || e.one(resp, "X-Ratelimit-Degraded") != "true" {
			t.Fatalf("a request while the store is down (on_failure: deny): %v, want 429 with Retry-After 1 (store.failure_retry_after), marked degraded", resp)
		}
		if want := `{"error":"rate_limited","retry_after":1,"degraded":true}`; strings.TrimSpace(resp.Body) != want {
			t.Errorf("body %q, want %s", resp.Body, want)
		}
		if n := len(e.upstream.Requests()); n != 0 {
			t.Errorf("the upstream saw %d requests, want none", n)
		}
	})

	t.Run("the door down: the proxy lets requests through, marked for the upstream", func(t *testing.T) {
		e := setup(t, r)
		e.door.Stop()
		e.failOpen()
	})

	t.Run("the door hung: the proxy gives up at its timeout and lets the request through, marked", func(t *testing.T) {
		e := setup(t, r)
		e.door.Pause()
		defer e.door.Resume()
		e.failOpen()
	})

	runAttacks(t, r)
}

// failOpen requires the proxy's failure mode with no answer from the door:
// the upstream's 200 for the client, and the upstream told why.
func (e *recipeEnv) failOpen() {
	e.t.Helper()
	resp := e.do(http.MethodGet, "/api/items", "/public/spoofed", map[string]string{"X-Api-Key": "key-1"})
	e.allowed("a request the door did not answer", resp)
	if v := resp.Header.Values("RateLimit-Limit"); len(v) > 0 {
		e.t.Errorf("RateLimit-Limit %q on a request the door did not answer", v)
	}
	seen := e.upstream.Requests()
	if len(seen) != 1 || seen[0].Header.Get(e.r.FailureHeader) != "true" {
		e.t.Errorf("the upstream saw %v; want the one request, with %s: true", seen, e.r.FailureHeader)
	}
}

// rawRequest sends one HTTP/1.1 GET of uri to the proxy, written byte for
// byte as given (Go's client refuses to send the header values these cases
// need), with headers as "Name: value" lines, and reads the answer.
func (e *recipeEnv) rawRequest(uri string, headers ...string) Response {
	e.t.Helper()
	c, err := net.DialTimeout("tcp", e.proxy, 5*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n", uri)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("GET %s through the proxy, headers %q: %v", uri, headers, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// oddBytes are header values a client can send that some proxies accept
// and forward (nginx, HAProxy: control bytes but CR, LF and NUL, and
// obs-text) and Go's net/http refuses (all but obs-text).
var oddBytes = []string{"\x01", "\x0b", "\x1b", "\x7f", "\x08", "\xff"}

// RunAttacks runs the ways around a recipe a client whose bucket is spent
// tries (RunRecipe runs them too); none may reach the upstream. For a
// proxy whose recipe cannot meet all of RunRecipe (Traefik's).
func RunAttacks(t *testing.T, r Recipe) { runAttacks(t, r) }

// runAttacks are the ways around a recipe a client whose bucket is spent
// tries; none may reach the upstream.
func runAttacks(t *testing.T, r Recipe) {
	t.Run("a spent client is denied whatever bytes its header values hold", func(t *testing.T) {
		e := setup(t, r)
		key := map[string]string{"X-Api-Key": "key-odd"}
		for i := int64(1); i <= apiPolicy.Capacity; i++ {
			e.allowed(fmt.Sprintf("request %d of the burst", i), e.do(http.MethodGet, "/api/items", "/public/spoofed", key))
		}
		for _, odd := range oddBytes {
			for _, h := range []string{"User-Agent: curl" + odd, "Cookie: session=a" + odd + "b", "X-Anything: " + odd} {
				resp := e.rawRequest("/api/items", "X-Api-Key: key-odd", h)
				if resp.Status < 400 {
					t.Errorf("the spent key-odd with %q: %v, want a denial", h, resp)
				}
			}
		}
		if got := e.upstream.Count(func(s Seen) bool { return s.Header.Get("X-Api-Key") == "key-odd" }); got != int(apiPolicy.Capacity) {
			t.Errorf("the upstream saw %d requests of the spent key-odd, want the %d of its burst", got, apiPolicy.Capacity)
		}
		// A key that holds an odd byte is a key of its own, decided as
		// any: its burst passes with Floodgate's headers (not by the
		// proxy's failure mode), then it is denied. A proxy that refuses
		// the byte itself refuses every one of them.
		for _, odd := range oddBytes {
			k := "X-Api-Key: key" + odd + "odd"
			first := e.rawRequest("/api/items", k)
			if first.Status >= 400 {
				for i := 2; i <= int(apiPolicy.Capacity)+1; i++ {
					if resp := e.rawRequest("/api/items", k); resp.Status < 400 {
						t.Errorf("%q: the proxy refused the first request (%d) but let request %d through: %v", k, first.Status, i, resp)
					}
				}
				continue
			}
			if first.Status != http.StatusOK || (!r.NoRateLimitHeaders && e.one(first, "RateLimit-Limit") != strconv.FormatInt(apiPolicy.Capacity, 10)) {
				t.Errorf("%q, the first request: %v, want 200 with Floodgate's RateLimit headers", k, first)
			}
			for i := 2; i <= int(apiPolicy.Capacity); i++ {
				e.rawRequest("/api/items", k)
			}
			if resp := e.rawRequest("/api/items", k); resp.Status != http.StatusTooManyRequests {
				t.Errorf("%q after its burst: %v, want 429", k, resp)
			}
		}
		e.unmarked()
	})

	// What the door cannot read it answers with a 4xx of net/http's (431
	// here): an answer, which no recipe may take for "the door is down".
	t.Run("a 4xx the door answers refuses the request, it never lets it through", func(t *testing.T) {
		e := setupWith(t, r, func(cfg *DoorConfig) { cfg.MaxHeaderBytes = 4096 })
		pad := strings.Repeat("p", 5000) // each line under every proxy's own limit (nginx: 8k)
		for i := 1; i <= 3; i++ {
			resp := e.rawRequest("/api/items", "X-Api-Key: key-large", "X-Pad-1: "+pad, "X-Pad-2: "+pad)
			if resp.Status < 400 || (resp.Status >= 500 && !r.FailsClosed) {
				t.Errorf("request %d with headers above the door's max_header_bytes: %v, want a 4xx", i, resp)
			}
		}
		if n := len(e.upstream.Requests()); n != 0 {
			t.Errorf("the upstream saw %d requests the door refused to read, want none", n)
		}
		e.allowed("an ordinary request beside them", e.do(http.MethodGet, "/api/items", "/public/spoofed", map[string]string{"X-Api-Key": "key-small"}))
	})

	t.Run("a spent client is denied whatever it writes into X-Forwarded-For", func(t *testing.T) {
		e := setup(t, r)
		lb := "198.51.100.9" // what the trusted load balancer appended
		for i := int64(1); i <= apiPolicy.Capacity; i++ {
			e.allowed(fmt.Sprintf("request %d of the burst", i), e.do(http.MethodGet, "/api/items", "/public/spoofed", map[string]string{"X-Forwarded-For": lb}))
		}
		for i := 0; i < 8; i++ {
			forged := fmt.Sprintf("203.0.113.%d", i+1)
			for _, xff := range []string{forged + ", " + lb, forged + ", 10.0.0.1, " + lb, "unknown, " + lb, forged + "," + lb} {
				if resp := e.do(http.MethodGet, "/api/items", "/public/spoofed", map[string]string{"X-Forwarded-For": xff}); resp.Status != http.StatusTooManyRequests {
					t.Errorf("X-Forwarded-For %q: %v, want 429 (the client is %s, spent)", xff, resp, lb)
				}
			}
		}
		// Two header lines are one list: the client's own line first.
		if resp := e.rawRequest("/api/items", "X-Forwarded-For: 203.0.113.50", "X-Forwarded-For: "+lb); resp.Status != http.StatusTooManyRequests {
			t.Errorf("two X-Forwarded-For lines: %v, want 429", resp)
		}
		e.unmarked()
	})

	t.Run("a spent client is denied whatever forwarded headers it sends", func(t *testing.T) {
		e := setup(t, r)
		ip := map[string]string{"X-Forwarded-For": "198.51.100.8"}
		e.allowed("the first POST /login", e.do(http.MethodPost, "/login", "/public/spoofed", ip))
		forged := []map[string]string{
			{"X-Original-URI": "/public", "X-Forwarded-Uri": "/public", "X-Original-Method": "GET", "X-Forwarded-Method": "GET"},
			{"X-Forwarded-Host": "other.example", "X-Forwarded-Prefix": "/public", "X-Forwarded-Proto": "https"},
			{"X-Original-URL": "/public", "X-Rewrite-URL": "/public", "Forwarded": "for=203.0.113.1;host=other.example"},
			{"Expect": "nothing-you-know", "X-HTTP-Method-Override": "GET"},
		}
		for _, f := range forged {
			h := map[string]string{"X-Forwarded-For": "198.51.100.8"}
			for k, v := range f {
				h[k] = v
			}
			if resp := e.do(http.MethodPost, "/login", "/public/spoofed", h); resp.Status < 400 {
				t.Errorf("POST /login with %v: %v, want a denial", f, resp)
			}
		}
		if got := e.upstream.Count(func(s Seen) bool { return s.Method == http.MethodPost }); got != 1 {
			t.Errorf("the upstream saw %d POSTs to /login, want the 1 that passed", got)
		}
		e.unmarked()
	})
}
