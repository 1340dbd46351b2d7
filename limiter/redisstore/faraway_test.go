package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/redistest/netfault"
)

// A Redis far away: the round trip is a large part of the store timeout.
// These tests run at ten times the scale of production (a 500 ms timeout,
// round trips of 200 to 300 ms, against 50 ms and 20 to 30 ms) so that the
// margins they rely on (tens of milliseconds) dwarf this machine's
// scheduling noise; they count decisions, they do not time them. The round
// trip is added by a netfault proxy between the client and a real
// redis-server.

const farTimeout = 500 * time.Millisecond

// farStore is a pipelined store as serve builds it (Dial, one flusher) on a
// Redis reached through a proxy that adds rtt to every round trip once the
// returned proxy is told so.
func farStore(t *testing.T) (*redisstore.Store, *netfault.Proxy, redis.UniversalClient) {
	t.Helper()
	return farStoreWith(t, farTimeout)
}

// farStoreWith is farStore with a store timeout of its own.
func farStoreWith(t *testing.T, timeout time.Duration) (*redisstore.Store, *netfault.Proxy, redis.UniversalClient) {
	t.Helper()
	srv := redistest.Start(t)
	p, err := netfault.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	client, err := redisstore.Dial(redisstore.Options{Addresses: []string{p.Addr()}, Timeout: timeout, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if err := redisstore.CheckServer(context.Background(), client); err != nil {
		t.Fatal(err)
	}
	s := redisstore.NewPipelined(client, "", redisstore.PipelineOptions{MaxBatch: 128, Flushers: 1})
	t.Cleanup(s.Close)
	// Loads the script, as serve's start-up probe does (with a longer
	// deadline: NOSCRIPT and the EVAL after it are two round trips).
	res := make([]limiter.Result, 1)
	if _, err := s.TakeBy(context.Background(), time.Now().Add(5*time.Second), []limiter.Request{{Name: "far", ID: "load", Limit: farLimit, Cost: 1}}, res); err != nil {
		t.Fatal(err)
	}
	return s, p, client
}

var farLimit = limiter.MustLimit(1000, "1")

// decideBy makes one decision on its own bucket, bounded by farTimeout as
// the resilience layer bounds it, and reports its error.
func decideBy(s *redisstore.Store, id string) error {
	res := make([]limiter.Result, 1)
	_, err := s.TakeBy(context.Background(), time.Now().Add(farTimeout), []limiter.Request{{Name: "far", ID: id, Limit: farLimit, Cost: 1}}, res)
	return err
}

// TestADecisionDoesNotWaitForASlowBatchPastItsDeadline: with round trips of
// 300 ms and a 500 ms timeout, a decision that arrives 50 ms after another
// left used to wait for that one's round trip before its own, and came back
// 600 ms after it started: a timeout, every time, on a Redis that answered
// each call in 300 ms. It leaves beside the first on an idle connection
// instead (the store makes one after the first such decision finds none).
func TestADecisionDoesNotWaitForASlowBatchPastItsDeadline(t *testing.T) {
	s, p, _ := farStore(t)
	p.Add(netfault.Latency{Dir: netfault.Both, Delay: 150 * time.Millisecond})
	if err := decideBy(s, "first"); err != nil { // the store learns the round trip
		t.Fatalf("a lone decision 300 ms away with a 500 ms timeout: %v", err)
	}
	for pair := 0; pair < 5; pair++ {
		first := make(chan error, 1)
		go func() { first <- decideBy(s, fmt.Sprintf("a%d", pair)) }()
		time.Sleep(50 * time.Millisecond) // the second arrives while the first is on the wire
		second := decideBy(s, fmt.Sprintf("b%d", pair))
		if err := <-first; err != nil {
			t.Fatalf("pair %d: the first decision, alone on the wire: %v", pair, err)
		}
		t.Logf("pair %d: the decision that arrived while another was on the wire: %v", pair, second)
		if second == nil {
			return
		}
		time.Sleep(700 * time.Millisecond) // lets the connection made for it come up (two round trips)
	}
	t.Fatal("in 5 tries, a decision arriving while another was on the wire never came back within its deadline")
}

// TestAStoreFarAwayGetsItsConnectionsBack: every connection to a Redis 200
// or 300 ms away is reset (a network fault). The decision that meets the
// fault fails; the next ones need a new connection. Its handshake used to
// cost three round trips (HELLO, CLIENT SETINFO, the CLIENT MAINT_NOTIFICATIONS
// of the first connection) inside the decision's 500 ms: no decision could
// ever make one, and the store stayed down for as long as Redis was that far
// away. It now costs HELLO alone (200 ms: the decision fits), and the store
// makes a connection outside any decision when one is lost (300 ms: two
// round trips do not fit, so the next decisions ride that one).
func TestAStoreFarAwayGetsItsConnectionsBack(t *testing.T) {
	for _, rtt := range []time.Duration{200 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(rtt.String(), func(t *testing.T) {
			s, p, _ := farStore(t)
			p.Add(netfault.Latency{Dir: netfault.Both, Delay: rtt / 2})
			if err := decideBy(s, "before"); err != nil {
				t.Fatalf("before the reset: %v", err)
			}
			p.ResetAll()
			var errs []error
			for i := 0; i < 8; i++ {
				err := decideBy(s, fmt.Sprint("after", i))
				if err == nil {
					t.Logf("decided again on attempt %d after the reset (failed before: %v)", i+1, errs)
					return
				}
				errs = append(errs, err)
				time.Sleep(100 * time.Millisecond) // paces the attempts
			}
			t.Fatalf("8 decisions after the reset all failed: %v", errs)
		})
	}
}

// TestAcrossAHopADecisionLeavesBesideTheBatchOnTheWire: Redis 200 ms away
// with a 2 s timeout, at a hundred times a same-zone hop's scale (2 ms
// against 20 µs of the round trip's own noise, say) so that the margins
// here (50 ms) dwarf this machine's scheduling: the round trip is short
// against the deadline, and long against Redis' own work. A decision that
// arrives once another has reached Redis used to wait for that one's reply
// (100 ms) before its own round trip began, 300 ms in all; it now leaves
// beside it, on another connection, and is back in one round trip.
func TestAcrossAHopADecisionLeavesBesideTheBatchOnTheWire(t *testing.T) {
	const rtt, timeout = 200 * time.Millisecond, 2 * time.Second
	s, p, _ := farStoreWith(t, timeout) // the script loaded before the hop
	decide := func(id string) (time.Duration, error) {
		res := make([]limiter.Result, 1)
		start := time.Now()
		_, err := s.TakeBy(context.Background(), start.Add(timeout), []limiter.Request{{Name: "hop", ID: id, Limit: farLimit, Cost: 1}}, res)
		return time.Since(start), err
	}
	p.Add(netfault.Latency{Dir: netfault.Both, Delay: rtt / 2})
	for i := range 8 { // the store learns the round trip's floor, from eight batches
		if _, err := decide(fmt.Sprint("learn", i)); err != nil {
			t.Fatal(err)
		}
	}
	var took []time.Duration
	for pair := 0; pair < 3; pair++ {
		up, _ := p.Bytes()
		first := make(chan error, 1)
		go func() {
			_, err := decide(fmt.Sprintf("a%d", pair))
			first <- err
		}()
		// The second leaves once the first has reached Redis: its reply
		// is half a round trip away.
		for reached := false; !reached; {
			select {
			case err := <-first:
				t.Fatalf("pair %d: the first decision came back before the second started: %v", pair, err)
			case <-time.After(time.Millisecond):
				n, _ := p.Bytes()
				reached = n > up
			}
		}
		d, err := decide(fmt.Sprintf("b%d", pair))
		if err != nil {
			t.Fatalf("pair %d: the second decision: %v", pair, err)
		}
		if err := <-first; err != nil {
			t.Fatalf("pair %d: the first decision: %v", pair, err)
		}
		took = append(took, d)
		if d < rtt+rtt/4 {
			t.Logf("round trips of %v: the decisions that arrived while another was on the wire took %v", rtt, took)
			return
		}
	}
	// Three tries: the first batch beside the wire rides a connection new
	// to the pool, and pays its handshake (HELLO) first.
	t.Fatalf("round trips of %v: the decisions that arrived while another was on the wire took %v, never under %v: they waited for its reply", rtt, took, rtt+rtt/4)
}
