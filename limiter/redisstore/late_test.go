package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// sleepyClient is a client whose commands, while stall is set, reach Redis
// behind a DEBUG SLEEP on the same connection: Redis reads both, sleeps, then
// runs the command, whether or not the client still waits for it (as a
// script queued behind a slow one, or on a stalled Redis, does).
type sleepyClient struct {
	*redis.Client
	stall atomic.Bool
}

const stallFor = 300 * time.Millisecond

// productionClient dials srv as the store does in production (redisstore.Dial,
// which stops reading a reply at its deadline), closed when the test ends.
func productionClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	uc, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	return uc.(*redis.Client)
}

func (c *sleepyClient) Process(ctx context.Context, cmd redis.Cmder) error {
	if !c.stall.Load() {
		return c.Client.Process(ctx, cmd)
	}
	p := c.Client.Pipeline()
	p.Do(ctx, "debug", "sleep", stallFor.Seconds())
	_ = p.Process(ctx, cmd)
	_, _ = p.Exec(ctx)
	return cmd.Err()
}

func (c *sleepyClient) Pipeline() redis.Pipeliner {
	p := c.Client.Pipeline()
	if c.stall.Load() {
		p.Do(context.Background(), "debug", "sleep", stallFor.Seconds())
	}
	return p
}

// TestADecisionPastItsDeadlineTakesNothing: a decision whose script Redis
// starts only after the decision's deadline, its caller already answered
// that the store failed, takes nothing: the bucket is as it was, and the
// store counts it. The same stalled Redis without a deadline does run the
// script and charge the bucket, so the stall is real.
func TestADecisionPastItsDeadlineTakesNothing(t *testing.T) {
	for _, pipelinedStore := range []bool{false, true} {
		name := "unpipelined"
		if pipelinedStore {
			name = "pipelined"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client()
			// The production client: it stops reading at the deadline.
			sc := &sleepyClient{Client: productionClient(t, srv)}
			var s *redisstore.Store
			if pipelinedStore {
				s = pipelined(t, sc, "")
			} else {
				s = redisstore.New(sc, "")
			}
			l := limiter.MustLimit(5, "1/60")
			// The first call reads Redis' clock; later ones carry deadlines.
			take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: l, Cost: 1})
			inTime := func(id string) (bool, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				res := make([]limiter.Result, 1)
				return s.Take(ctx, []limiter.Request{{Name: "b", ID: id, Limit: l, Cost: 1}}, res)
			}
			if ok, err := inTime("ontime"); err != nil || !ok {
				t.Fatalf("a decision in time with a deadline: %v, %v; want allowed", ok, err)
			}

			ran := func() int64 { return redistest.CommandStats(t, c)["evalsha"].Calls }
			before := ran()
			sc.stall.Store(true)
			start := time.Now()
			ok, err := inTime("late")
			answered := time.Since(start)
			sc.stall.Store(false)
			if answered >= stallFor {
				t.Errorf("the late decision was answered after %v, past the stall: the client did not stop at its deadline", answered)
			}
			if ok || err == nil {
				t.Fatalf("a decision behind a %v stall with a 50ms deadline: %v, %v; want an error", stallFor, ok, err)
			}
			// Behind the sleep and the script: once PING answers, both ran.
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if n := ran() - before; n != 1 {
				t.Fatalf("Redis ran %d scripts behind the stall, want 1 (the late decision's)", n)
			}
			if n, err := c.Exists(context.Background(), s.Key("b", "late")).Result(); err != nil || n != 0 {
				t.Fatalf("the late decision's bucket exists (%d, %v): the script that started past its deadline charged it", n, err)
			}
			if ok, _ := take(t, s, limiter.Request{Name: "b", ID: "late", Limit: l, Cost: 5}); !ok {
				t.Fatal("the late decision's bucket is not full")
			}

			// Without a deadline the same stall charges: the script runs.
			sc.stall.Store(true)
			ok, res := take(t, s, limiter.Request{Name: "b", ID: "patient", Limit: l, Cost: 1})
			sc.stall.Store(false)
			if !ok || res[0].Remaining != 4 {
				t.Fatalf("a decision without a deadline behind the stall: %v, %+v; want allowed, 4 left", ok, res[0])
			}
		})
	}
}

// signalClient is a sleepyClient that reports each stalled send on sent.
type signalClient struct {
	sleepyClient
	sent chan struct{}
}

func (c *signalClient) Process(ctx context.Context, cmd redis.Cmder) error {
	if c.stall.Load() {
		select {
		case c.sent <- struct{}{}:
		default:
		}
	}
	return c.sleepyClient.Process(ctx, cmd)
}

