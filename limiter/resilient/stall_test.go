package resilient_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/resilient"
)

// TestOneStallDoesNotOpenTheBreaker: 16 callers decide through the
// pipelined store, as serve wires it, when Redis stalls once for 80ms
// (SIGSTOP, then SIGCONT). Every decision in flight times out at once, far
// more than the breaker's 5 failures; but they are one failure, not 16
// independent ones, and must not open the breaker and send everyone to
// the failure mode for its open_for. This is what a busy machine does to
// a store at start-up, when the first decisions pay for connections,
// script loads and a cold process.
func TestOneStallDoesNotOpenTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	client, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout, DialTimeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	store := redisstore.NewPipelined(client, "", servePipeline)
	defer store.Close()
	var mu sync.Mutex
	var changes []bool
	rs, err := resilient.New(store, resilient.Options{
		Timeout:       storeTimeout,
		Breaker:       serveBreaker,
		OnExactChange: func(exact bool) { mu.Lock(); changes = append(changes, exact); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.MustLimit(1_000_000, "1000")
	var timedOut, breakerOpen, decided atomic.Int64
	var stalled atomic.Bool // from the stall on: errors are its timeouts
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]limiter.Result, 1)
			for i := 0; i < 100_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := rs.Take(context.Background(), []limiter.Request{{Name: "p", ID: "x", Limit: l, Cost: 1}}, res)
				switch {
				case err == nil:
					decided.Add(1)
				case strings.Contains(err.Error(), "circuit breaker open"):
					breakerOpen.Add(1)
				case stalled.Load(): // a timeout, or a read cut short by one
					timedOut.Add(1)
				default:
					t.Errorf("before the stall: %v", err)
					return
				}
			}
		}()
	}
	for decided.Load() < 200 { // the callers are deciding
		time.Sleep(time.Millisecond)
	}
	stalled.Store(true)
	srv.Pause()
	time.Sleep(80 * time.Millisecond) // the stall's length, not a wait for anything
	srv.Resume()
	after := decided.Load()
	deadline := time.Now().Add(5 * time.Second)
	for decided.Load() < after+2000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d decisions timed out in the stall, %d answered by an open breaker, %d decided", timedOut.Load(), breakerOpen.Load(), decided.Load())
	if timedOut.Load() < 5 {
		t.Fatalf("only %d decisions timed out together: the test did not stall more than the breaker's 5 failures", timedOut.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 0 || breakerOpen.Load() != 0 {
		t.Errorf("one stall of 80ms opened the breaker: exact changes %v, %d decisions refused by it", changes, breakerOpen.Load())
	}
}
