package resilient_test

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/resilient"
)

const (
	storeTimeout = 50 * time.Millisecond
	// answerBound is how long any Check may take while Redis misbehaves:
	// the store timeout plus a margin for a loaded two-core machine.
	answerBound = 200 * time.Millisecond
	// resumeBound is how soon after Redis returns exact decisions resume.
	resumeBound = 1500 * time.Millisecond
)

type mode int

const (
	failOpen mode = iota
	failClosed
	failLocal
)

// faultRig is the whole decision path over a real gRPC connection: extauthz
// server → resilient store → go-redis → a real redis-server.
type faultRig struct {
	t      *testing.T
	redis  *redistest.Server
	client authv3.AuthorizationClient
	mode   mode
	source int
}

func newFaultRig(t *testing.T, m mode) *faultRig {
	t.Helper()
	srv := redistest.Start(t)
	rc, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	opts := resilient.Options{Timeout: storeTimeout, Breaker: resilient.BreakerOptions{Failures: 3, OpenFor: 200 * time.Millisecond}, OverLimitEntries: 1000}
	so := extauthz.ServerOptions{}
	switch m {
	case failClosed:
		so.OnError = extauthz.FailClosed
	case failLocal:
		opts.Fallback = memory.New(memory.Options{})
		opts.FallbackShare = 0.5
	}
	rs, err := resilient.New(redisstore.New(rc, ""), opts)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := extauthz.Compile([]extauthz.PolicySpec{{Name: "api", Key: []string{"client_ip"}, Capacity: 1000, RefillPerSecond: "1/3600"}}, extauthz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	so.ShadowStore = rs.Uncached()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, extauthz.NewServer(eng, rs, so))
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); rc.Close() })
	return &faultRig{t: t, redis: srv, client: authv3.NewAuthorizationClient(conn), mode: m}
}

type answer struct {
	allowed, degraded bool
	took              time.Duration
	remaining         string
}

// check sends one Check with Envoy's deadline and requires a normal answer.
func (r *faultRig) check() answer {
	r.t.Helper()
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "198.51.100.1"}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/x", Headers: map[string]string{":path": "/x"}}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	start := time.Now()
	resp, err := r.client.Check(ctx, req)
	took := time.Since(start)
	if err != nil {
		r.t.Fatalf("Check returned an RPC error after %v: %v", took, err)
	}
	a := answer{allowed: resp.GetStatus().GetCode() == 0, took: took}
	for _, h := range append(resp.GetOkResponse().GetResponseHeadersToAdd(), resp.GetDeniedResponse().GetHeaders()...) {
		switch h.GetHeader().GetKey() {
		case extauthz.HeaderDegraded:
			a.degraded = true
		case extauthz.HeaderRemaining:
			a.remaining = h.GetHeader().GetValue()
		}
	}
	return a
}

// duringFault sends n Checks while Redis misbehaves: each answers within
// the bound, degraded, by the configured failure mode.
func (r *faultRig) duringFault(n int) {
	r.t.Helper()
	var worst time.Duration
	for i := 0; i < n; i++ {
		a := r.check()
		worst = max(worst, a.took)
		if a.took > answerBound {
			r.t.Errorf("Check %d took %v during the fault, bound %v", i, a.took, answerBound)
		}
		if !a.degraded {
			r.t.Errorf("Check %d during the fault was not marked degraded", i)
		}
		switch r.mode {
		case failOpen, failLocal:
			if !a.allowed {
				r.t.Errorf("Check %d denied; failure mode allows (local has room)", i)
			}
		case failClosed:
			if a.allowed {
				r.t.Errorf("Check %d allowed; failure mode denies", i)
			}
		}
	}
	r.t.Logf("%d Checks during the fault, slowest %v", n, worst)
}

// resumes requires exact decisions again within resumeBound of Redis coming
// back, and returns the first exact answer.
func (r *faultRig) resumes(since time.Time) answer {
	r.t.Helper()
	for {
		a := r.check()
		if !a.degraded {
			r.t.Logf("exact again %v after Redis returned", time.Since(since).Round(time.Millisecond))
			return a
		}
		if time.Since(since) > resumeBound {
			r.t.Fatalf("still degraded %v after Redis returned", time.Since(since))
		}
		time.Sleep(20 * time.Millisecond) // pacing the probe requests, not synchronisation
	}
}

