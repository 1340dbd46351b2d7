package resilient_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/resilient"
)

// The whole decision path under Redis faults (extauthz over gRPC, the
// resilient store, the pipelined Redis store) is tested where the pieces
// are wired together: cmd/floodgate/faults_test.go.

const storeTimeout = 50 * time.Millisecond

func TestTheBreakerStopsCallingADeadRedisAndProbesIt(t *testing.T) {
	srv := redistest.Start(t)
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout, DialTimeout: 250 * time.Millisecond})
	defer rc.Close()
	var calls int
	rc.AddHook(callCounter{&calls})
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	var changes []bool
	rs, _ := resilient.New(redisstore.New(rc, ""), resilient.Options{
		Timeout: storeTimeout, Clock: clock, Breaker: resilient.BreakerOptions{Failures: 3, OpenFor: time.Second},
		OnExactChange: func(exact bool) { changes = append(changes, exact) },
	})
	take := func() error {
		res := make([]limiter.Result, 1)
		_, err := rs.Take(context.Background(), []limiter.Request{{Name: "b", ID: "x", Limit: limiter.MustLimit(5, "1"), Cost: 1}}, res)
		return err
	}
	if err := take(); err != nil || !rs.Exact() {
		t.Fatalf("healthy: %v", err)
	}
	srv.Kill()
	for i := 0; i < 3; i++ {
		if err := take(); err == nil {
			t.Fatal("a dead Redis decided")
		}
	}
	if rs.Exact() || rs.Breaker().State() != resilient.Open {
		t.Fatalf("after 3 failures the breaker is %v", rs.Breaker().State())
	}
	n := calls
	for i := 0; i < 50; i++ {
		take()
	}
	if calls != n {
		t.Errorf("an open breaker let %d calls reach Redis", calls-n)
	}
	clock.Advance(time.Second) // half-open: one probe; Redis is still dead
	take()
	if calls != n+1 || rs.Breaker().State() != resilient.Open {
		t.Errorf("probe: %d calls, state %v", calls-n, rs.Breaker().State())
	}
	srv.Restart()
	clock.Advance(time.Second)
	var err error
	for i := 0; i < 5; i++ { // pooled connections to the dead process fail first
		if err = take(); err == nil {
			break
		}
		clock.Advance(time.Second)
	}
	if err != nil || !rs.Exact() {
		t.Fatalf("after Redis returned: %v, state %v", err, rs.Breaker().State())
	}
	if len(changes) < 2 || changes[0] != false || changes[len(changes)-1] != true {
		t.Errorf("exact changes %v, want degraded then exact", changes)
	}
}

// TestOverLimitDenialsSkipRedis counts EVALSHA calls in Redis itself: once a
// bucket is empty, a flood of requests inside its Retry-After costs Redis
// nothing, and the first request after it reaches Redis again.
func TestOverLimitDenialsSkipRedis(t *testing.T) {
	srv := redistest.Start(t)
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout, DialTimeout: 250 * time.Millisecond})
	defer rc.Close()
	clock := limiter.NewManualClock(time.Now())
	rs, _ := resilient.New(redisstore.New(rc, ""), resilient.Options{Timeout: storeTimeout, Breaker: serveBreaker, Clock: clock, OverLimitEntries: 10})
	req := []limiter.Request{{Name: "flood", ID: "x", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}}
	res := make([]limiter.Result, 1)
	for i := 0; i < 3; i++ {
		rs.Take(context.Background(), req, res)
	}
	if res[0].Allowed || res[0].RetryAfter < 59*time.Second {
		t.Fatalf("setup: %+v", res[0])
	}
	c := srv.Client()
	evalshas := func() int64 { return redistest.CommandStats(t, c)["evalsha"].Calls }
	before := evalshas()
	for i := 0; i < 500; i++ {
		clock.Advance(100 * time.Millisecond) // 50 s in all: still short of a token
		if ok, err := rs.Take(context.Background(), req, res); ok || err != nil {
			t.Fatalf("flood request %d: %v %v", i, ok, err)
		}
	}
	if n := evalshas() - before; n != 0 {
		t.Errorf("500 requests inside Retry-After cost Redis %d script calls, want 0", n)
	}
	clock.Advance(10 * time.Second) // past Retry-After: Redis decides again
	rs.Take(context.Background(), req, res)
	if n := evalshas() - before; n != 1 {
		t.Errorf("after Retry-After %d script calls, want 1", n)
	}
}
