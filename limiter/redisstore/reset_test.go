package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/redistest/netfault"
)

// Connections reset with pipelined decisions in flight: the proxy between
// the store and each Redis cuts the replies of a batch part way (Redis ran
// every script call the batch carried), again and again, while concurrent
// callers decide. Each decision has a bucket of its own, one a refill takes
// an hour for: in Redis, a bucket charged once has about an hour to live, one
// charged twice two. Every decision must be answered (a result or an error,
// by its deadline), none may be charged twice, and each decided allowed must
// have been charged.

// resetLimit is each decision's bucket: 10 tokens, one back an hour.
var resetLimit = limiter.MustLimit(10, "1/3600")

// tokenTime is how long resetLimit takes to refill one token.
const tokenTime = time.Hour

// resetTally is what the callers saw.
type resetTally struct {
	mu                 sync.Mutex
	allowed, errs, all int
	// late is the longest a decision took past its deadline; stall the
	// longest this process's timers ran late meanwhile (the machine's own
	// stall, which no deadline bounds).
	late, stall time.Duration
}

// decideUnderResets runs callers deciding unique buckets for d, while every
// 20ms every open connection of every proxy is set to reset after a random
// part of its next reply.
func decideUnderResets(t *testing.T, s *redisstore.Store, proxies []*netfault.Proxy, d time.Duration) *resetTally {
	t.Helper()
	tally := &resetTally{}
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]limiter.Result, 1)
			for i := 0; i < 10_000 && time.Now().Before(stop); i++ {
				start := time.Now()
				deadline := start.Add(200 * time.Millisecond)
				ok, err := s.TakeBy(context.Background(), deadline, []limiter.Request{{Name: "r", ID: fmt.Sprintf("g%d-%d", g, i), Limit: resetLimit, Cost: 1}}, res)
				late := time.Since(deadline)
				tally.mu.Lock()
				tally.all++
				switch {
				case err != nil:
					tally.errs++
				case ok:
					tally.allowed++
				}
				tally.late = max(tally.late, late)
				tally.mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop) {
			start := time.Now()
			time.Sleep(time.Millisecond)
			tally.mu.Lock()
			tally.stall = max(tally.stall, time.Since(start)-time.Millisecond)
			tally.mu.Unlock()
		}
	}()
	rng := rand.New(rand.NewPCG(7, 8))
	for time.Now().Before(stop) {
		for _, p := range proxies {
			for _, c := range p.Conns() {
				c.Add(netfault.Reset{Dir: netfault.Downstream, After: rng.Int64N(300)})
			}
		}
		time.Sleep(20 * time.Millisecond) // the pace of the resets
	}
	wg.Wait()
	return tally
}

