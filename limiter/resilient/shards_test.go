package resilient_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/resilient"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// shardedStore keeps its buckets on servers named by the identity's part
// before the colon ("a:x" lives on a, unless moved says a's slots moved to
// another server); other identities (the probes') are spread over the
// servers in spread. It decides with a memory store and fails every
// decision touching a server listed in down, with an error naming that
// server, as redisstore's NodeError does.
type shardedStore struct {
	mu    sync.Mutex
	down  map[string]bool
	moved map[string]string
	// moveOnProbe moves a server's slots (as moved) when a probe of it
	// arrives, before it is answered: a failover while the probe is out.
	moveOnProbe map[string]string
	spread      []string
	probes      map[string]int // decisions per server of identities without a colon
	mem         *memory.Store
}

func (s *shardedStore) serverOf(id string) string {
	srv, _, ok := strings.Cut(id, ":")
	if !ok {
		h := uint(0)
		for _, c := range id {
			h = h*31 + uint(c)
		}
		srv = s.spread[h%uint(len(s.spread))]
	}
	if to, ok := s.moved[srv]; ok {
		return to
	}
	return srv
}

type serverError string

func (e serverError) Error() string { return "server " + string(e) + " is down" }
func (e serverError) Shard() string { return string(e) }

func (s *shardedStore) Sharded() bool { return true }

func (s *shardedStore) Shards(_ context.Context, reqs []limiter.Request, dst []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shards(reqs, dst)
}

func (s *shardedStore) shards(reqs []limiter.Request, dst []string) []string {
	first := len(dst)
	for _, r := range reqs {
		srv := s.serverOf(r.ID)
		found := false
		for _, d := range dst[first:] {
			found = found || d == srv
		}
		if !found {
			dst = append(dst, srv)
		}
	}
	return dst
}

func (s *shardedStore) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	s.mu.Lock()
	if !strings.Contains(reqs[0].ID, ":") {
		for _, r := range reqs {
			srv := s.serverOf(r.ID)
			if to, ok := s.moveOnProbe[srv]; ok {
				s.moved[srv] = to
				delete(s.moveOnProbe, srv)
			}
		}
	}
	var errs []error
	for _, srv := range s.shards(reqs, nil) {
		if s.down[srv] {
			errs = append(errs, serverError(srv))
		}
		if !strings.Contains(reqs[0].ID, ":") {
			s.probes[srv]++
		}
	}
	s.mu.Unlock()
	if len(errs) > 0 {
		return false, errors.Join(errs...)
	}
	return s.mem.Take(ctx, reqs, res)
}

func newShardedStore(clock limiter.Clock, servers ...string) *shardedStore {
	return &shardedStore{
		down: map[string]bool{}, moved: map[string]string{}, moveOnProbe: map[string]string{}, spread: servers, probes: map[string]int{},
		mem: storetest.Memory(clock),
	}
}

