package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestScriptLatencyIsObservedPerScriptCall: with a real redis-server, the
// store serve builds observes floodgate_redis_script_duration_seconds once
// per script call Redis ran (INFO commandstats' EVALSHA calls), pipelined
// or not, with a positive time.
func TestScriptLatencyIsObservedPerScriptCall(t *testing.T) {
	for _, pipeline := range []bool{true, false} {
		t.Run(fmt.Sprintf("pipeline=%v", pipeline), func(t *testing.T) {
			srv := redistest.Start(t)
			_, bs, reg := storeFrom(t, "metrics.yaml", fmt.Sprintf(`store:
  backend: redis
  redis: {addresses: [%q], pipeline: %v}
policies:
  - {name: p, match: {path_prefix: /}, key: [client_ip], capacity: 1000, refill_per_second: 1}
`, srv.Addr, pipeline))
			lim := limiter.MustLimit(1000, "1")
			take := func(id string) {
				reqs := []limiter.Request{{Name: "p", ID: id, Limit: lim, Cost: 1}}
				res := make([]limiter.Result, 1)
				if _, err := bs.Main.Take(context.Background(), reqs, res); err != nil {
					t.Error(err)
				}
			}
			take("warm") // the script cached: every call below is one EVALSHA
			// The resilience layer's start-up probe decides in the
			// background too: let every call Redis has run be observed
			// before counting from here.
			var count0, calls0 uint64
			for deadline := time.Now().Add(10 * time.Second); ; {
				count0, _ = scriptHistogram(t, reg)
				calls0 = scriptCalls(t, srv, "evalsha")
				if count0 == calls0+scriptCalls(t, srv, "eval") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d observations for the %d script calls Redis ran before the load", count0, calls0+scriptCalls(t, srv, "eval"))
				}
				runtime.Gosched()
			}
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 50 {
						take(fmt.Sprintf("c%d-%d", g, i))
					}
				}()
			}
			wg.Wait()
			count, sum := scriptHistogram(t, reg)
			calls := scriptCalls(t, srv, "evalsha") - calls0
			if got := count - count0; got != calls || calls == 0 {
				t.Errorf("%d observations for %d script calls Redis ran, want as many (and some)", got, calls)
			}
			if sum <= 0 {
				t.Errorf("observed %v s in all, want a positive time", sum)
			}
		})
	}
}

func scriptHistogram(t *testing.T, reg *prometheus.Registry) (count uint64, sum float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "floodgate_redis_script_duration_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatal("floodgate_redis_script_duration_seconds is not registered")
	return 0, 0
}

// scriptCalls is the calls of cmd (evalsha, eval) Redis has run
// successfully: a NOSCRIPT answer is a failed EVALSHA, which the store
// follows with an EVAL, one script call.
func scriptCalls(t *testing.T, srv *redistest.Server, cmd string) uint64 {
	t.Helper()
	s := redistest.CommandStats(t, srv.Client())[cmd]
	return uint64(s.Calls - s.Failed)
}
