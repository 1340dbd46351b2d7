package resilient_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/resilient"
)

// waitUntil polls cond (no decision is made meanwhile) until it holds or
// within passes, and returns how long it took.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("after %v still not %s", within, what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}
	return time.Since(start)
}

// TestTheStoreIsProbedAtStartAndWhileDegraded: with no decisions at all,
// a store unreachable at start turns degraded (the start-up probe), and
// exact again soon after Redis returns (the background probe).
func TestTheStoreIsProbedAtStartAndWhileDegraded(t *testing.T) {
	srv := redistest.Start(t)
	rc, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout, DialTimeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	srv.Kill()
	var mu sync.Mutex
	var changes []bool
	rs, err := resilient.New(redisstore.New(rc, ""), resilient.Options{
		Timeout: storeTimeout, Breaker: resilient.BreakerOptions{Failures: 5, OpenFor: 100 * time.Millisecond},
		ProbeInterval: 20 * time.Millisecond,
		OnExactChange: func(exact bool) { mu.Lock(); changes = append(changes, exact); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	took := waitUntil(t, time.Second, "degraded", func() bool { return !rs.Exact() })
	t.Logf("degraded %v after start, with no decision", took)
	srv.Restart()
	took = waitUntil(t, 2*time.Second, "exact", rs.Exact)
	t.Logf("exact %v after Redis returned, with no decision", took)
	rs.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || changes[0] || !changes[1] {
		t.Errorf("exact changes %v, want [false true]", changes)
	}
	rs.Close() // twice is fine
}

// TestAMisconfiguredStoreFailsExactAtOnce: an error retrying cannot cure
// (here a missing password) opens the breaker on the first probe, and the
// store says what to fix.
func TestAMisconfiguredStoreFailsExactAtOnce(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Config{Password: "pw"})
	rc, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: storeTimeout, DialTimeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rs, err := resilient.New(redisstore.New(rc, ""), resilient.Options{
		Timeout: storeTimeout, Breaker: resilient.BreakerOptions{Failures: 5, OpenFor: 100 * time.Millisecond},
		ProbeInterval: 20 * time.Millisecond, Permanent: redisstore.Permanent,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	waitUntil(t, time.Second, "degraded", func() bool { return !rs.Exact() })
	if p := rs.Problem(); p == "" || !strings.Contains(p, "password") {
		t.Errorf("Problem() = %q, want what to fix about the password", p)
	}
}
