package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// Calendar quotas on a real redis-server whose clock the test sets
// (libfaketime under redis-server): the script picks the window by TIME,
// so only Redis' clock is moved, never the replica's.

// quotaSlack is how far before the expected instant a reported one may
// land: the real time between setting Redis' clock and its decision, and
// the margin of the store's measure of that clock.
const quotaSlack = time.Second

func TestQuotaConformance(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	for _, k := range []struct {
		name string
		new  func(t *testing.T, prefix string) *redisstore.Store
	}{
		{"unpipelined", func(_ *testing.T, prefix string) *redisstore.Store { return redisstore.New(srv.Client(), prefix) }},
		{"pipelined", func(t *testing.T, prefix string) *redisstore.Store { return pipelined(t, srv.Client(), prefix) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			n := 0
			storetest.RunQuota(t, storetest.QuotaHarness{
				Start: func(t *testing.T, at time.Time) (limiter.Store, func(time.Time)) {
					n++
					clock.Set(t, at)
					return k.new(t, k.name+strconv.Itoa(n)+":"), func(at time.Time) { clock.Set(t, at) }
				},
				Slack: quotaSlack,
			})
		})
	}
}

// berlinMonth is the quota of the product's worked example: 3 a month from
// the 15th, in Berlin.
func berlinMonth(t *testing.T) *limiter.Quota {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	c, err := calendar.New(calendar.Month, loc, 15)
	if err != nil {
		t.Fatal(err)
	}
	return &limiter.Quota{Limit: 3, Windows: c}
}

func quotaRequest(q *limiter.Quota, id string, cost int64) limiter.Request {
	return limiter.Request{Name: "plan", ID: id, Limit: limiter.MustLimit(q.Limit, "1"), Cost: cost, Quota: q}
}

// TestQuotaFollowsRedisClockNotTheReplicas: the replica's clock reads 2026
// or so; Redis' reads the 14th of March 2028, a second before the window's
// end. The store measures Redis' clock, so the window is Redis', and the
// denial's Retry-After lands on the 15th at midnight in Berlin.
func TestQuotaFollowsRedisClockNotTheReplicas(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	end := time.Date(2028, time.March, 15, 0, 0, 0, 0, berlinMonth(t).Windows.(calendar.Calendar).Location())
	clock.Set(t, end.Add(-10*time.Second))
	s := redisstore.New(srv.Client(), "")
	q := berlinMonth(t)
	if ok, _ := take(t, s, quotaRequest(q, "a", 3)); !ok {
		t.Fatal("the window's first 3 were denied")
	}
	ok, res := take(t, s, quotaRequest(q, "a", 1))
	if ok {
		t.Fatal("a 4th request in the window passed")
	}
	if got := res[0].RetryAfter; got > 10*time.Second || got < 10*time.Second-quotaSlack {
		t.Errorf("retry after %v, want about 10s (to %v)", got, end)
	}
	if res[0].Window != 29*24*time.Hour {
		t.Errorf("window %v, want 29 days (the 15th of February to the 15th of March of a leap year)", res[0].Window)
	}
	clock.Set(t, end)
	if ok, res := take(t, s, quotaRequest(q, "a", 1)); !ok || res[0].Remaining != 2 {
		t.Errorf("at the 15th's midnight: allowed %v, remaining %d; want a fresh window", ok, res[0].Remaining)
	}
}

// TestQuotaAfterRedisClockSteps: Redis' clock steps five hours ahead
// between two decisions over an hourly quota, beyond every window the
// store cut around its last measure. The script counts nothing and says
// so; the store measures the clock again and decides in the right window.
func TestQuotaAfterRedisClockSteps(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	c, err := calendar.New(calendar.Hour, time.UTC, 0)
	if err != nil {
		t.Fatal(err)
	}
	q := &limiter.Quota{Limit: 1, Windows: c}
	at := time.Date(2028, time.June, 1, 10, 30, 0, 0, time.UTC)
	clock.Set(t, at)
	eachKind := []*redisstore.Store{redisstore.New(srv.Client(), "u:"), pipelined(t, srv.Client(), "p:")}
	for _, s := range eachKind {
		if ok, _ := take(t, s, quotaRequest(q, "a", 1)); !ok {
			t.Fatal("the hour's first request was denied")
		}
	}
	clock.Set(t, at.Add(5*time.Hour))
	for _, s := range eachKind {
		ok, res := take(t, s, quotaRequest(q, "a", 1))
		if !ok {
			t.Fatal("the first request five hours later was denied")
		}
		if got, want := res[0].ResetAfter, 30*time.Minute; got > want || got < want-quotaSlack {
			t.Errorf("reset after %v, want about %v (the end of 15:00's hour)", got, want)
		}
	}
}

