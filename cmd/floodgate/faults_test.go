package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/doors"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// These tests drive the whole decision path in-process, wired as serve
// wires it (store.Build, door.Build): an ext_authz server over a real
// gRPC connection → the resilient store (deadline, breaker, failure mode,
// over-limit cache, background probe) → the pipelined Redis store →
// go-redis → a real redis-server that the test pauses, slows, kills and
// restarts. In-process, so that goroutine leaks can be counted.

const (
	// answerBound is how long any Check may take while Redis misbehaves:
	// the rig's 50ms store timeout plus a margin for a loaded two-core machine.
	answerBound = 200 * time.Millisecond
	// resumeBound is how soon after Redis returns exact decisions resume.
	resumeBound = 1500 * time.Millisecond
)

// faultRig is one in-process floodgate on a real redis-server.
type faultRig struct {
	t      *testing.T
	redis  *redistest.Server
	client authv3.AuthorizationClient
	mode   string // on_failure
	// envoyTimeout is the deadline of each Check, as Envoy's ext_authz
	// timeout sets it.
	envoyTimeout time.Duration
}

// rigPolicy is the rig's enforced policy; shadow adds a shadow policy on
// the same callers.
const rigPolicy = `
  - name: api
    key: [client_ip]
    capacity: 1000
    refill_per_second: 1/3600
`

func newFaultRig(t *testing.T, onFailure, store string, policies string) *faultRig {
	t.Helper()
	srv := redistest.Start(t)
	extra := ""
	if onFailure == "local" {
		extra = "\n  local_share: 0.5"
	}
	yaml := fmt.Sprintf(`listen: {grpc: "127.0.0.1:0", admin: ""}
store:
  backend: redis
  redis: {addresses: ["%s"], %s}
  on_failure: %s%s
  over_limit_cache: {max_entries: 1000}
policies:%s`, srv.Addr, store, onFailure, extra, policies)
	cfg, bs, reg := storeFrom(t, "faults.yaml", yaml)
	doors := doors.Build(cfg, door.Env{Store: bs, Log: zap.NewNop(), Registerer: reg})
	gs := grpc.NewServer()
	for _, d := range doors {
		d.Register(gs)
	}
	conn := extauthztest.ServeGRPC(t, gs)
	return &faultRig{t: t, redis: srv, client: authv3.NewAuthorizationClient(conn), mode: onFailure, envoyTimeout: 250 * time.Millisecond}
}

