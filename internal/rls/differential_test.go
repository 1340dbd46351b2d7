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