// TestQuotaKeyExpiresWithItsWindow: a quota's key lives until its window
// ends, not longer, and holds nothing a bucket could read.
func TestQuotaKeyExpiresWithItsWindow(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	q := berlinMonth(t)
	loc := q.Windows.(calendar.Calendar).Location()
	clock.Set(t, time.Date(2028, time.October, 20, 12, 0, 0, 0, loc))
	s := redisstore.New(srv.Client(), "x:")
	take(t, s, quotaRequest(q, "a", 1))
	ctx := context.Background()
	key := s.QuotaKey("plan", "a")
	at, err := srv.Client().PExpireTime(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2028, time.November, 15, 0, 0, 0, 0, loc); at != time.Duration(want.UnixMilli())*time.Millisecond {
		t.Errorf("the key expires at %v, want %v (the window's end)", time.UnixMilli(at.Milliseconds()).In(loc), want)
	}
	if n, _ := srv.Client().Exists(ctx, s.Key("plan", "a")).Result(); n != 0 {
		t.Error("a quota wrote under its policy's bucket key")
	}
}

// TestQuotaOnAForeignKeyIsAnError: a quota's key holding something else
// fails the decision, naming the key, as a bucket's does.
func TestQuotaOnAForeignKeyIsAnError(t *testing.T) {
	srv := redistest.Start(t)
	s := redisstore.New(srv.Client(), "")
	if err := srv.Client().Set(context.Background(), s.QuotaKey("plan", "a"), "hello", 0).Err(); err != nil {
		t.Fatal(err)
	}
	q, _ := calendar.New(calendar.Day, time.UTC, 0)
	res := make([]limiter.Result, 1)
	_, err := s.Take(context.Background(), []limiter.Request{quotaRequest(&limiter.Quota{Limit: 5, Windows: q}, "a", 1)}, res)
	if err == nil || errors.Is(err, redisstore.ErrQuotaClock) {
		t.Fatalf("Take on a foreign key: %v, want a WRONGTYPE error", err)
	}
}

// TestQuotaWithADeadlineAfterRedisClockSteps: Redis' clock steps ten days
// ahead inside a monthly window; a decision with a deadline, converted to
// Redis' clock through the stale offset, would look expired to the script.
// The quota call reads the clock back, so the store sees the step and
// decides once more instead of failing.
func TestQuotaWithADeadlineAfterRedisClockSteps(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	q := berlinMonth(t)
	loc := q.Windows.(calendar.Calendar).Location()
	clock.Set(t, time.Date(2028, time.March, 1, 12, 0, 0, 0, loc))
	stores := []*redisstore.Store{redisstore.New(srv.Client(), "u:"), pipelined(t, srv.Client(), "p:")}
	for _, s := range stores {
		res := make([]limiter.Result, 1)
		if ok, err := s.TakeBy(context.Background(), time.Now().Add(2*time.Second), []limiter.Request{quotaRequest(q, "a", 1)}, res); !ok || err != nil {
			t.Fatalf("before the step: %v %v", ok, err)
		}
	}
	clock.Set(t, time.Date(2028, time.March, 11, 12, 0, 0, 0, loc))
	for _, s := range stores {
		res := make([]limiter.Result, 1)
		ok, err := s.TakeBy(context.Background(), time.Now().Add(2*time.Second), []limiter.Request{quotaRequest(q, "a", 1)}, res)
		if !ok || err != nil || res[0].Remaining != 1 {
			t.Fatalf("after the step: %v %v %+v, want the window's second request", ok, err, res[0])
		}
	}
}
