// Package e2e runs Floodgate end to end without containers: the real binary, built once, as
// separate processes on loopback; a real redis-server (limiter/redistest); real gRPC over TCP with
// the Envoy-shaped CheckRequests of extauthz/testdata/envoy. compose_test.go checks the
// container-based run (docker-compose.yaml, run.sh, the Dockerfile), which needs an engine this
// machine does not have.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/extauthz/extauthztest"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/floodgatetest"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// fixtures is where the Envoy-shaped CheckRequests live (relative to this package).
const fixtures = "../extauthz/testdata/envoy"

// floodgateBin is the binary TestMain builds.
var floodgateBin string

func TestMain(m *testing.M) {
	var err error
	if floodgateBin, err = (floodgatetest.Build{}).Path(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(floodgatetest.Main(m))
}

// ---------------------------------------------------------------------------------------------
// Floodgate processes

// replica is one floodgate serve process.
type replica struct {
	name   string
	cmd    *exec.Cmd
	grpc   string // bound addresses, from the "serving" log line
	admin  string
	out    *logLines
	exited chan struct{}
	code   int // exit code, once exited is closed
	client authv3.AuthorizationClient
}

// logLines collects a process's output line by line and reports the "serving" line.
type logLines struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	serving chan servingLine
}

type servingLine struct {
	Msg   string `json:"msg"`
	GRPC  string `json:"grpc"`
	Admin string `json:"admin"`
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		l.lines = append(l.lines, line)
		var s servingLine
		if json.Unmarshal([]byte(line), &s) == nil && s.Msg == "serving" {
			select {
			case l.serving <- s:
			default:
			}
		}
	}
	return len(p), nil
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n") + string(l.partial)
}

// hasMsg reports whether a JSON log line with this msg was written.
func (l *logLines) hasMsg(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		var s servingLine
		if json.Unmarshal([]byte(line), &s) == nil && s.Msg == msg {
			return true
		}
	}
	return false
}

// startReplica writes cfg to a file and runs `floodgate serve --config FILE` with env added, and
// waits (bounded) for its "serving" line. The process is killed when the test ends.
func startReplica(t *testing.T, name, cfg string, env ...string) *replica {
	t.Helper()
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, out: &logLines{serving: make(chan servingLine, 1)}, exited: make(chan struct{})}
	r.cmd = exec.Command(floodgateBin, "serve", "--config", path)
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.cmd.Wait()
		r.code = r.cmd.ProcessState.ExitCode()
		close(r.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", r.name, r.out)
		}
	})
	select {
	case s := <-r.out.serving:
		r.grpc, r.admin = s.GRPC, s.Admin
	case <-r.exited:
		t.Fatalf("%s exited with %d before serving:\n%s", name, r.code, r.out)
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: no serving line within 15s:\n%s", name, r.out)
	}
	if !strings.HasPrefix(r.grpc, "127.0.0.1:") || !strings.HasPrefix(r.admin, "127.0.0.1:") {
		t.Fatalf("%s serves on %q / %q, want loopback", name, r.grpc, r.admin)
	}
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.client = authv3.NewAuthorizationClient(conn)
	return r
}

// check sends one Check with a deadline and reports how long it took.
func (r *replica) check(req *authv3.CheckRequest, timeout time.Duration) (*authv3.CheckResponse, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	resp, err := r.client.Check(ctx, req)
	return resp, time.Since(start), err
}

// configYAML is a replica configuration on loopback port 0 with one policy on /v1/.
func configYAML(redisAddr, onFailure, storeTimeout string, capacity int, refill string, trustedHops int) string {
	return fmt.Sprintf(`listen:
  grpc: 127.0.0.1:0
  admin: 127.0.0.1:0
store:
  backend: redis
  redis:
    addresses: [%s]
    timeout: %s
    prefix: "e2e:"
  on_failure: %s
client_ip:
  trusted_hops: %d
identity:
  hash_secret_env: FLOODGATE_E2E_SECRET
policies:
  - name: per-caller
    match:
      path_prefix: /v1/
    key: [header:x-api-key, client_ip]
    capacity: %d
    refill_per_second: %s
`, redisAddr, storeTimeout, onFailure, trustedHops, capacity, refill)
}

