package rls

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// ratelimitBinary builds envoyproxy/ratelimit's server (service_cmd) at the
// version these tests read the configurations of, with go install through
// the Go module proxy (the build cache makes later runs quick).
func ratelimitBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("FLOODGATE_RATELIMIT_BIN"); bin != "" {
		return bin
	}
	dir := filepath.Join(os.TempDir(), "floodgate-ratelimit-"+ratelimitVersion())
	bin := filepath.Join(dir, "service_cmd")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("go", "install", "github.com/envoyproxy/ratelimit/src/service_cmd@"+ratelimitVersion())
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building envoyproxy/ratelimit (go install, needs the Go module proxy once): %v\n%s", err, out)
	}
	return bin
}

func ratelimitVersion() string {
	_, v, _ := strings.Cut(ratelimitModule, "@")
	return v
}

// startRatelimit runs envoyproxy/ratelimit on redisAddr with config as its
// only configuration file, every listener on 127.0.0.1, statsd off, and
// waits until it answers with the configuration loaded.
func startRatelimit(t *testing.T, redisAddr, config string) rlsv3.RateLimitServiceClient {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "config.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ports := [3]int{redistest.FreePort(t), redistest.FreePort(t), redistest.FreePort(t)}
	cmd := exec.Command(ratelimitBinary(t))
	cmd.Env = append(os.Environ(),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[0]),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
	)
	log, err := os.Create(filepath.Join(root, "ratelimit.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
	c := client(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "probe", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}})
		cancel()
		if err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK {
			return c
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("envoyproxy/ratelimit did not answer within 30s: %v %v\n%s", resp, err, out)
		}
		time.Sleep(50 * time.Millisecond) // polling a process we do not control: no event to wait on
	}
}

func client(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// windowUnit picks the unit, hour or day, whose next fixed window boundary
// (ratelimit's windows are aligned to the epoch) is more than two minutes
// away, so that a sequence compared within one window stays within it.
func windowUnit() (string, time.Duration) {
	now := time.Now()
	if time.Until(now.Truncate(time.Hour).Add(time.Hour)) > 2*time.Minute {
		return "hour", time.Hour
	}
	return "day", 24 * time.Hour
}

// TestSameAnswersAsEnvoyproxyRatelimit sends the same sequences of requests
// to envoyproxy/ratelimit and to Floodgate's service, both on one real
// redis-server with the same YAML, and requires the same overall code,
// per-descriptor codes and limit_remaining within one window. Where a
// token bucket must differ from ratelimit's fixed window, the case says
// what differs and checks that.
func TestSameAnswersAsEnvoyproxyRatelimit(t *testing.T) {
	redis := redistest.Start(t)
	unit, _ := windowUnit()
	yaml := fmt.Sprintf(`domain: diff
descriptors:
  - key: remote_address
    rate_limit: {unit: %[1]s, requests_per_unit: 4}
  - key: api_key
    value: vip*
    rate_limit: {unit: %[1]s, requests_per_unit: 6}
  - key: api_key
    rate_limit: {unit: %[1]s, requests_per_unit: 3}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: %[1]s, requests_per_unit: 2}
`, unit)
	upstream := startRatelimit(t, redis.Addr, yaml)
	cfg := mustConfig(t, yaml)
	store := redisstore.New(redis.Client(), "fg:")
	ours := serve(t, NewService(cfg, ServiceOptions{Hash: plainHash, Store: store}))

	type answer struct {
		code      rlsv3.RateLimitResponse_Code
		codes     []rlsv3.RateLimitResponse_Code
		remaining []uint32
	}
	askBoth := func(ds ...*rlcommon.RateLimitDescriptor) (up, fg answer) {
		t.Helper()
		for i, c := range []rlsv3.RateLimitServiceClient{upstream, ours} {
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "diff", Descriptors: ds})
			if err != nil {
				t.Fatalf("server %d: %v", i, err)
			}
			a := answer{code: resp.OverallCode}
			for _, s := range resp.Statuses {
				a.codes = append(a.codes, s.Code)
				a.remaining = append(a.remaining, s.LimitRemaining)
			}
			if i == 0 {
				up = a
			} else {
				fg = a
			}
		}
		return up, fg
	}
	same := func(what string, up, fg answer) {
		t.Helper()
		if fmt.Sprint(up) != fmt.Sprint(fg) {
			t.Errorf("%s: envoyproxy/ratelimit %v, Floodgate %v", what, up, fg)
		}
	}

	// A burst up to the limit and past it, one descriptor.
	for i := 1; i <= 5; i++ {
		up, fg := askBoth(desc("remote_address", "10.0.0.1"))
		same(fmt.Sprintf("address, request %d", i), up, fg)
	}
	// Wildcard before key-only; exact nested; an unknown key; an unknown
	// depth (more entries than the tree has).
	for i := 1; i <= 7; i++ {
		up, fg := askBoth(desc("api_key", "vip-123"))
		same(fmt.Sprintf("wildcard, request %d", i), up, fg)
	}
	for i := 1; i <= 4; i++ {
		up, fg := askBoth(desc("api_key", "plain"))
		same(fmt.Sprintf("key only, request %d", i), up, fg)
	}
	for i := 1; i <= 3; i++ {
		up, fg := askBoth(desc("tenant", "acme", "user", "u1"))
		same(fmt.Sprintf("nested, request %d", i), up, fg)
	}
	up, fg := askBoth(desc("nothing", "x"), desc("tenant", "acme"), desc("api_key", "vip-9", "extra", "e"))
	same("no limit at these depths", up, fg)
	// An unknown domain: everything OK.
	for i, c := range []rlsv3.RateLimitServiceClient{upstream, ours} {
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "elsewhere", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "1")}})
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("server %d, unknown domain: %v %v", i, resp, err)
		}
	}

	// Where they must differ: several descriptors, one over its limit. Both
	// deny; ratelimit counts the request against every descriptor anyway,
	// Floodgate's all-or-nothing decision takes nothing from any bucket.
	for i := 1; i <= 2; i++ {
		askBoth(desc("api_key", "k-multi")) // 1 of 3 left after these two
	}
	for i := 1; i <= 4; i++ {
		askBoth(desc("remote_address", "10.0.0.2")) // the address spent
	}
	up, fg = askBoth(desc("api_key", "k-multi"), desc("remote_address", "10.0.0.2"))
	if up.code != rlsv3.RateLimitResponse_OVER_LIMIT || fg.code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a request over one of two limits: ratelimit %v, Floodgate %v; want both over", up, fg)
	}
	if up.remaining[0] != 0 || fg.remaining[0] != 1 {
		t.Errorf("the other descriptor after a denial: ratelimit %d left (it counted the denied request), Floodgate %d (it took nothing); want 0 and 1", up.remaining[0], fg.remaining[0])
	}
}