// storeFrom parses a configuration and builds its store as serve does,
// registering its metrics on a registry of its own; the store is closed
// when the test ends (after the servers that use it, which stop first:
// cleanups run last first).
func storeFrom(t *testing.T, file, yaml string) (*door.Config, *store.Stores, *prometheus.Registry) {
	t.Helper()
	cfg, err := doors.Parse(file, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	bs, err := store.Build(context.Background(), cfg.Config, zap.NewNop(), reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bs.Close)
	return cfg, bs, reg
}

// newFaultRigFor is the rig of TestRedisFaults: a 50ms store timeout and a
// breaker that opens after 3 failures for 200ms.
func newFaultRigFor(t *testing.T, onFailure string) *faultRig {
	return newFaultRig(t, onFailure, "timeout: 50ms}\n  breaker: {failures: 3, open_for: 200ms", rigPolicy)
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
	ctx, cancel := context.WithTimeout(context.Background(), r.envoyTimeout)
	defer cancel()
	start := time.Now()
	resp, err := r.client.Check(ctx, req)
	took := time.Since(start)
	if err != nil {
		r.t.Fatalf("Check returned an RPC error after %v: %v", took, err)
	}
	return answer{allowed: isAllowed(resp), took: took, degraded: hdr(resp, extauthz.HeaderDegraded) != "", remaining: hdr(resp, extauthz.HeaderRemaining)}
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
		case "allow", "local":
			if !a.allowed {
				r.t.Errorf("Check %d denied; failure mode allows (local has room)", i)
			}
		case "deny":
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
		mode  string
		fault func(r *faultRig) (restore func())
		keeps bool // the state survives the fault
	}{
		{"paused with SIGSTOP, local fallback", "local", func(r *faultRig) func() {
			r.redis.Pause()
			return r.redis.Resume
		}, true},
		{"killed, then restarted empty, fail open", "allow", func(r *faultRig) func() {
			r.redis.Kill()
			return r.redis.Restart
		}, false},
		{"slowed by DEBUG SLEEP, fail closed", "deny", func(r *faultRig) func() {
			c := r.redis.Client()
			done := make(chan struct{})
			go func() { c.Do(context.Background(), "DEBUG", "SLEEP", "1.5"); close(done) }()
			time.Sleep(50 * time.Millisecond) // let the sleep begin before the Checks
			return func() { <-done }
		}, true},
		{"paused with CLIENT PAUSE, fail open", "allow", func(r *faultRig) func() {
			if err := r.redis.Client().Do(context.Background(), "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
				r.t.Fatal(err)
			}
			return func() { r.redis.Client().Do(context.Background(), "CLIENT", "UNPAUSE") }
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goroutines()
			t.Run("fault", func(t *testing.T) { // its cleanups run before the leak check
				r := newFaultRigFor(t, tc.mode)
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
	r := newFaultRigFor(t, "deny")
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

// TestAShadowPolicyDoesNotAddToTheWaitOnAHungRedis: with Redis stopped
// (SIGSTOP), a Check matching a shadow and an enforced policy waits for the
// store at most one store.redis.timeout in all, not one per decision: the
// two decide at the same time. The breaker is set not to open, so every
// Check waits on Redis.
func TestAShadowPolicyDoesNotAddToTheWaitOnAHungRedis(t *testing.T) {
	const timeout = 200 * time.Millisecond
	r := newFaultRig(t, "allow", "timeout: 200ms}\n  breaker: {failures: 1000", rigPolicy+`
  - name: api-shadow
    key: [client_ip]
    capacity: 1000
    refill_per_second: 1/3600
    mode: shadow
`)
	r.envoyTimeout = 5 * time.Second // Envoy's deadline is not what bounds the wait here
	if a := r.check(); !a.allowed || a.degraded {
		t.Fatalf("healthy Redis: %+v", a)
	}
	r.redis.Pause()
	defer r.redis.Resume()
	for i := 0; i < 4; i++ {
		a := r.check()
		t.Logf("Check %d with Redis stopped: %v", i, a.took)
		if !a.degraded || !a.allowed {
			t.Errorf("Check %d: %+v, want allowed by the failure mode, degraded", i, a)
		}
		// One timeout and a margin for a loaded machine; two timeouts
		// (the shadow decision, then the enforced one) is 400ms.
		if a.took > timeout*3/2 {
			t.Errorf("Check %d took %v with Redis stopped: more than one store timeout (%v) and a margin", i, a.took, timeout)
		}
		if a.took < timeout*9/10 {
			t.Errorf("Check %d took %v: it did not wait for Redis at all (is it stopped?)", i, a.took)
		}
	}
}

// TestTheLocalFailureModeDescribesTheLocalLimit: with on_failure: local and
// local_share 0.5, a degraded answer's RateLimit-Limit and RateLimit-Policy
// both describe the local bucket actually applied (half the capacity,
// refilling from empty in the policy's own window), not the shared one.
func TestTheLocalFailureModeDescribesTheLocalLimit(t *testing.T) {
	r := newFaultRigFor(t, "local")
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:  &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "198.51.100.1"}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/x", Headers: map[string]string{":path": "/x"}}},
	}}
	send := func() (limit, policy string, degraded bool) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := r.client.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return hdr(resp, extauthz.HeaderLimit), hdr(resp, extauthz.HeaderPolicy), hdr(resp, extauthz.HeaderDegraded) != ""
	}
	// capacity 1000 at 1/3600 a second: a window of 3,600,000 s.
	if l, p, d := send(); d || l != "1000" || p != `"api";q=1000;w=3600000` {
		t.Fatalf("healthy: limit %q, policy %q, degraded %v", l, p, d)
	}
	r.redis.Kill()
	l, p, d := send()
	if !d {
		t.Fatal("not degraded with Redis killed")
	}
	if l != "500" || p != `"api";q=500;w=3600000` {
		t.Errorf("degraded, local share 0.5: RateLimit-Limit %q, RateLimit-Policy %q; want 500 and \"api\";q=500;w=3600000", l, p)
	}
}