// TestAFailureCountsAgainstTheServersItNames: decisions spanning servers a
// and b fail because b is down. Only b's breaker counts them: a's stays
// closed, and decisions on a alone stay exact. When b comes back and its
// probe passes, decisions are exact again, and OnExactChange heard each
// change once.
func TestAFailureCountsAgainstTheServersItNames(t *testing.T) {
	clock := limiter.NewManualClock(time.Unix(1_800_000_000, 0))
	primary := newShardedStore(clock, "a", "b")
	primary.down["b"] = true
	var changes []bool
	rs, err := resilient.New(primary, resilient.Options{
		Timeout: 50 * time.Millisecond, Clock: clock, Fallback: storetest.Memory(clock), FallbackShare: whole,
		Breaker:       resilient.BreakerOptions{Failures: 3, OpenFor: time.Second},
		OnExactChange: func(exact bool) { changes = append(changes, exact) },
	})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.MustLimit(100, "1")
	take := func(ids ...string) limiter.Result {
		t.Helper()
		reqs := make([]limiter.Request, len(ids))
		for i, id := range ids {
			reqs[i] = limiter.Request{Name: "p", ID: id, Limit: l, Cost: 1}
		}
		res := make([]limiter.Result, len(ids))
		if _, err := rs.Take(context.Background(), reqs, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	for i := 0; i < 10; i++ {
		if r := take("a:1", "b:1"); !r.Degraded {
			t.Fatalf("decision %d spanning a down server was exact: %+v", i, r)
		}
	}
	states := rs.ShardStates()
	if states["a"] != resilient.Closed || states["b"] != resilient.Open {
		t.Fatalf("breakers %v after 10 failures on b: want a closed, b open", states)
	}
	if r := take("a:2"); r.Degraded {
		t.Error("a decision on server a alone was degraded while only b was down")
	}
	if rs.Exact() || len(changes) != 1 || changes[0] {
		t.Errorf("Exact() = %v, changes %v; want false, [false]", rs.Exact(), changes)
	}
	primary.mu.Lock()
	primary.down["b"] = false
	primary.mu.Unlock()
	clock.Advance(time.Second) // b's breaker lets a probe through
	if r := take("b:2"); r.Degraded {
		t.Errorf("b's half-open probe was not sent: %+v", r)
	}
	if !rs.Exact() || len(changes) != 2 || !changes[1] {
		t.Errorf("after b came back: Exact() = %v, changes %v; want true, [false true]", rs.Exact(), changes)
	}
}

// withBDown is a resilient store on servers a and b, b down, whose first
// decision on b failed: b's breaker is open, and probed every 5 ms.
func withBDown(t *testing.T) (*shardedStore, *resilient.Store) {
	t.Helper()
	primary := newShardedStore(nil, "a", "b")
	primary.down["b"] = true
	rs, err := resilient.New(primary, resilient.Options{
		Timeout:       50 * time.Millisecond,
		Breaker:       resilient.BreakerOptions{Failures: 1, OpenFor: time.Millisecond},
		ProbeInterval: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	res := make([]limiter.Result, 1)
	if _, err := rs.Take(context.Background(), []limiter.Request{{Name: "p", ID: "b:1", Limit: limiter.MustLimit(5, "1"), Cost: 1}}, res); err == nil {
		t.Fatal("a decision on a down server succeeded")
	}
	return primary, rs
}

// TestAServerThatLeftTheTopologyIsForgotten: server b is down and its
// breaker open; the background probe keeps probing it (with identities
// that land on b) while b holds slots. Then b's slots move to c (a replica
// promoted): no identity lands on b any more, so its breaker is dropped and
// decisions are exact again, although b never came back.
func TestAServerThatLeftTheTopologyIsForgotten(t *testing.T) {
	primary, rs := withBDown(t)
	res := make([]limiter.Result, 1)
	probes := func() int { primary.mu.Lock(); defer primary.mu.Unlock(); return primary.probes["b"] }
	waitUntil(t, 2*time.Second, "probing b", func() bool { return probes() >= 3 })
	if st, ok := rs.ShardStates()["b"]; !ok || st == resilient.Closed || rs.Exact() {
		t.Fatalf("b, down and probed, has breaker %v (known %v), Exact %v", st, ok, rs.Exact())
	}
	primary.mu.Lock()
	primary.moved["b"] = "c"
	primary.mu.Unlock()
	waitUntil(t, 2*time.Second, "exact after b's slots moved to c", rs.Exact)
	if _, ok := rs.ShardStates()["b"]; ok {
		t.Errorf("b's breaker is still kept: %v", rs.ShardStates())
	}
	if _, err := rs.Take(context.Background(), []limiter.Request{{Name: "p", ID: "b:1", Limit: limiter.MustLimit(5, "1"), Cost: 1}}, res); err != nil || res[0].Degraded {
		t.Errorf("a decision on b's moved keys: %v, %+v", err, res[0])
	}
}

// TestAProbeAnsweredByTheMasterThatTookTheSlotsClosesNoBreaker: server b is
// down and its breaker open; b's slots move to c while b's probe is out,
// so c answers it. That success is not b's: b's breaker used to close on
// it and, closed, was never probed again nor dropped. It is dropped now,
// and decisions are exact.
func TestAProbeAnsweredByTheMasterThatTookTheSlotsClosesNoBreaker(t *testing.T) {
	primary, rs := withBDown(t)
	if st := rs.ShardStates()["b"]; st == resilient.Closed {
		t.Fatalf("b's breaker is %v after a failure", st)
	}
	primary.mu.Lock()
	primary.moveOnProbe["b"] = "c"
	primary.mu.Unlock()
	waitUntil(t, 2*time.Second, "b's breaker dropped", func() bool { _, ok := rs.ShardStates()["b"]; return !ok })
	primary.mu.Lock()
	moved := primary.moved["b"]
	primary.mu.Unlock()
	if moved != "c" {
		t.Fatalf("b's slots moved to %q: the probe that moves them never came", moved)
	}
	if !rs.Exact() {
		t.Errorf("not exact with b gone: %v", rs.ShardStates())
	}
}