// TestChargesAndLongQuotasCountInBoth runs what a token budget and a
// quota by the month send (envoyproxy/ratelimit src/utils/utilities.go,
// GetHitsAddends: a descriptor's own hits_addend, 0 to check) against
// envoyproxy/ratelimit and Floodgate on one redis-server, and requires the
// same codes and limit_remaining: a 1001-a-month quota counts in both; a
// charge larger than what is left is over the limit in both, and so is
// every check after it; five rounds of "check with cost 0, then charge
// 150" on 100 a minute pass the first check only, in both.
func TestChargesAndLongQuotasCountInBoth(t *testing.T) {
	// ratelimit's windows are aligned to the epoch: keep clear of the end
	// of this minute and of this 30-day month (its MONTH; a 365-day year
	// instead in the two minutes before a month ends), so that each
	// sequence runs in one window. Waiting out the last seconds of a
	// minute is waiting for ratelimit's own clock, which cannot be
	// injected.
	quotaUnit := "month"
	if until := time.Until(time.Now().Truncate(30 * 24 * time.Hour).Add(30 * 24 * time.Hour)); until < 2*time.Minute {
		quotaUnit = "year"
	}
	redis := redistest.Start(t)
	yaml := fmt.Sprintf(`domain: budget
descriptors:
  - key: tenant
    rate_limit: {unit: %s, requests_per_unit: 1001}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
`, quotaUnit)
	upstream := startRatelimit(t, redis.Addr, yaml)
	ours := serve(t, NewService(mustConfig(t, yaml), ServiceOptions{Hash: plainHash, Store: redisstore.New(redis.Client(), "fg:")}))
	askBoth := func(req *rlsv3.RateLimitRequest) (up, fg string) {
		t.Helper()
		for i, c := range []rlsv3.RateLimitServiceClient{upstream, ours} {
			resp, err := c.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatalf("server %d: %v", i, err)
			}
			a := resp.OverallCode.String()
			for _, s := range resp.Statuses {
				a += fmt.Sprintf(" %s/%d", s.Code, s.LimitRemaining)
			}
			if i == 0 {
				up = a
			} else {
				fg = a
			}
		}
		return up, fg
	}
	same := func(what string, want string, req *rlsv3.RateLimitRequest) {
		t.Helper()
		up, fg := askBoth(req)
		if up != fg || up != want {
			t.Errorf("%s: envoyproxy/ratelimit %q, Floodgate %q, want %q", what, up, fg, want)
		}
	}
	one := func(d *rlcommon.RateLimitDescriptor, hits uint32) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "budget", HitsAddend: hits, Descriptors: []*rlcommon.RateLimitDescriptor{d}}
	}

	same("1001 a month, the first request", "OK OK/1000", one(desc("tenant", "t1"), 0))
	same("1001 a month, the other 1000 at once", "OK OK/0", one(desc("tenant", "t1"), 1000))
	same("1001 a month, past it", "OVER_LIMIT OVER_LIMIT/0", one(desc("tenant", "t1"), 0))

	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 5*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	same("a charge of 150 of 100", "OVER_LIMIT OVER_LIMIT/0", one(withHits(desc("user", "u1"), 150, false), 0))
	same("a check after it", "OVER_LIMIT OVER_LIMIT/0", one(withHits(desc("user", "u1"), 0, false), 0))
	same("a request after it", "OVER_LIMIT OVER_LIMIT/0", one(desc("user", "u1"), 0))
	for round := 1; round <= 5; round++ {
		want := "OVER_LIMIT OVER_LIMIT/0"
		if round == 1 {
			want = "OK OK/100"
		}
		same(fmt.Sprintf("round %d, the check", round), want, one(withHits(desc("user", "u2"), 0, false), 0))
		same(fmt.Sprintf("round %d, the charge of 150", round), "OVER_LIMIT OVER_LIMIT/0", one(withHits(desc("user", "u2"), 150, false), 0))
	}
}