func goroutines() int { return runtime.NumGoroutine() }

// noLeak requires the goroutine count to come back to where it was.
func noLeak(t *testing.T, before int) {
	deadline := time.Now().Add(3 * time.Second)
	for goroutines() > before+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after the test, %d before:\n%s", goroutines(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRedisFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  mode
		fault func(r *faultRig) (restore func())
		keeps bool // the state survives the fault
	}{
		{"paused with SIGSTOP, local fallback", failLocal, func(r *faultRig) func() {
			r.redis.Pause()
			return r.redis.Resume
		}, true},
		{"killed, then restarted empty, fail open", failOpen, func(r *faultRig) func() {
			r.redis.Kill()
			return r.redis.Restart
		}, false},
		{"slowed by DEBUG SLEEP, fail closed", failClosed, func(r *faultRig) func() {
			c := r.redis.Client()
			done := make(chan struct{})
			go func() { c.Do(context.Background(), "DEBUG", "SLEEP", "1.5"); close(done) }()
			time.Sleep(50 * time.Millisecond) // let the sleep begin before the Checks
			return func() { <-done }
		}, true},
		{"paused with CLIENT PAUSE, fail open", failOpen, func(r *faultRig) func() {
			if err := r.redis.Client().Do(context.Background(), "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
				r.t.Fatal(err)
			}
			return func() { r.redis.Client().Do(context.Background(), "CLIENT", "UNPAUSE") }
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goroutines()
			t.Run("fault", func(t *testing.T) { // its cleanups run before the leak check
				r := newFaultRig(t, tc.mode)
				for i := 0; i < 3; i++ {
					if a := r.check(); !a.allowed || a.degraded {
						t.Fatalf("healthy Redis: %+v", a)
					}
				}
				restore := tc.fault(r)
				r.duringFault(15)
				restore()
				a := r.resumes(time.Now())
				// Exact limiting resumed on the shared bucket: 3 taken before the
				// fault and 1 now (commands that timed out may still have run
				// inside Redis and taken more); a restart starts afresh.
				left, _ := strconv.Atoi(a.remaining)
				if tc.keeps && (left > 996 || left < 900) {
					t.Errorf("after the fault remaining is %q: want the shared bucket's state, 996 or a little less", a.remaining)
				}
				if !tc.keeps && left != 999 {
					t.Errorf("after a restart remaining is %q, want a fresh bucket's 999", a.remaining)
				}
			})
			noLeak(t, before)
		})
	}
}

func TestAScriptCacheFlushIsNotAnOutage(t *testing.T) {
	r := newFaultRig(t, failClosed)
	r.check()
	if err := r.redis.Client().ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if a := r.check(); !a.allowed || a.degraded {
			t.Fatalf("after SCRIPT FLUSH: %+v", a)
		}
	}
}

func TestTheBreakerStopsCallingADeadRedisAndProbesIt(t *testing.T) {
	srv := redistest.Start(t)
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout})
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
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout})
	defer rc.Close()
	clock := limiter.NewManualClock(time.Now())
	rs, _ := resilient.New(redisstore.New(rc, ""), resilient.Options{Timeout: storeTimeout, Clock: clock, OverLimitEntries: 10})
	req := []limiter.Request{{Name: "flood", ID: "x", Limit: limiter.MustLimit(2, "1/60"), Cost: 1}}
	res := make([]limiter.Result, 1)
	for i := 0; i < 3; i++ {
		rs.Take(context.Background(), req, res)
	}
	if res[0].Allowed || res[0].RetryAfter < 59*time.Second {
		t.Fatalf("setup: %+v", res[0])
	}
	evalshas := func() int64 {
		info := srv.Client().Info(context.Background(), "commandstats").Val()
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				return n
			}
		}
		return 0
	}
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
