package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/store"
)

// marshalled is a CheckRequest already in wire form, sent as it is by
// passthroughCodec: 16 concurrent sends of one 30 MiB request cost the
// test one copy, not sixteen.
type marshalled []byte

type passthroughCodec struct{}

func (passthroughCodec) Name() string { return "proto" }
func (passthroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(marshalled))}, nil
}
func (passthroughCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// passthroughConn is a gRPC connection to addr sending marshalled requests
// as they are; it closes when t ends.
func passthroughConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(passthroughCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// marshal is m in wire form, to send through a passthroughConn.
func marshal(t *testing.T, m proto.Message) marshalled {
	t.Helper()
	raw, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestConcurrentLargeChecksStayWithinTheRequestBytesBudget: 16 concurrent
// 30 MiB Checks over real gRPC, against a floodgate given 256 MiB
// (GOMEMLIMIT; the budget is then a sixth of it less one connection's
// stream windows, 32 MiB), must leave its peak RSS (VmHWM) within that: each is read
// only once its bytes fit in the budget, and one that does not fit within
// the wait is answered by the failure mode (allowed, marked degraded),
// never with an RPC error: an answer before the request has been sent in
// full, which Envoy's router takes as the answer (Filter::
// onUpstreamComplete, source/common/router/router.cc) as the gRPC client
// here does. Without the budget the process peaked at 1,206 MiB here, the
// memory limit notwithstanding, since all of it was live (32 such Checks:
// 2.45 GB); with it, at 115 MiB.
func TestConcurrentLargeChecksStayWithinTheRequestBytesBudget(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "256MiB")
	p := startFloodgate(t, `listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store: {backend: memory, memory: {max_buckets: 1024}}
policies:
  - {name: api, key: [client_ip], capacity: 1000, refill_per_second: 1000}
`)
	const (
		calls    = 16
		size     = 30 << 20
		peakMax  = 300 << 20
		deadline = 30 * time.Second
	)
	line, ok := p.LogLine("request bytes in flight")
	if !ok {
		t.Fatalf("no start-up line for the budget:\n%s", p.Output())
	}
	budget, _ := line["limit"].(float64)
	if budget < 30<<20 || budget > 34<<20 {
		t.Fatalf("budget %v bytes (%v), want a sixth of 256 MiB less one connection's stream windows", budget, line["limit_from"])
	}
	req := request(t, "/upload", "203.0.113.7", "x-filler: "+strings.Repeat("f", size))
	raw := marshal(t, req)
	conn := passthroughConn(t, p.GRPC)
	before := procStatus(t, p.Cmd.Process.Pid, "VmHWM")

	var wg sync.WaitGroup
	var mu sync.Mutex
	var decided, unread int
	var errs []error
	start := time.Now()
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			var resp authv3.CheckResponse
			err := conn.Invoke(ctx, "/envoy.service.auth.v3.Authorization/Check", marshalled(raw), &resp)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case !isAllowed(&resp):
				errs = append(errs, fmt.Errorf("denied: %v", resp.GetDeniedResponse()))
			case hdr(&resp, "x-ratelimit-degraded") == "true":
				unread++
			default:
				decided++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	peak := procStatus(t, p.Cmd.Process.Pid, "VmHWM")
	t.Logf("%d Checks of %d MiB in %v: %d decided, %d answered unread; VmHWM %d MiB before, %d MiB after",
		calls, size>>20, elapsed.Round(time.Millisecond), decided, unread, before>>20, peak>>20)
	for _, err := range errs {
		t.Errorf("a Check failed: %v", err)
	}
	if decided == 0 {
		t.Error("no Check was read and decided: the budget let nothing through")
	}
	if peak > peakMax {
		t.Errorf("peak RSS %d MiB, want at most %d MiB (%d Checks of %d MiB, %d MiB in flight at most)",
			peak>>20, peakMax>>20, calls, size>>20, int64(budget)>>20)
	}
	metrics := scrape(t, "http://"+p.Admin+"/metrics")
	for _, want := range []string{
		"floodgate_request_bytes_in_flight_limit " + strconv.FormatFloat(budget, 'g', -1, 64),
		"floodgate_request_bytes_in_flight 0",
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if unread > 0 && !strings.Contains(metrics, fmt.Sprintf(`floodgate_requests_unread_total{method="/envoy.service.auth.v3.Authorization/Check"} %d`, unread)) {
		t.Errorf("floodgate_requests_unread_total does not count the %d Checks answered unread", unread)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRequestBytesInFlightIsSizedFromTheMemoryLimit: the file's value wins;
// otherwise a sixth of the Go memory limit left after the in-memory buckets
// and one connection's stream windows (at least 16 MiB), and 48 MiB when
// there is no limit at all, not a share of the machine's memory.
func TestRequestBytesInFlightIsSizedFromTheMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name                    string
		set                     int
		limit, buckets, windows int64
		want                    int64
	}{
		{"set in the file", 100 * mib, 1 << 30, 0, 64 * mib, 100 * mib},
		{"no memory limit", 0, 1<<63 - 1, 0, 64 * mib, 48 * mib},
		{"the shipped Deployment: 208 MiB of 256 Mi, Redis, 1024 streams", 0, 208 * mib, 0, streamWindows(1024), 24 * mib},
		{"an 8 GiB container", 0, 8 << 30, 0, 64 * mib, (8<<30 - 64*mib) / 6},
		{"in-memory buckets: 64 MiB beside them", 0, 200*mib + 64*mib, 200 * mib, 0, 16 * mib},
		{"fewer streams, more budget", 0, 208 * mib, 0, streamWindows(64), 34 * mib},
	} {
		if got, from := requestBytesInFlight(tc.set, tc.limit, tc.buckets, tc.windows); got != tc.want || from == "" {
			t.Errorf("%s: %d (%s), want %d", tc.name, got, from, tc.want)
		}
	}
}

// TestTheRequestBytesBudgetFollowsGOMEMLIMIT: serve sizes the budget from
// the memory limit in force, here GOMEMLIMIT's, and says so at start.
func TestTheRequestBytesBudgetFollowsGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "240MiB")
	cfg := `listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store: {backend: memory, memory: {max_buckets: 1024}}
policies:
  - {name: api, key: [client_ip], capacity: 5, refill_per_second: 1}
`
	parsed, err := doors.Parse("floodgate.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := requestBytesInFlight(0, 240<<20, store.MemoryBytes(parsed.Config), streamWindows(parsed.Listen.MaxConcurrentStreams))
	if want == requestBytesUnlimited || want == requestBytesFloor {
		t.Fatalf("the case does not tell the memory limit's share (%d) from a fixed default", want)
	}
	p := startFloodgate(t, cfg)
	line, ok := p.LogLine("request bytes in flight")
	if !ok {
		t.Fatalf("no start-up line for the budget:\n%s", p.Output())
	}
	if got, _ := line["limit"].(float64); int64(got) != want {
		t.Errorf("budget %v (%v), want %d: a sixth of GOMEMLIMIT less the buckets", line["limit"], line["limit_from"], want)
	}
	if m := scrape(t, "http://"+p.Admin+"/metrics"); !strings.Contains(m, "floodgate_request_bytes_in_flight_limit "+strconv.FormatFloat(float64(want), 'g', -1, 64)+"\n") {
		t.Errorf("floodgate_request_bytes_in_flight_limit is not %d", want)
	}
}

// TestRateLimitRequestsThatFindNoRoomAreAnsweredByTheFailureMode: 32
// concurrent 900 KiB ShouldRateLimit calls, three rounds, against a budget
// of 1 MiB of request bytes in flight. Most wait for room and some wait past
// the gate's wait; those must be answered by the rate limit service's own
// failure mode (store.on_failure: allow here, so OK), never with an RPC
// error: Envoy's rate limit filter takes any error for a failure of the
// service and, with its shipped failure_mode_deny: false, lets the request
// through unlimited (Filter::complete, source/extensions/filters/http/
// ratelimit/ratelimit.cc: RateLimitStatus::Error).
func TestRateLimitRequestsThatFindNoRoomAreAnsweredByTheFailureMode(t *testing.T) {
	cfgPath, _ := rlsFloodgate(t, rlsLimits("1000000"), "")
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(data), "listen: {", "listen: {max_request_bytes_in_flight: 1048576, ", 1)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startCommand(t, "serve", "--config", cfgPath)
	const (
		calls  = 32
		rounds = 3
		size   = 900 << 10
	)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "api_key", Value: strings.Repeat("k", size)}}}}}
	raw := marshal(t, req)
	conn := passthroughConn(t, p.GRPC)
	var mu sync.Mutex
	var errs []error
	answered := 0
	for range rounds {
		var wg sync.WaitGroup
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var resp rlsv3.RateLimitResponse
				err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", marshalled(raw), &resp)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case resp.GetOverallCode() != rlsv3.RateLimitResponse_OK:
					errs = append(errs, fmt.Errorf("answered %v, want OK (a limit of a million a minute, or on_failure: allow)", resp.GetOverallCode()))
				default:
					answered++
				}
			}()
		}
		wg.Wait()
	}
	unread := 0
	for _, line := range strings.Split(scrape(t, "http://"+p.Admin+"/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, `floodgate_requests_unread_total{method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} `); ok {
			unread, _ = strconv.Atoi(v)
		}
	}
	t.Logf("%d of %d answered without an RPC error, %d of them unread", answered, calls*rounds, unread)
	for _, err := range errs {
		t.Errorf("a rate limit request: %v", err)
	}
}
