package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter/memory"
)

// procStatus reads a field of /proc/PID/status in bytes (VmRSS, VmHWM).
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// flood sends n Checks over p's gRPC connection from workers goroutines,
// each request with an API key never sent before.
func flood(t *testing.T, p *proc, n, workers int) {
	t.Helper()
	base := request(t, "/x", "203.0.113.1", "x-api-key: k")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				req := withKey(base, "k"+strconv.Itoa(i))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := p.Client.Check(ctx, req)
				cancel()
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("Check during the flood: %v", firstErr)
	}
}

// withKey is base with its x-api-key header set to key.
func withKey(base *authv3.CheckRequest, key string) *authv3.CheckRequest {
	req := proto.Clone(base).(*authv3.CheckRequest)
	req.Attributes.Request.Http.Headers["x-api-key"] = key
	return req
}

// TestAKeyFloodStaysWithinTheMemoryLimit: a flood of distinct callers on
// the memory store (16 policies keyed by the API key, so 16 new buckets a
// Check, far more than max_buckets in all) leaves the process within the
// memory limit floodgate set for itself from memory.max_buckets, plus what
// the Go runtime does not count (the binary's code, say). Without that
// limit, GOGC let the heap grow to several times the live bucket tables:
// about 190 MiB here, for 32 MiB of tables.
func TestAKeyFloodStaysWithinTheMemoryLimit(t *testing.T) {
	for _, v := range []string{"GOMEMLIMIT", "GOGC"} { // the configuration decides, as in production
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	const maxBuckets, policies, checks = 1 << 19, 16, 40_000
	var b strings.Builder
	fmt.Fprintf(&b, "listen: {grpc: \"127.0.0.1:0\", admin: \"\"}\nstore: {backend: memory, memory: {max_buckets: %d}}\npolicies:\n", maxBuckets)
	for i := range policies {
		fmt.Fprintf(&b, "  - {name: p%d, key: [header:x-api-key], capacity: 5, refill_per_second: 1/3600}\n", i)
	}
	p := startFloodgate(t, b.String())
	gc := logLine(t, p, "garbage collector")
	limit, err := strconv.ParseInt(fmt.Sprint(gc["memory_limit"]), 10, 64)
	if err != nil {
		t.Fatalf("no memory limit set: %v", gc)
	}
	if cgroupMemoryLimit() == 0 {
		if want := memory.MaxTableBytes(store.MemoryOptions(config.Memory{MaxBuckets: maxBuckets})) + heapHeadroom; limit != want {
			t.Fatalf("memory limit %d, want the tables' bound + headroom, %d (%v)", limit, want, gc)
		}
	}
	flood(t, p, checks, 8)
	const uncounted = 24 << 20 // code, and memory the Go runtime does not manage
	hwm := procStatus(t, p.Cmd.Process.Pid, "VmHWM")
	t.Logf("%d Checks, %d new buckets each: peak RSS %d MiB, memory limit %d MiB", checks, policies, hwm>>20, limit>>20)
	if hwm > limit+uncounted {
		t.Errorf("peak RSS %d MiB, above the memory limit of %d MiB + %d MiB", hwm>>20, limit>>20, uncounted>>20)
	}
}
