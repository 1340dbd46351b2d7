package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// advance makes d pass for every bucket in Redis by moving each key's expiry,
// which is its bucket's "full at" instant, d earlier. The value (the part of
// a millisecond) is untouched, so the shift is exact; a key whose instant
// passes is deleted by Redis, as it would have expired.
func advance(t *testing.T, c *redis.Client, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, redisstore.DefaultPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		e, err := c.PExpireTime(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if e > 0 {
			if err := c.PExpireAt(ctx, k, time.UnixMilli(e.Milliseconds()-d.Milliseconds())).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// harness adapts a Redis-backed store to the conformance suite: time moves
// by shifting expiries (move), a bucket exists when its key does, Redis
// expires keys by itself, and Redis' clock runs on between calls.
func harness(s *redisstore.Store, c redis.Cmdable, move func(t *testing.T, d time.Duration)) storetest.Harness {
	return storetest.Harness{
		Store:   s,
		Advance: move,
		Exists: func(t *testing.T, name, id string) bool {
			n, err := c.Exists(context.Background(), s.Key(name, id)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		},
		Reclaim: func(*testing.T) {},
		Slack:   50 * time.Millisecond,
	}
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	storetest.Run(t, harness(redisstore.New(c, ""), c, func(t *testing.T, d time.Duration) { advance(t, c, d) }))
}
