package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// TestScriptMatchesTheRationalModel runs the real script in a real Redis with
// one line changed: TIME comes from the last two arguments instead of the
// server's clock. Everything else, the encoding of state in the key's expiry
// and value included, is what production runs; the reference model checks it
// decision by decision.
func TestScriptMatchesTheRationalModel(t *testing.T) {
	const timeLine = "local t = redis.call('TIME')"
	if strings.Count(scriptSource, timeLine) != 1 {
		t.Fatalf("the script no longer reads the clock in exactly one place (%q)", timeLine)
	}
	src := strings.Replace(scriptSource, timeLine, "local t = {ARGV[#ARGV - 1], ARGV[#ARGV]}", 1)
	srv := redistest.Start(t)
	s := New(srv.Client(), "")
	s.script = redis.NewScript(src)
	// Keys must not expire by Redis' real clock before the injected one says
	// so: start the injected clock a day ahead of it.
	base := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	for seed := uint64(1); seed <= 2; seed++ {
		storetest.RunModel(t, seed, 2500, func(at time.Duration, reqs []limiter.Request, res []limiter.Result) (bool, error) {
			now := base.Add(at)
			return s.take(context.Background(), reqs, res, now.Unix(), now.Nanosecond()/1000)
		})
	}
}
