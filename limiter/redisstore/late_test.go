package redisstore_test

import (
	"context"
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
			uc, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: time.Second, DialTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { uc.Close() })
			sc := &sleepyClient{Client: uc.(*redis.Client)}
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
