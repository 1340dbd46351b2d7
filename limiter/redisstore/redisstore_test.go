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

// advance makes d pass for every bucket in Redis by moving each bucket's
// "full at" instant d earlier: E in its value and its expiry (see
// bucket.lua). The rest of the value (the part of a millisecond, the limit)
// is untouched, so the shift is exact; a key whose bucket is then full is
// deleted, as it would be once expired.
func advance(t *testing.T, c *redis.Client, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, redisstore.DefaultPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := shiftScript.Run(ctx, c, []string{k}, d.Milliseconds()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

var shiftScript = redis.NewScript(`
local s = redis.call('GET', KEYS[1])
if not s then return 0 end
local e, v, c, k, g = struct.unpack('<ddddd', s)
e = e - tonumber(ARGV[1])
local t = redis.call('TIME')
local us = tonumber(t[2])
local now_ms, sub = tonumber(t[1]) * 1000 + math.floor(us / 1000), us % 1000
if (e - now_ms) * 1000 * g - v - sub * g <= 0 then -- full now
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], struct.pack('<ddddd', e, v, c, k, g), 'PXAT', string.format('%d', e))
end
return 1`)

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
		Slack:   100 * time.Millisecond, // Redis' clock runs on meanwhile; the machine may be busy
	}
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	storetest.Run(t, harness(redisstore.New(c, ""), c, func(t *testing.T, d time.Duration) { advance(t, c, d) }))
}
