package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/lease"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/redistest/netfault"
	"github.com/floodgate/floodgate/limiter/resilient"
)

// TestARedisSlowedPastTheTimeoutSpendsTheLeaseThenFails: serve's stack
// (a lease store over the resilience layer over the script, a 50 ms
// timeout) on a real redis-server behind a proxy that comes to delay every
// reply by 120 ms. The replica decides from the lease it holds, without
// waiting for Redis; once the lease is spent, decisions fail as the
// failure mode answers (limiter.ErrUnavailable), never an allow nobody
// paid for; and when Redis is fast again, what was admitted and what the
// bucket holds add up to no more than it allowed by Redis' clock. Late
// scripts start past their deadline and take nothing (the script's own
// guard), so the slow spell charges nobody for a failed answer.
func TestARedisSlowedPastTheTimeoutSpendsTheLeaseThenFails(t *testing.T) {
	srv := redistest.Start(t)
	proxy, err := netfault.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	// The client as serve dials it: a decision's deadline cuts its read.
	client, err := redisstore.Dial(redisstore.Options{Addresses: []string{proxy.Addr()}, Timeout: 50 * time.Millisecond, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	rs, err := resilient.New(redisstore.New(client, "slow:"), resilient.Options{
		Timeout: 50 * time.Millisecond,
		Breaker: resilient.BreakerOptions{Failures: 1000, OpenFor: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s := lease.New(rs, lease.Options{Hot: 1, Registerer: reg})
	l := limitOf(t, 1000, 1) // a token a second: the test's few seconds refill almost nothing
	start := time.Now()

	admitted := int64(0)
	for range 20 { // warm: the bucket is hot, a lease is held
		ok, _, err := take(s, l, "k", 1)
		if err != nil || !ok {
			t.Fatalf("before the slow spell: allowed %v, %v", ok, err)
		}
		admitted++
	}
	if counter(t, reg, "floodgate_lease_taken_total") == 0 {
		t.Fatal("no lease taken while Redis was fast")
	}

	slow := proxy.Add(netfault.Latency{Dir: netfault.Downstream, Delay: 120 * time.Millisecond})
	fromLease, failed := 0, 0
	for range 2000 {
		ok, r, err := take(s, l, "k", 1)
		if err != nil {
			if !errors.Is(err, limiter.ErrUnavailable) {
				t.Fatalf("a slow Redis failed a decision with %v, want limiter.ErrUnavailable (the failure mode's)", err)
			}
			failed++
			if failed == 3 {
				break
			}
			continue
		}
		if !ok {
			t.Fatalf("denied while Redis was slow (%+v, after %d from the lease): a denial must come from Redis' answer", r, fromLease)
		}
		if failed > 0 {
			t.Fatal("allowed after the lease ran out while Redis was still slow")
		}
		fromLease++
		admitted++
	}
	if fromLease == 0 || failed == 0 {
		t.Fatalf("while Redis was slow: %d decisions from the lease, %d failures; want the lease spent, then failures", fromLease, failed)
	}
	t.Logf("while Redis was slow: %d decisions served from the lease, then the store's error", fromLease)

	proxy.Remove(slow)
	redistest.Eventually(t, 5*time.Second, "the store answering again once Redis is fast", func() error {
		ok, _, err := take(s, l, "k", 1)
		if err == nil && ok {
			admitted++
		}
		return err
	})
	s.Close() // every lease goes back (or is counted lost)
	direct := redisstore.New(srv.Client(), "slow:")
	left := look(t, direct, l)
	allowed := int64(1000) + int64(time.Since(start).Seconds()) + 1
	if admitted+left > allowed {
		t.Errorf("admitted %d and the bucket holds %d: %d in all, more than the %d it allowed", admitted, left, admitted+left, allowed)
	}
	// What is neither admitted nor in the bucket is what the late calls
	// took: at most the lease the first of them asked for (counted), and
	// each failed call's own token.
	lost := counter(t, reg, "floodgate_lease_tokens_lost_total")
	unanswered := counter(t, reg, "floodgate_lease_tokens_unanswered_total")
	missing := 1000 - admitted - left
	t.Logf("admitted %d, the bucket holds %d of 1000: %d missing; %v tokens counted lost, %v asked in unanswered calls", admitted, left, missing, lost, unanswered)
	if unanswered == 0 || unanswered > 500 {
		t.Errorf("%v tokens asked for as leases in calls that failed for want of a reply; want one lease's (at most half the capacity)", unanswered)
	}
	if float64(missing) > lost+unanswered+float64(failed)+1 {
		t.Errorf("%d tokens neither admitted nor in the bucket; the bound is the counted %v + %v and one per failed call (%d)", missing, lost, unanswered, failed)
	}
}