// TestADecisionLeftBehindInItsBatchIsRefunded: a pipelined decision whose
// batch (shared with a decision of a later deadline, so sent and run) comes
// back after its own deadline was answered that the store failed; what its
// take took is given back, and counted, while the other decision of the
// batch keeps its charge.
func TestADecisionLeftBehindInItsBatchIsRefunded(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	uc, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: 5 * time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	sc := &signalClient{sleepyClient: sleepyClient{Client: uc.(*redis.Client)}, sent: make(chan struct{}, 1)}
	s := pipelined(t, sc, "")
	var refunded, unanswered atomic.Int64
	s.ObserveLate(func(outcome string, n int) {
		switch outcome {
		case "refunded":
			refunded.Add(int64(n))
		case "unanswered":
			unanswered.Add(int64(n))
		}
	})
	l := limiter.MustLimit(5, "1/60")
	take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: l, Cost: 1})

	decide := func(id string, within time.Duration, out chan<- error) {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		res := make([]limiter.Result, 1)
		ok, err := s.Take(ctx, []limiter.Request{{Name: "b", ID: id, Limit: l, Cost: 1}}, res)
		if err == nil && !ok {
			err = errors.New("denied")
		}
		out <- err
	}
	sc.stall.Store(true)
	first, a, b := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go decide("first", 5*time.Second, first) // on the wire, alone, for the stall
	<-sc.sent
	// These two queue behind it and leave together, stalled too: a's
	// deadline passes while their batch is out, b's does not.
	go decide("a", stallFor+stallFor/3, a)
	go decide("b", 5*time.Second, b)
	if err := <-first; err != nil {
		t.Fatalf("the first decision: %v", err)
	}
	errA, errB := <-a, <-b
	sc.stall.Store(false)
	if errA == nil {
		t.Fatal("decision a, whose deadline passed while its batch was out, was answered in time")
	}
	if errB != nil {
		t.Fatalf("decision b: %v", errB)
	}
	ctx := context.Background()
	if n, _ := c.Exists(ctx, s.Key("b", "b")).Result(); n != 1 {
		t.Fatal("decision b's bucket was not charged")
	}
	// The refund follows the late reply on the store's own goroutine:
	// wait for it (bounded) rather than read the bucket before it lands.
	redistest.Eventually(t, 5*time.Second, "decision a's charge refunded", func() error {
		if n, err := c.Exists(ctx, s.Key("b", "a")).Result(); err != nil || n != 0 {
			return fmt.Errorf("decision a's bucket exists (%d, %v): charged though its caller was told the store failed", n, err)
		}
		if refunded.Load() != 1 {
			return fmt.Errorf("refunded counted %d", refunded.Load())
		}
		return nil
	})
	if refunded.Load() != 1 || unanswered.Load() != 0 {
		t.Errorf("late decisions counted: refunded %d, unanswered %d; want 1 and 0", refunded.Load(), unanswered.Load())
	}
}

// TestALargeDecisionPastItsDeadlineTakesNothing: the worst request the rate
// limit door accepts (32,768 buckets, so 256 script calls) behind a stalled
// Redis, with the production store timeout: the caller gets an error at its
// deadline, Redis runs the calls that reached it after the stall, and not
// one bucket was charged.
func TestALargeDecisionPastItsDeadlineTakesNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	sc := &sleepyClient{Client: productionClient(t, srv)}
	s := pipelined(t, sc, "")
	l := limiter.MustLimit(5, "1/60")
	take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: l, Cost: 1})
	reqs := make([]limiter.Request, worstRequest)
	for i := range reqs {
		reqs[i] = limiter.Request{Name: "big", ID: strconv.Itoa(i), Limit: l, Cost: 1}
	}
	ran := func() int64 { return redistest.CommandStats(t, c)["evalsha"].Calls }
	before := ran()
	sc.stall.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	ok, err := s.Take(ctx, reqs, make([]limiter.Result, len(reqs)))
	cancel()
	sc.stall.Store(false)
	if ok || err == nil {
		t.Fatalf("a decision of %d buckets behind a %v stall, 50ms deadline: %v, %v; want an error", len(reqs), stallFor, ok, err)
	}
	ctx = context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // behind the stall and every call
		t.Fatal(err)
	}
	// The calls that reached Redis before the client gave up (the pipeline
	// may not all be written by then) ran after the stall.
	n := ran() - before
	t.Logf("Redis ran %d of the decision's %d script calls after the stall", n, worstRequest/redisstore.MaxScriptBuckets)
	if n < 1 {
		t.Fatal("Redis ran none of the decision's script calls after the stall: the test shows nothing")
	}
	if n, err := c.Keys(ctx, "big:*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("%d of the decision's buckets exist (%v): charged though the caller was told the store failed", len(n), err)
	}
}

// TestALargeDecisionOverItsDeadlineKeepsLittle: the worst request the rate
// limit door accepts, on a Redis that answers but cannot run 256 script
// calls within the 50 ms store timeout: the caller gets an error at its
// deadline; the calls answered in time are refunded, those Redis started
// past the deadline take nothing, and what stays charged is only the
// bounded exception (docs/failure-modes.md): calls running, or whose reply
// was on its way, at the deadline.
func TestALargeDecisionOverItsDeadlineKeepsLittle(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := pipelined(t, productionClient(t, srv), "")
	l := limiter.MustLimit(5, "1/60")
	take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: l, Cost: 1})
	reqs := make([]limiter.Request, worstRequest)
	for i := range reqs {
		reqs[i] = limiter.Request{Name: "big", ID: strconv.Itoa(i), Limit: l, Cost: 1}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	ok, err := s.Take(ctx, reqs, make([]limiter.Result, len(reqs)))
	cancel()
	if ok || err == nil {
		t.Fatalf("Redis decided %d buckets within 50ms (%v, %v): want an error", len(reqs), ok, err)
	}
	ctx = context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The refunds of the calls answered in time ran before Take returned.
	keys, err := c.Keys(ctx, "big:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d buckets stayed charged after the failed answer", len(keys), len(reqs))
	if max := 4 * redisstore.MaxScriptBuckets; len(keys) > max {
		t.Errorf("%d buckets stayed charged, want at most %d (4 script calls)", len(keys), max)
	}
}
