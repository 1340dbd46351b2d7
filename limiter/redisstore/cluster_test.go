package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// advanceCluster is advance on every master of a cluster, for the keys
// under prefix.
func advanceCluster(t *testing.T, cc *redis.ClusterClient, prefix string, d time.Duration) {
	t.Helper()
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		return shiftKeys(ctx, c, prefix, d)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// keyState is what Redis holds for one bucket: its expiry (the instant it
// is full, rounded up to the millisecond) and value (the rounding), or
// nothing.
type keyState struct {
	exists   bool
	expireMs int64
	value    string
}

func (k keyState) String() string {
	if !k.exists {
		return "absent"
	}
	return fmt.Sprintf("PEXPIRETIME %d, value %x", k.expireMs, k.value)
}

func stateOf(t *testing.T, c redis.Cmdable, key string) keyState {
	t.Helper()
	ctx := context.Background()
	v, err := c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return keyState{}
	}
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.PExpireTime(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return keyState{true, e.Milliseconds(), v}
}

// evalshaCalls sums the EVALSHA and EVAL calls every node has served.
func evalshaCalls(t *testing.T, cl *redistest.Cluster) (evalsha, eval int64) {
	t.Helper()
	for _, n := range cl.Nodes {
		calls := redistest.CommandStats(t, n.Client())
		evalsha += calls["evalsha"].Calls
		eval += calls["eval"].Calls
	}
	return evalsha, eval
}

// idsOnNodes finds, for each node in order, an identity whose bucket named
// name lives on that node, as the cluster itself reports (CLUSTER KEYSLOT
// and CLUSTER SLOTS).
func idsOnNodes(t *testing.T, cl *redistest.Cluster, s *redisstore.Store, name string) []string {
	t.Helper()
	ids := make([]string, len(cl.Nodes))
	found := 0
	for i := 0; found < len(ids) && i < 1000; i++ {
		id := fmt.Sprint("user-", i)
		n := cl.NodeFor(s.Key(name, id))
		for j, node := range cl.Nodes {
			if node == n && ids[j] == "" {
				ids[j] = id
				found++
			}
		}
	}
	if found < len(ids) {
		t.Fatalf("found identities on only %d of %d nodes", found, len(ids))
	}
	return ids
}

// TestCluster runs against one real 3-master Redis Cluster: key slots, the
// conformance suite, the one-call path for one identity, all-or-nothing
// across slots and nodes, concurrency, and last a node lost mid-decision.
func TestCluster(t *testing.T) {
	// Without full coverage, the surviving masters keep serving their slots
	// after the last subtest kills a node.
	cl := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	cc := cl.Client()
	ctx := context.Background()

	t.Run("Slot matches CLUSTER KEYSLOT", func(t *testing.T) {
		keys := []string{"", "a", "{a}", "{}", "{}a", "a{}", "{{a}}", "{a}}", "a{b}c{d}", "{a", "a}", "}{a}",
			"fg:per-key:{k:abc}", "fg:per-ip:{k:abc}", "123456789", "héllo{wörld}", "\x00\xff{\x80}"}
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 500; i++ {
			b := make([]byte, rng.IntN(40))
			const alphabet = "ab{}:-xyz\x00\xfe"
			for j := range b {
				b[j] = alphabet[rng.IntN(len(alphabet))]
			}
			keys = append(keys, string(b))
		}
		c := cl.Nodes[0].Client()
		pipe := c.Pipeline()
		cmds := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.ClusterKeySlot(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			if got, want := redisstore.Slot(k), int(cmds[i].Val()); got != want {
				t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
			}
		}
	})

	t.Run("conformance", func(t *testing.T) {
		const prefix = "conf:"
		storetest.Run(t, harness(redisstore.New(cc, prefix), cc, func(t *testing.T, d time.Duration) { advanceCluster(t, cc, prefix, d) }))
	})

	t.Run("one identity's buckets are one script call", func(t *testing.T) {
		s := redisstore.New(cc, "one:")
		l := limiter.MustLimit(100, "1")
		both := []limiter.Request{{Name: "per-key", ID: "k1", Limit: l, Cost: 1}, {Name: "per-route", ID: "k1", Limit: l, Cost: 1}}
		take(t, s, both...) // loads the script on the node if needed
		sha0, eval0 := evalshaCalls(t, cl)
		for i := 0; i < 10; i++ {
			if ok, _ := take(t, s, both...); !ok {
				t.Fatal("denied")
			}
		}
		sha1, eval1 := evalshaCalls(t, cl)
		if sha1-sha0 != 10 || eval1 != eval0 {
			t.Errorf("10 decisions over one identity's two buckets ran %d EVALSHA and %d EVAL, want 10 and 0", sha1-sha0, eval1-eval0)
		}
	})

	t.Run("all or nothing across slots and nodes", func(t *testing.T) {
		// A store from Dial: several addresses make a cluster client.
		client, err := redisstore.Dial(redisstore.Options{Addresses: cl.Addrs(), Timeout: 2 * time.Second, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		if _, ok := client.(*redis.ClusterClient); !ok {
			t.Fatalf("Dial with %d addresses made a %T, want a *redis.ClusterClient", len(cl.Addrs()), client)
		}
		s := redisstore.New(client, "aon:")
		const name = "api"
		ids := idsOnNodes(t, cl, s, name)
		// A fourth identity on the first node, in another slot.
		var same string
		for i := 0; same == ""; i++ {
			id := fmt.Sprint("other-", i)
			k := s.Key(name, id)
			if cl.NodeFor(k) == cl.Nodes[0] && redisstore.Slot(k) != redisstore.Slot(s.Key(name, ids[0])) {
				same = id
			}
		}
		ids = append(ids, same)
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = s.Key(name, id)
		}
		l := limiter.MustLimit(10, "1/3600") // nothing refills during the test
		req := func(i int, cost int64) limiter.Request {
			return limiter.Request{Name: name, ID: ids[i], Limit: l, Cost: cost}
		}
		// Bring the buckets to 7, 5, 1 and 10 (the last untouched: no key).
		take(t, s, req(0, 3))
		take(t, s, req(1, 5))
		take(t, s, req(2, 9))
		snapshot := func() []keyState {
			st := make([]keyState, len(keys))
			for i, k := range keys {
				st[i] = stateOf(t, client, k)
			}
			return st
		}
		before := snapshot()
		if before[3].exists {
			t.Fatal("an untouched bucket has a key")
		}

		// Bucket 2 holds 1 token and is asked for 2: nobody pays.
		ok, res := take(t, s, req(0, 2), req(1, 2), req(2, 2), req(3, 4))
		if ok {
			t.Fatal("a decision with an empty bucket was allowed")
		}
		after := snapshot()
		for i := range keys {
			if after[i] != before[i] {
				t.Errorf("bucket %d (%s, slot %d): denied decision changed it from %v to %v", i, keys[i], redisstore.Slot(keys[i]), before[i], after[i])
			}
		}
		for i, want := range []limiter.Result{
			{Allowed: true, Limit: 10, Remaining: 7},
			{Allowed: true, Limit: 10, Remaining: 5},
			{Allowed: false, Limit: 10, Remaining: 1},
			{Allowed: true, Limit: 10, Remaining: 10},
		} {
			got := res[i]
			if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Limit != want.Limit {
				t.Errorf("bucket %d reports %+v, want allowed %v, remaining %d", i, got, want.Allowed, want.Remaining)
			}
		}
		if ra := limiter.RetryAfter(res); ra < time.Hour-time.Second || ra > time.Hour {
			t.Errorf("retry-after %v, want 1h (one token at 1/3600 per second)", ra)
		}

		// Everyone can pay: everyone pays.
		ok, res = take(t, s, req(0, 2), req(1, 2), req(2, 1), req(3, 4))
		if !ok {
			t.Fatalf("denied: %+v", res)
		}
		for i, want := range []int64{5, 3, 0, 6} {
			if res[i].Remaining != want || !res[i].Allowed {
				t.Errorf("bucket %d after an allowed decision: %+v, want remaining %d", i, res[i], want)
			}
			// An impossible cost reads a bucket without charging it.
			if _, r := take(t, s, req(i, 11)); r[0].Remaining != want {
				t.Errorf("bucket %d holds %d, want %d", i, r[0].Remaining, want)
			}
		}
	})

	t.Run("a script cache flush is transparent across slots", func(t *testing.T) {
		s := redisstore.New(cc, "flush:")
		ids := idsOnNodes(t, cl, s, "f")
		l := limiter.MustLimit(3, "1/3600")
		reqs := []limiter.Request{{Name: "f", ID: ids[0], Limit: l, Cost: 1}, {Name: "f", ID: ids[1], Limit: l, Cost: 1}, {Name: "f", ID: ids[2], Limit: l, Cost: 3}}
		for i, want := range []bool{true, false} { // the second is denied (bucket 2 is empty) and refunded
			if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }); err != nil {
				t.Fatal(err)
			}
			ok, res := take(t, s, reqs...)
			if ok != want || res[0].Remaining != 2 || res[1].Remaining != 2 || res[2].Remaining != 0 {
				t.Fatalf("decision %d after SCRIPT FLUSH: allowed %v, %+v", i, ok, res)
			}
		}
		// The refund ran: bucket 0 still holds 2.
		if _, r := take(t, s, limiter.Request{Name: "f", ID: ids[0], Limit: l, Cost: 4}); r[0].Remaining != 2 {
			t.Errorf("bucket 0 holds %d after a refunded decision, want 2", r[0].Remaining)
		}
	})

	t.Run("concurrent decisions across slots keep every token", func(t *testing.T) {
		s := redisstore.New(cc, "conc:")
		ids := idsOnNodes(t, cl, s, "c")
		wide := limiter.MustLimit(1000, "1/3600")
		tight := limiter.MustLimit(20, "1/3600")
		reqs := []limiter.Request{
			{Name: "c", ID: ids[0], Limit: wide, Cost: 1},
			{Name: "c", ID: ids[1], Limit: tight, Cost: 1},
			{Name: "c", ID: ids[2], Limit: wide, Cost: 1},
		}
		admitted, decisions := takeConcurrently(t, s, reqs, 8, 60, time.Now().Add(time.Minute))
		if admitted != 20 {
			t.Errorf("%d of %d decisions admitted, want exactly the tight bucket's 20", admitted, decisions)
		}
		for _, i := range []int{0, 2} {
			probe := reqs[i]
			probe.Cost = 1001
			if _, r := take(t, s, probe); r[0].Remaining != 1000-admitted {
				t.Errorf("wide bucket %d holds %d after %d admitted decisions, want %d: refunds lost or minted tokens", i, r[0].Remaining, admitted, 1000-admitted)
			}
		}
	})

	// Last: it kills a node.
	t.Run("a quota across slots is all or nothing, its take refunded in its window", func(t *testing.T) {
		s := redisstore.New(cc, "qx:")
		ids := idsOnNodes(t, cl, s, "plan")
		day, err := calendar.New(calendar.Day, time.UTC, 0)
		if err != nil {
			t.Fatal(err)
		}
		q := &limiter.Quota{Limit: 2, Windows: day}
		quota := limiter.Request{Name: "plan", ID: ids[0], Limit: limiter.MustLimit(2, "1"), Cost: 1, Quota: q}
		one := limiter.Request{Name: "plan", ID: ids[1], Limit: limiter.MustLimit(1, "1/3600"), Cost: 1}
		if ok, res := take(t, s, quota, one); !ok || res[0].Remaining != 1 || res[1].Remaining != 0 {
			t.Fatalf("first: %v %+v", ok, res)
		}
		ok, res := take(t, s, quota, one)
		if ok || res[0].Remaining != 1 || !res[0].Allowed || res[1].Allowed {
			t.Fatalf("the bucket empty: %v %+v, want denied, the quota as before", ok, res)
		}
		midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		if left := time.Until(midnight); res[0].ResetAfter > left+quotaSlack || res[0].ResetAfter < left-quotaSlack {
			t.Errorf("the quota resets after %v, want about %v (UTC midnight)", res[0].ResetAfter, left)
		}
		if ok, res := take(t, s, quota); !ok || res[0].Remaining != 0 {
			t.Fatalf("the quota's second token (the denied take refunded): %v %+v", ok, res)
		}
		five := limiter.Request{Name: "plan", ID: ids[2], Limit: limiter.MustLimit(5, "1/3600"), Cost: 1}
		if ok, res := take(t, s, quota, five); ok || res[0].Allowed || res[1].Remaining != 5 {
			t.Fatalf("the quota spent: %v %+v, want denied, the bucket untouched", ok, res)
		}
		if ok, res := take(t, s, five); !ok || res[0].Remaining != 4 {
			t.Fatalf("the bucket alone: %v %+v, want 4 left (refunded)", ok, res)
		}
	})

	t.Run("a node lost mid-decision: an error, and the other buckets refunded", func(t *testing.T) {
		client, err := redisstore.Dial(redisstore.Options{Addresses: cl.Addrs(), Timeout: 500 * time.Millisecond, DialTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		s := redisstore.New(client, "lost:")
		ids := idsOnNodes(t, cl, s, "n")
		l := limiter.MustLimit(10, "1/3600")
		take(t, s, limiter.Request{Name: "n", ID: ids[0], Limit: l, Cost: 3})
		take(t, s, limiter.Request{Name: "n", ID: ids[2], Limit: l, Cost: 3}) // the client knows node 2
		before := stateOf(t, cc, s.Key("n", ids[0]))
		cl.Nodes[2].Kill()
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		start := time.Now()
		res := make([]limiter.Result, 2)
		ok, err := s.Take(dctx, []limiter.Request{{Name: "n", ID: ids[0], Limit: l, Cost: 1}, {Name: "n", ID: ids[2], Limit: l, Cost: 1}}, res)
		took := time.Since(start)
		if err == nil || ok {
			t.Fatalf("a decision needing a dead node: allowed %v, err %v; want an error", ok, err)
		}
		if errors.Is(err, redisstore.ErrRefund) {
			t.Errorf("the refund on the live node failed: %v", err)
		}
		t.Logf("after %v: %v", took, err)
		if took > 2*time.Second {
			t.Errorf("the decision took %v to fail", took)
		}
		if after := stateOf(t, cc, s.Key("n", ids[0])); after != before {
			t.Errorf("the live node's bucket went from %v to %v: it paid for a decision that failed", before, after)
		}
		if !strings.Contains(err.Error(), "slot") {
			t.Errorf("error %q does not say which slot failed", err)
		}
	})
}