// secretEnv is the identity hash secret every replica of a test shares.
const secretEnv = "FLOODGATE_E2E_SECRET=e2e-shared-secret-0123456789"

// ---------------------------------------------------------------------------------------------
// Envoy-shaped requests and responses

// fixture loads one CheckRequest fixture as Envoy sent it.
func fixture(t *testing.T, name string) *authv3.CheckRequest {
	t.Helper()
	return extauthztest.Fixture(t, filepath.Join(fixtures, name))
}

// withHeader returns a copy of req with header name set to value, in whichever encoding the
// request uses (the headers map, or header_map as with encode_raw_headers).
func withHeader(req *authv3.CheckRequest, name, value string) *authv3.CheckRequest {
	req = proto.Clone(req).(*authv3.CheckRequest)
	h := req.GetAttributes().GetRequest().GetHttp()
	if h.GetHeaderMap() != nil {
		kept := h.HeaderMap.Headers[:0]
		for _, hv := range h.HeaderMap.Headers {
			if !strings.EqualFold(hv.GetKey(), name) {
				kept = append(kept, hv)
			}
		}
		h.HeaderMap.Headers = append(kept, &corev3.HeaderValue{Key: name, RawValue: []byte(value)})
		return req
	}
	if h.Headers == nil {
		h.Headers = map[string]string{}
	}
	h.Headers[name] = value
	return req
}

// answer is a CheckResponse as Envoy applies it.
type answer struct {
	allowed bool
	status  int               // HTTP status of a denial (0 when allowed)
	headers map[string]string // to the client
	body    string
}