// charges counts, over the servers, the buckets under prefix by the tokens
// each has paid.
func charges(t *testing.T, clients []*redis.Client, prefix string) map[int]int {
	t.Helper()
	ctx := context.Background()
	paid := map[int]int{}
	for _, c := range clients {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			ttl, err := c.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl > 0 {
				paid[int(math.Ceil(float64(ttl)/float64(tokenTime)))]++
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return paid
}

// checkResets requires every decision answered by its deadline (and a
// margin, and the machine's stall), no bucket charged twice, and the buckets charged between the
// allowed decisions and those plus the failed ones.
func checkResets(t *testing.T, tally *resetTally, paid map[int]int) {
	t.Helper()
	twice := 0
	for k, n := range paid {
		if k > 1 {
			twice += n
		}
	}
	t.Logf("%d decisions under resets: %d allowed, %d failed, the latest %v past its deadline (timers ran up to %v late); Redis: %d buckets charged once, %d more than once (%v)",
		tally.all, tally.allowed, tally.errs, tally.late.Round(time.Millisecond), tally.stall.Round(time.Millisecond), paid[1], twice, paid)
	if tally.errs == 0 {
		t.Fatal("no decision failed: the resets did not cut a batch")
	}
	if tally.late > 100*time.Millisecond+tally.stall {
		t.Errorf("a decision answered %v past its deadline, more than 100ms and this machine's stall", tally.late)
	}
	if twice > 0 {
		t.Errorf("%d buckets charged more than once: a decision paid twice", twice)
	}
	if paid[1] < tally.allowed || paid[1] > tally.allowed+tally.errs {
		t.Errorf("%d buckets charged once, want between the %d allowed and those plus the %d failed", paid[1], tally.allowed, tally.errs)
	}
}

func TestAResetMidBatchChargesNoDecisionTwice(t *testing.T) {
	srv := redistest.Start(t)
	p, err := netfault.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Add(netfault.Latency{Dir: netfault.Both, Delay: time.Millisecond}) // decisions queue: batches carry several
	client, err := redisstore.Dial(redisstore.Options{Addresses: []string{p.Addr()}, Timeout: 200 * time.Millisecond, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := redisstore.NewPipelined(client, "reset:", redisstore.PipelineOptions{MaxBatch: 128, Flushers: 1})
	defer s.Close()
	checkResets(t, decideUnderResets(t, s, []*netfault.Proxy{p}, 2*time.Second), charges(t, []*redis.Client{srv.Client()}, "reset:"))
}

// TestAResetMidBatchChargesNoDecisionTwiceOnACluster: the same on a Redis
// Cluster of three masters, each behind its proxy (it announces the proxy's
// port, so the slot map leads the client there). go-redis' cluster client
// sends a pipeline again after a network error, the commands whose replies
// it had read included: every decision of a cut batch ran twice.
func TestAResetMidBatchChargesNoDecisionTwiceOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var proxies []*netfault.Proxy
	var addrs []string
	var direct []*redis.Client
	for _, n := range cl.Nodes {
		p, err := netfault.Start(n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.Add(netfault.Latency{Dir: netfault.Both, Delay: time.Millisecond})
		port, _ := strconv.Atoi(p.Addr()[strings.LastIndexByte(p.Addr(), ':')+1:])
		cl.Announce(n, port)
		proxies, addrs, direct = append(proxies, p), append(addrs, p.Addr()), append(direct, n.Client())
	}
	client, err := redisstore.Dial(redisstore.Options{Addresses: addrs, Timeout: 200 * time.Millisecond, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := redisstore.CheckServer(context.Background(), client); err != nil {
		t.Fatal(err)
	}
	s := redisstore.NewPipelined(client, "reset:", redisstore.PipelineOptions{MaxBatch: 128, Flushers: 1})
	defer s.Close()
	checkResets(t, decideUnderResets(t, s, proxies, 2*time.Second), charges(t, direct, "reset:"))
}

// idsInSlot returns n identities whose bucket keys (any bucket name) hash to
// slot.
func idsInSlot(slot, n int, tag string) []string {
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := tag + strconv.Itoa(i)
		if redisstore.Slot("{"+id+"}") == slot {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestASlotMovingWhileItsKeysAreDecided: a slot moves from one master to
// another, key by key (MIGRATING on the source, IMPORTING on the target,
// ASK redirections for the keys already moved), while 16 callers decide
// buckets in it: hot callers asking far more than their capacity, and
// one-off callers, all of one slot so that batches carry several of its
// decisions in one script call, with callers of other slots beside them.
// No decision may fail, none be charged twice, and each hot caller is
// admitted exactly its capacity.
func TestASlotMovingWhileItsKeysAreDecided(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client, err := redisstore.Dial(redisstore.Options{Addresses: cl.Addrs(), Timeout: 500 * time.Millisecond, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := redisstore.CheckServer(context.Background(), client); err != nil {
		t.Fatal(err)
	}
	s := redisstore.NewPipelined(client, "mv:", redisstore.PipelineOptions{MaxBatch: 128, Flushers: 1})
	defer s.Close()

	const slot, hotCapacity = 777, 20
	hot := idsInSlot(slot, 8, "hot-")
	once := idsInSlot(slot, 1000, "once-")
	hotLimit := limiter.MustLimit(hotCapacity, "1/3600")
	from := cl.NodeFor("mv:x:{" + hot[0] + "}")
	var to *redistest.Server
	for _, n := range cl.Nodes {
		if n != from {
			to = n
			break
		}
	}
	// Some keys on the source before the move begins.
	res := make([]limiter.Result, 1)
	for _, id := range once[:200] {
		if _, err := s.Take(context.Background(), []limiter.Request{{Name: "r", ID: id, Limit: resetLimit, Cost: 1}}, res); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	admitted, asked := map[string]int{}, map[string]int{}
	var errs []error
	decided, allowedOnce := 200, 200
	next := 200 // the next one-off identity
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]limiter.Result, 1)
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				var req limiter.Request
				mu.Lock()
				switch {
				case g%4 == 0: // another slot, another node perhaps
					req = limiter.Request{Name: "o", ID: fmt.Sprintf("other-%d-%d", g, i), Limit: resetLimit, Cost: 1}
				case g%2 == 0 && next < len(once):
					req = limiter.Request{Name: "r", ID: once[next], Limit: resetLimit, Cost: 1}
					next++
				default:
					req = limiter.Request{Name: "h", ID: hot[(g+i)%len(hot)], Limit: hotLimit, Cost: 1}
				}
				mu.Unlock()
				ok, err := s.TakeBy(context.Background(), time.Now().Add(500*time.Millisecond), []limiter.Request{req}, res)
				mu.Lock()
				switch {
				case err != nil:
					if len(errs) < 5 {
						errs = append(errs, err)
					}
				case req.Name == "h":
					asked[req.ID]++
					if ok {
						admitted[req.ID]++
					}
				case req.Name == "r":
					decided++
					if ok {
						allowedOnce++
					}
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // paces the callers
			}
		}()
	}
	mig := cl.StartMigration(slot, from, to)
	moved := mig.MoveAll(7, 5*time.Millisecond) // decisions meanwhile, some answered by ASK
	mig.Finish()
	// Decisions after the move, on the target, until every hot caller has
	// asked twice its capacity (bounded).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		enough := true
		for _, id := range hot {
			enough = enough && asked[id] >= 2*hotCapacity
		}
		mu.Unlock()
		if enough {
			break
		}
	}
	close(done)
	wg.Wait()

	t.Logf("slot %d moved from %s to %s (%d keys by MIGRATE) while deciding: %d one-off decisions, hot callers admitted %v (asked %v), errors %v",
		slot, from.Addr, to.Addr, moved, decided, admitted, asked, errs)
	if moved == 0 {
		t.Fatal("no key moved: the slot held none")
	}
	if len(errs) > 0 {
		t.Errorf("decisions failed while the slot moved: %v", errs)
	}
	for _, id := range hot {
		if admitted[id] != hotCapacity {
			t.Errorf("hot caller %s admitted %d times, want exactly its capacity %d", id, admitted[id], hotCapacity)
		}
	}
	var direct []*redis.Client
	for _, n := range cl.Nodes {
		direct = append(direct, n.Client())
	}
	paid := charges(t, direct, "mv:r:")
	if len(paid) != 1 || paid[1] != allowedOnce {
		t.Errorf("one-off buckets in Redis by tokens paid: %v, want %d charged once and none more", paid, allowedOnce)
	}
	hotPaid := charges(t, direct, "mv:h:")
	if len(hotPaid) != 1 || hotPaid[hotCapacity] != len(hot) {
		t.Errorf("hot buckets in Redis by tokens paid: %v, want all %d at %d", hotPaid, len(hot), hotCapacity)
	}
}
