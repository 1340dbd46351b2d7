package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestALargeCheckFloodLeavesOrdinaryChecksExact: an attacker's 1,000
// concurrent streams of 4 MiB Checks, on the connection ordinary Checks
// share (as one Envoy sends both), against floodgate on Redis with the
// Go memory limit it sets itself in the shipped Deployment's 256 Mi
// container. Ordinary Checks keep being decided exactly (one caller of
// capacity 100: exactly 100 allowed, the rest denied, none answered by the
// failure mode, no RPC error); the large ones wait for the budget of
// request bytes in flight or are answered unread by store.on_failure
// (allow: marked degraded), each counted in
// floodgate_requests_unread_total; and peak RSS (VmHWM) stays 16 MiB or
// more below the container's limit. With the memory limit at 0.9 of the
// container's and a budget blind to the streams' windows, it peaked at 247
// to 255 MiB here: within a page or two of the OOM killer.
func TestALargeCheckFloodLeavesOrdinaryChecksExact(t *testing.T) {
	const container = 256 << 20
	ratio := config.DefaultMemoryLimitRatio
	goLimit, _ := containerGoLimit(container, ratio)
	t.Setenv("GOMEMLIMIT", fmt.Sprint(goLimit))
	srv := redistest.Start(t)
	p := startFloodgate(t, fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", admin: "127.0.0.1:0"}
store: {backend: redis, redis: {addresses: ["%s"]}, over_limit_cache: {max_entries: 0}}
policies:
  - {name: api, key: [header:x-api-key], capacity: 100, refill_per_second: 1/3600}
`, srv.Addr))
	const (
		streams  = 1000
		size     = 4 << 20
		ordinary = 300
		margin   = 16 << 20
		bound    = 20 * time.Second // the flood ends with the ordinary Checks, or at this
	)
	big := marshal(t, request(t, "/upload", "203.0.113.7", "x-api-key: attacker", "x-filler: "+strings.Repeat("f", size)))
	conn := passthroughConn(t, p.GRPC)
	check := func(ctx context.Context, raw marshalled) (*authv3.CheckResponse, error) {
		var resp authv3.CheckResponse
		err := conn.Invoke(ctx, "/envoy.service.auth.v3.Authorization/Check", raw, &resp)
		return &resp, err
	}

	flood, stop := context.WithTimeout(context.Background(), bound)
	defer stop()
	var wg sync.WaitGroup
	var sent, unread atomic.Int64
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for flood.Err() == nil {
				ctx, cancel := context.WithTimeout(flood, time.Second)
				resp, err := check(ctx, big)
				cancel()
				if err == nil {
					sent.Add(1)
					if hdr(resp, "x-ratelimit-degraded") == "true" {
						unread.Add(1)
					}
				}
			}
		}()
	}
	// Ordinary Checks start once the flood has filled the streams.
	redistest.Eventually(t, 10*time.Second, "the flood's first answers", func() error {
		if n := sent.Load(); n < streams {
			return fmt.Errorf("%d answered", n)
		}
		return nil
	})

	small := marshal(t, request(t, "/x", "203.0.113.8", "x-api-key: ordinary"))
	var allowed, denied, degraded int
	var worst time.Duration
	for i := range ordinary {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		resp, err := check(ctx, small)
		cancel()
		worst = max(worst, time.Since(start))
		switch {
		case err != nil:
			t.Fatalf("ordinary Check %d during the flood: RPC error %v (Envoy would apply its own failure mode)", i, err)
		case hdr(resp, "x-ratelimit-degraded") == "true":
			degraded++
		case isAllowed(resp):
			allowed++
		default:
			denied++
		}
	}
	stop()
	wg.Wait()
	peak := procStatus(t, p.Cmd.Process.Pid, "VmHWM")
	t.Logf("flood of %d streams of %d MiB: %d answered, %d of them unread (by the failure mode); ordinary: %d allowed, %d denied, %d degraded, slowest %v; VmHWM %d MiB (Go memory limit %d MiB, container %d MiB)",
		streams, size>>20, sent.Load(), unread.Load(), allowed, denied, degraded, worst.Round(time.Millisecond), peak>>20, goLimit>>20, container>>20)
	if allowed != 100 || denied != ordinary-100 || degraded != 0 {
		t.Errorf("ordinary Checks: %d allowed, %d denied, %d degraded; want exactly 100 allowed, %d denied, none degraded", allowed, denied, degraded, ordinary-100)
	}
	if peak > container-margin {
		t.Errorf("peak RSS %d MiB, want at most %d MiB (the container's %d MiB less %d MiB)", peak>>20, (container-margin)>>20, container>>20, margin>>20)
	}
	if unread.Load() == 0 {
		t.Error("no large Check was answered unread: the flood did not reach the budget, so the test shows nothing")
	}
	metrics := scrape(t, "http://"+p.Admin+"/metrics")
	counted := metricValue(t, metrics, `floodgate_requests_unread_total{method="/envoy.service.auth.v3.Authorization/Check"}`)
	if counted < float64(unread.Load()) {
		t.Errorf("floodgate_requests_unread_total %v, below the %d answers marked degraded that the client read", counted, unread.Load())
	}
}