func readAnswer(t *testing.T, resp *authv3.CheckResponse) answer {
	t.Helper()
	a := answer{headers: map[string]string{}}
	switch code := resp.GetStatus().GetCode(); code {
	case 0:
		a.allowed = true
		for _, h := range resp.GetOkResponse().GetResponseHeadersToAdd() {
			a.headers[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
	case 8: // RESOURCE_EXHAUSTED
		d := resp.GetDeniedResponse()
		a.status = int(d.GetStatus().GetCode())
		a.body = d.GetBody()
		for _, h := range d.GetHeaders() {
			a.headers[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
	default:
		t.Fatalf("gRPC status %d in the CheckResponse: Floodgate only answers OK or RESOURCE_EXHAUSTED", code)
	}
	return a
}

func (a answer) String() string {
	if a.allowed {
		return fmt.Sprintf("allowed %v", a.headers)
	}
	return fmt.Sprintf("denied %d %v %s", a.status, a.headers, a.body)
}

// denialBody is Floodgate's JSON body on a 429.
type denialBody struct {
	Error      string `json:"error"`
	Policy     string `json:"policy"`
	RetryAfter int    `json:"retry_after"`
	Degraded   bool   `json:"degraded"`
}

// expectDenied checks a 429 with Retry-After and the JSON body, and returns the body.
func expectDenied(t *testing.T, what string, a answer) denialBody {
	t.Helper()
	if a.allowed || a.status != int(typev3.StatusCode_TooManyRequests) {
		t.Fatalf("%s: %v, want 429", what, a)
	}
	var b denialBody
	dec := json.NewDecoder(strings.NewReader(a.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("%s: body %q: %v", what, a.body, err)
	}
	ra, err := strconv.Atoi(a.headers["retry-after"])
	if err != nil || ra < 1 || ra != b.RetryAfter || b.Error != "rate_limited" || a.headers["content-type"] != "application/json" {
		t.Fatalf("%s: want retry-after >= 1 equal to the body's, error rate_limited, JSON: %v", what, a)
	}
	return b
}

// eventually waits, as every test does (redistest.Eventually), until cond
// holds or within passes, failing with cond's last word.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	redistest.Eventually(t, within, what, func() error {
		if ok, last := cond(); !ok {
			return errors.New(last)
		}
		return nil
	})
}

// ---------------------------------------------------------------------------------------------
// The tests

// TestReplicasShareOneBucket: two replicas, one Redis. One caller alternating between them —
// once as Envoy encodes headers by default, once with encode_raw_headers — empties one bucket:
// exactly capacity requests pass in total, remaining counts down across replicas, then both deny.
func TestReplicasShareOneBucket(t *testing.T) {
	rs := redistest.Start(t)
	const capacity = 5
	cfg := configYAML(rs.Addr, "allow", "50ms", capacity, "1/3600", 2)
	a := startReplica(t, "replica-a", cfg, secretEnv)
	b := startReplica(t, "replica-b", cfg, secretEnv)

	// Both fixtures carry x-api-key k_live_3f9a2c7d: one in the headers map, one in header_map.
	plain := fixture(t, "checkrequest-get-apikey.json")
	raw := fixture(t, "checkrequest-raw-header-map-h2-tls.json")
	if raw.GetAttributes().GetRequest().GetHttp().GetHeaders() != nil {
		t.Fatal("the raw fixture should carry its headers in header_map only")
	}
	replicas := []*replica{a, b}
	reqs := []*authv3.CheckRequest{plain, raw}

	allowed := 0
	for i := 0; i < capacity+4; i++ {
		r, req := replicas[i%2], reqs[i%2]
		resp, _, err := r.check(req, 2*time.Second)
		if err != nil {
			t.Fatalf("request %d to %s: %v", i+1, r.name, err)
		}
		ans := readAnswer(t, resp)
		if i < capacity {
			want := strconv.Itoa(capacity - 1 - i)
			if !ans.allowed || ans.headers["ratelimit-limit"] != strconv.Itoa(capacity) || ans.headers["ratelimit-remaining"] != want ||
				ans.headers["ratelimit-reset"] == "" || !strings.HasPrefix(ans.headers["ratelimit-policy"], `"per-caller";q=5;`) {
				t.Fatalf("request %d to %s: %v; want allowed with ratelimit-remaining %s (one bucket across replicas)", i+1, r.name, ans, want)
			}
			if _, degraded := ans.headers["x-ratelimit-degraded"]; degraded {
				t.Fatalf("request %d: degraded with Redis up: %v", i+1, ans)
			}
			allowed++
			continue
		}
		body := expectDenied(t, fmt.Sprintf("request %d to %s", i+1, r.name), ans)
		if body.Policy != "per-caller" || body.Degraded || ans.headers["ratelimit-remaining"] != "0" {
			t.Fatalf("request %d to %s: %v", i+1, r.name, ans)
		}
	}
	if allowed != capacity {
		t.Fatalf("%d allowed in total, want exactly %d", allowed, capacity)
	}

	// Another caller — no API key, the client address from a two-proxy X-Forwarded-For chain with
	// trusted_hops 2 — has a full bucket of its own, on either replica.
	other := fixture(t, "checkrequest-xff-two-proxies.json")
	for i, r := range replicas {
		resp, _, err := r.check(other, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ans := readAnswer(t, resp)
		if want := strconv.Itoa(capacity - 1 - i); !ans.allowed || ans.headers["ratelimit-remaining"] != want {
			t.Fatalf("other caller on %s: %v, want allowed with remaining %s", r.name, ans, want)
		}
	}

	// The buckets are in Redis under the configured prefix, and identities are hashed: the API
	// key never appears in a key.
	keys, err := rs.Client().Keys(context.Background(), "e2e:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("redis holds keys %v, want two buckets under e2e:", keys)
	}
	for _, k := range keys {
		if strings.Contains(k, "k_live") || strings.Contains(k, "198.51.100.23") {
			t.Fatalf("redis key %q holds an identity in the clear", k)
		}
	}
}

// TestReplicasShareRLSBuckets: the rate limit service (Envoy's envoy.filters.http.ratelimit
// calls ShouldRateLimit) on two replicas and one Redis, over real gRPC. A burst spent through
// replica 1 is over the limit through replica 2, and a denied request takes nothing; another API
// key has its own full bucket; descriptor values never appear in Redis keys.
func TestReplicasShareRLSBuckets(t *testing.T) {
	rs := redistest.Start(t)
	const limit = 5
	// envoyproxy/ratelimit's format: 5 an hour per API key (a refill every 12 minutes, none
	// during the test).
	limits := filepath.Join(t.TempDir(), "ratelimit.yaml")
	if err := os.WriteFile(limits, []byte(fmt.Sprintf(`domain: e2e
descriptors:
  - key: api_key
    rate_limit:
      name: per-key
      unit: hour
      requests_per_unit: %d
`, limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := configYAML(rs.Addr, "allow", "50ms", 1000, "1000", 0) + "rls:\n  config: " + strconv.Quote(limits) + "\n"
	replicas := []*replica{startReplica(t, "replica-1", cfg, secretEnv), startReplica(t, "replica-2", cfg, secretEnv)}
	clients := make([]rlsv3.RateLimitServiceClient, len(replicas))
	for i, r := range replicas {
		conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	// What Envoy's filter sends for a route with one action, request_headers x-api-key -> api_key.
	ask := func(i int, apiKey string) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := clients[i].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "e2e", Descriptors: []*commonrlv3.RateLimitDescriptor{{
			Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: apiKey}},
		}}})
		if err != nil {
			t.Fatalf("%s, key %s: %v", replicas[i].name, apiKey, err)
		}
		if len(resp.GetStatuses()) != 1 || resp.GetStatuses()[0].GetCode() != resp.GetOverallCode() ||
			resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != limit || resp.GetStatuses()[0].GetCurrentLimit().GetName() != "per-key" {
			t.Fatalf("%s, key %s: %v; want one status with the per-key limit", replicas[i].name, apiKey, resp)
		}
		return resp
	}
	const key = "rls-key-k_live_7d1e"
	for n := 0; n < limit; n++ {
		resp := ask(0, key)
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != uint32(limit-1-n) {
			t.Fatalf("request %d through replica 1: %v; want OK with %d remaining", n+1, resp, limit-1-n)
		}
	}
	// Replica 2 sees the bucket replica 1 emptied, and its denial takes nothing: replica 1 is
	// still over the limit, not further below it.
	for _, i := range []int{1, 1, 0} {
		resp := ask(i, key)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().AsDuration() <= 0 {
			t.Fatalf("through %s after the burst: %v; want OVER_LIMIT, 0 remaining, a positive duration_until_reset", replicas[i].name, resp)
		}
		if d := st.GetDurationUntilReset().AsDuration(); d > time.Hour/limit+time.Second {
			t.Fatalf("through %s: duration_until_reset %v, want at most one token's refill (%v): a denied request took a token", replicas[i].name, d, time.Hour/limit)
		}
	}
	// Another key: a full bucket of its own, counted across the replicas too.
	for i := range replicas {
		if resp := ask(i, "rls-key-other"); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != uint32(limit-1-i) {
			t.Fatalf("another key through %s: %v; want OK with %d remaining", replicas[i].name, resp, limit-1-i)
		}
	}
	keys, err := rs.Client().Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("redis holds keys %v, want the two API keys' buckets", keys)
	}
	for _, k := range keys {
		if strings.Contains(k, "rls-key") {
			t.Fatalf("redis key %q holds a descriptor value in the clear", k)
		}
	}
}

// TestRedisFailureModes: with Redis hung (SIGSTOP) and then gone (SIGKILL), each replica answers
// by its store.on_failure — allow: allowed with x-ratelimit-degraded; deny: 429 marked degraded —
// within a bounded time and never with a gRPC error; when Redis is back, decisions are normal
// again.
func TestRedisFailureModes(t *testing.T) {
	for _, mode := range []string{"allow", "deny"} {
		t.Run(mode, func(t *testing.T) {
			rs := redistest.Start(t)
			cfg := configYAML(rs.Addr, mode, "50ms", 1000, "100", 0)
			replicas := []*replica{
				startReplica(t, mode+"-a", cfg, secretEnv),
				startReplica(t, mode+"-b", cfg, secretEnv),
			}
			req := withHeader(fixture(t, "checkrequest-get-apikey.json"), "x-api-key", "failure-"+mode)

			// classify sends one Check and says whether Floodgate decided normally or degraded. A
			// gRPC error or an answer that is neither fails the test.
			classify := func(r *replica) (degraded bool, took time.Duration) {
				t.Helper()
				resp, took, err := r.check(req, 3*time.Second)
				if err != nil {
					t.Fatalf("%s: gRPC error %v: Floodgate must always answer", r.name, err)
				}
				ans := readAnswer(t, resp)
				if ans.headers["x-ratelimit-degraded"] == "" {
					if !ans.allowed || ans.headers["ratelimit-limit"] != "1000" {
						t.Fatalf("%s: %v, want a normal allowed decision", r.name, ans)
					}
					return false, took
				}
				switch mode {
				case "allow":
					if !ans.allowed || ans.headers["x-ratelimit-degraded"] != "true" {
						t.Fatalf("%s (on_failure allow): %v", r.name, ans)
					}
				case "deny":
					body := expectDenied(t, r.name+" (on_failure deny)", ans)
					if !body.Degraded || ans.headers["x-ratelimit-degraded"] != "true" || body.RetryAfter != 1 {
						t.Fatalf("%s (on_failure deny): %v", r.name, ans)
					}
				}
				return true, took
			}
			// phase: every replica reaches the wanted state within the bound, then stays in it
			// for 5 more Checks, the slowest of which is reported.
			phase := func(what string, degraded bool, within time.Duration) time.Duration {
				t.Helper()
				var slowest time.Duration
				for _, r := range replicas {
					eventually(t, within, r.name+": "+what, func() (bool, string) {
						d, took := classify(r)
						return d == degraded, fmt.Sprintf("degraded=%v after %v", d, took)
					})
					var times []time.Duration
					for i := 0; i < 5; i++ {
						d, took := classify(r)
						if d != degraded {
							t.Fatalf("%s: %s: flipped back (degraded=%v)", r.name, what, d)
						}
						times = append(times, took)
					}
					slices.Sort(times)
					slowest = max(slowest, times[len(times)-1])
					// Envoy's ext_authz timeout in envoy/envoy.yaml is 0.25s: Floodgate's own answer
					// must come first (the median, so one scheduling hiccup cannot fail the test).
					if median := times[len(times)/2]; median >= 250*time.Millisecond {
						t.Fatalf("%s: %s: median Check took %v, not under Envoy's 0.25s timeout", r.name, what, median)
					}
				}
				t.Logf("%s: slowest Check %v", what, slowest)
				return slowest
			}

			phase("Redis up: normal decisions", false, 5*time.Second)
			rs.Pause()
			if slowest := phase("Redis hung: "+mode, true, 5*time.Second); slowest > 2*time.Second {
				t.Fatalf("a Check with Redis hung took %v: the store timeout (50ms) does not bound it", slowest)
			}
			rs.Resume()
			phase("Redis resumed: normal decisions", false, 5*time.Second)
			rs.Kill()
			phase("Redis gone: "+mode, true, 5*time.Second)
			rs.Restart()
			phase("Redis restarted empty: normal decisions", false, 10*time.Second)
		})
	}
}

// TestSIGTERMDrains: Checks are held in flight inside Redis (CLIENT PAUSE WRITE blocks the
// token-bucket script); SIGTERM then flips /readyz to 503 while the process waits for them; when
// Redis answers, every in-flight Check gets a real decision, and the process exits 0 and closes
// its port.
func TestSIGTERMDrains(t *testing.T) {
	rs := redistest.Start(t)
	const capacity, inFlight = 3, 6
	// One Redis connection per decision (pipeline: false), so that CLIENT LIST below sees every
	// Check blocked in Redis; pipelined (the default), they share connections and wait behind them.
	cfg := strings.Replace(configYAML(rs.Addr, "allow", "5s", capacity, "1/3600", 0),
		"    prefix: \"e2e:\"\n", "    prefix: \"e2e:\"\n    pipeline: false\n", 1)
	r := startReplica(t, "draining", cfg, secretEnv)
	rc := rs.Client()
	ctx := context.Background()

	// Warm up (loads the script) with another caller, then hold Redis' writes.
	base := fixture(t, "checkrequest-get-apikey.json")
	if resp, _, err := r.check(withHeader(base, "x-api-key", "warm-up"), 2*time.Second); err != nil || resp.GetStatus().GetCode() != 0 {
		t.Fatalf("warm-up: %v %v", resp, err)
	}
	if err := rc.Do(ctx, "CLIENT", "PAUSE", "20000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Do(context.Background(), "CLIENT", "UNPAUSE") })

	type result struct {
		resp *authv3.CheckResponse
		err  error
	}
	results := make(chan result, inFlight)
	req := withHeader(base, "x-api-key", "drain")
	for i := 0; i < inFlight; i++ {
		go func() {
			resp, _, err := r.check(req, 15*time.Second)
			results <- result{resp, err}
		}()
	}
	// Every Check is inside Floodgate, waiting on Redis.
	eventually(t, 5*time.Second, "Checks blocked in Redis", func() (bool, string) {
		list, err := rc.ClientList(ctx).Result()
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " flags=b ") && (strings.Contains(line, " cmd=evalsha ") || strings.Contains(line, " cmd=eval ")) {
				n++
			}
		}
		return n == inFlight, fmt.Sprintf("%d blocked", n)
	})

	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: time.Second}
	eventually(t, 3*time.Second, "/readyz answers 503 while draining", func() (bool, string) {
		resp, err := hc.Get("http://" + r.admin + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable, resp.Status
	})
	select {
	case <-r.exited:
		t.Fatalf("exited (%d) with %d Checks in flight", r.code, inFlight)
	default:
	}

	if err := rc.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	allowed, denied := 0, 0
	timeout := time.After(5 * time.Second)
	for i := 0; i < inFlight; i++ {
		select {
		case res := <-results:
			if res.err != nil {
				t.Fatalf("in-flight Check %d: %v: a drain must answer every Check in flight", i+1, res.err)
			}
			ans := readAnswer(t, res.resp)
			if ans.headers["x-ratelimit-degraded"] != "" {
				t.Fatalf("in-flight Check %d answered by the failure mode: %v", i+1, ans)
			}
			if ans.allowed {
				allowed++
			} else {
				expectDenied(t, fmt.Sprintf("in-flight Check %d", i+1), ans)
				denied++
			}
		case <-timeout:
			t.Fatalf("only %d of %d in-flight Checks answered within 5s", i, inFlight)
		}
	}
	if allowed != capacity || denied != inFlight-capacity {
		t.Fatalf("in flight: %d allowed, %d denied; want %d and %d", allowed, denied, capacity, inFlight-capacity)
	}

	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("still running 5s after its last Check was answered")
	}
	if r.code != 0 {
		t.Fatalf("exit code %d, want 0", r.code)
	}
	if !r.out.hasMsg("draining") || !r.out.hasMsg("stopped") {
		t.Fatalf("no draining/stopped log lines:\n%s", r.out)
	}
	for _, addr := range []string{r.grpc, r.admin} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s still accepts connections after exit", addr)
		}
	}
}
