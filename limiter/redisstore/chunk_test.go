package redisstore_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// worstRequest is the most descriptors the rate limit door decides in one
// request (rls.MaxDescriptors), each a bucket of its own.
const worstRequest = 32768

// TestALargeDecisionHoldsRedisBriefly: a decision over the most buckets the
// rate limit door accepts is cut into script calls of at most
// MaxScriptBuckets, none of which holds Redis for more than a small part of
// the store timeout (50 ms in production), as Redis' SLOWLOG, which times
// each command, shows; meanwhile an ordinary caller's decisions on the same
// Redis stay exact. The decision stays all-or-nothing: allowed, every bucket
// paid; denied by its last bucket, none did.
func TestALargeDecisionHoldsRedisBriefly(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	for _, cmd := range [][]any{{"config", "set", "slowlog-log-slower-than", "0"}, {"config", "set", "slowlog-max-len", "100000"}, {"slowlog", "reset"}} {
		if err := c.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	s := pipelined(t, c, "")
	lim := mustLimit(t, 10, time.Hour)
	reqs := make([]limiter.Request, worstRequest)
	for i := range reqs {
		reqs[i] = limiter.Request{Name: "big", ID: strconv.Itoa(i), Limit: lim, Cost: 1}
	}

	// The ordinary caller: 5 tokens, refilling one an hour, taken one at
	// a time while the large decision runs: exactly 5 allowed.
	small := limiter.Request{Name: "small", ID: "caller", Limit: mustLimit(t, 5, 5*time.Hour), Cost: 1}
	var wg sync.WaitGroup
	done := make(chan struct{})
	var allowed, decided int
	var smallErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		res := make([]limiter.Result, 1)
		for {
			select {
			case <-done:
				return
			default:
			}
			ok, err := s.Take(ctx, []limiter.Request{small}, res)
			if err != nil {
				smallErr = err
				return
			}
			decided++
			if ok {
				allowed++
			}
		}
	}()
	res := make([]limiter.Result, len(reqs))
	ok, err := s.Take(ctx, reqs, res)
	close(done)
	wg.Wait()
	if err != nil || !ok {
		t.Fatalf("Take of %d fresh buckets: %v, %v; want allowed", len(reqs), ok, err)
	}
	for i := range res {
		if !res[i].Allowed || res[i].Remaining != 9 {
			t.Fatalf("bucket %d after the decision: %+v, want allowed with 9 left", i, res[i])
		}
	}
	if smallErr != nil || decided < 6 || allowed != 5 {
		t.Errorf("the ordinary caller beside it: %d of %d decisions allowed (error %v), want exactly 5 of at least 6", allowed, decided, smallErr)
	}

	calls, longest := scriptsInSlowlog(t, c)
	t.Logf("%d buckets: %d script calls, the longest %v; the ordinary caller decided %d times", len(reqs), calls, longest, decided)
	if want := worstRequest / redisstore.MaxScriptBuckets; calls < want {
		t.Errorf("%d script calls, want at least %d (the decision cut into calls of %d buckets)", calls, want, redisstore.MaxScriptBuckets)
	}
	// A quarter of the production store timeout. A call of 128 buckets
	// takes about 2 ms of Redis' time; SLOWLOG counts wall time, so on a
	// loaded machine a call the kernel preempts looks longer (a scheduler
	// slice, a few ms). One script over every bucket took over 200 ms.
	if longest > 50*time.Millisecond/4 {
		t.Errorf("the longest script call held Redis for %v, want at most 12.5ms", longest)
	}

	// Denied by its last bucket (cost above the 9 left): no bucket pays,
	// the first ones' calls refunded.
	reqs[len(reqs)-1].Cost = 10
	ok, err = s.Take(ctx, reqs, res)
	if err != nil || ok {
		t.Fatalf("Take with the last bucket short: %v, %v; want denied", ok, err)
	}
	for i := range res[:len(res)-1] {
		if !res[i].Allowed || res[i].Remaining != 9 {
			t.Fatalf("bucket %d of the denied decision: %+v, want able to pay, 9 left", i, res[i])
		}
	}
	if res[len(res)-1].Allowed {
		t.Fatalf("the short bucket: %+v, want not able to pay", res[len(res)-1])
	}
	for i := range reqs {
		reqs[i].Cost = 9
	}
	reqs[len(reqs)-1].Cost = 9
	if ok, err := s.Take(ctx, reqs, res); err != nil || !ok {
		t.Fatalf("taking the 9 tokens every bucket should still hold after the denial: %v, %v", ok, err)
	}
	for i := range res {
		if res[i].Remaining != 0 {
			t.Fatalf("bucket %d: %d left, want 0", i, res[i].Remaining)
		}
	}
}

func mustLimit(t *testing.T, capacity int64, per time.Duration) limiter.Limit {
	t.Helper()
	r, err := limiter.NewRate(capacity, int64(per/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.NewLimit(capacity, r)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// scriptsInSlowlog reads every script call in Redis' SLOWLOG (which logs
// every command with slowlog-log-slower-than 0): how many have more than one
// key, and the longest of all.
func scriptsInSlowlog(t *testing.T, c *redis.Client) (calls int, longest time.Duration) {
	t.Helper()
	var all []time.Duration
	defer func() {
		slices.Sort(all)
		if len(all) > 0 {
			t.Logf("script calls: median %v, 99th percentile %v, longest %v", all[len(all)/2], all[len(all)*99/100], longest)
		}
	}()
	entries, err := c.SlowLogGet(context.Background(), -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if len(e.Args) == 0 || !strings.HasPrefix(strings.ToLower(e.Args[0]), "eval") {
			continue
		}
		longest = max(longest, e.Duration)
		all = append(all, e.Duration)
		if n, _ := strconv.Atoi(e.Args[min(2, len(e.Args)-1)]); n > 1 {
			calls++ // the large decision's (the ordinary caller's have one key)
			if n > redisstore.MaxScriptBuckets {
				t.Errorf("a script call over %d buckets, above MaxScriptBuckets (%d)", n, redisstore.MaxScriptBuckets)
			}
		}
	}
	return calls, longest
}
