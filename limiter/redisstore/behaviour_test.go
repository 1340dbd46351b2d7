package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

func take(t *testing.T, s limiter.Store, reqs ...limiter.Request) (bool, []limiter.Result) {
	t.Helper()
	res := make([]limiter.Result, len(reqs))
	ok, err := s.Take(context.Background(), reqs, res)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return ok, res
}

// commandCalls reads the per-command call counters of INFO commandstats.
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls
}

func TestOneDecisionIsOneScriptCall(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := redisstore.New(c, "")
	l := limiter.MustLimit(5, "1")
	// Load the script first: the very first call may need EVAL after NOSCRIPT.
	take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: l, Cost: 1})
	var sent []string
	c.AddHook(countingHook{&sent})
	before := commandCalls(t, c)
	sent = nil
	for i := 0; i < 10; i++ {
		take(t, s,
			limiter.Request{Name: "per-key", ID: "k1", Limit: l, Cost: 1},
			limiter.Request{Name: "per-ip", ID: "k1", Limit: l, Cost: 1})
	}
	if len(sent) != 10 || strings.Count(strings.Join(sent, " "), "evalsha") != 10 {
		t.Errorf("10 two-bucket decisions sent %v, want 10 EVALSHA", sent)
	}
	after := commandCalls(t, c)
	if d := after["evalsha"] - before["evalsha"]; d != 10 {
		t.Errorf("Redis counted %d EVALSHA calls for 10 decisions, want 10", d)
	}
	if d := after["eval"] - before["eval"]; d != 0 {
		t.Errorf("Redis counted %d EVAL calls: the script was sent again", d)
	}
}

// countingHook records the name of every command the client sends.
type countingHook struct{ sent *[]string }

func (countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		*h.sent = append(*h.sent, cmd.Name())
		return next(ctx, cmd)
	}
}
func (h countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			*h.sent = append(*h.sent, c.Name())
		}
		return next(ctx, cmds)
	}
}

func TestScriptCacheFlushIsTransparent(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := redisstore.New(c, "")
	l := limiter.MustLimit(3, "1/60")
	r := limiter.Request{Name: "flush", ID: "a", Limit: l, Cost: 1}
	take(t, s, r)
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, res := take(t, s, r); !ok || res[0].Remaining != 1 {
		t.Fatalf("after SCRIPT FLUSH: allowed %v, remaining %d; want the bucket's state kept (1 left)", ok, res[0].Remaining)
	}
}

func TestARestartedEmptyRedisMeansFullBuckets(t *testing.T) {
	srv := redistest.Start(t)
	restartEmpty(t, srv, redisstore.New(srv.Client(), ""))
}

// restartEmpty empties a bucket, restarts its Redis empty and requires the
// store to decide again, on a full bucket, once the pool's connections to
// the old process have failed.
func restartEmpty(t *testing.T, srv *redistest.Server, s limiter.Store) {
	t.Helper()
	r := limiter.Request{Name: "restart", ID: "a", Limit: limiter.MustLimit(2, "1/60"), Cost: 2}
	if ok, _ := take(t, s, r); !ok {
		t.Fatal("first take denied")
	}
	if ok, _ := take(t, s, r); ok {
		t.Fatal("an empty bucket allowed a take")
	}
	srv.Restart()
	// The client reconnects; the script is gone and so is the state.
	var ok bool
	var err error
	res := make([]limiter.Result, 1)
	for i := 0; i < 5; i++ { // the pool's old connections fail once each
		if ok, err = s.Take(context.Background(), []limiter.Request{r}, res); err == nil {
			break
		}
	}
	if err != nil || !ok || res[0].Remaining != 0 {
		t.Fatalf("after restart: %v %v %+v; want a full bucket paying 2 of 2", ok, err, res[0])
	}
}

func TestEveryKeyExpiresWhenItsBucketIsFull(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := redisstore.New(c, "")
	ctx := context.Background()
	for i, rate := range []string{"1", "0.5", "1/3", "1000"} {
		l := limiter.MustLimit(10, rate)
		for j := int64(1); j <= 10; j += 3 {
			_, res := take(t, s, limiter.Request{Name: "ttl", ID: rate + "-" + strconv.FormatInt(j, 10), Limit: l, Cost: j})
			ttl, err := c.PTTL(ctx, s.Key("ttl", rate+"-"+strconv.FormatInt(j, 10))).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The expiry is the full instant rounded up to the millisecond.
			if ttl <= 0 || ttl < res[0].ResetAfter-50*time.Millisecond || ttl > res[0].ResetAfter+time.Millisecond {
				t.Errorf("case %d: cost %d at %s/s: PTTL %v, bucket full in %v", i, j, rate, ttl, res[0].ResetAfter)
			}
		}
	}
	keys, _ := c.Keys(ctx, "*").Result()
	for _, k := range keys {
		// PTTL answers -1 for a key without expiry (-2 for one that just
		// expired, 0 for one expiring this millisecond: both fine).
		if ttl, _ := c.Do(ctx, "PTTL", k).Int(); ttl == -1 {
			t.Errorf("key %s has no expiry", k)
		}
	}
	// A fast bucket's key disappears by itself once refilled.
	fast := limiter.Request{Name: "ttl", ID: "fast", Limit: limiter.MustLimit(1, "100"), Cost: 1}
	take(t, s, fast)
	deadline := time.Now().Add(2 * time.Second)
	for c.Exists(ctx, s.Key("ttl", "fast")).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("a bucket full after 10ms still had its key after 2s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStateIsCompact measures MEMORY USAGE of an active bucket key: 40 bytes
// of state (the full instant and the limit it is counted in) and an expiry.
// The README quotes the figure.
func TestStateIsCompact(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := redisstore.New(c, "")
	id := "k:AbCdEfGhIjKlMnOpQrStUv" // a 22-character hashed identity, as extauthz makes
	take(t, s, limiter.Request{Name: "api-per-key", ID: id, Limit: limiter.MustLimit(100, "10"), Cost: 7})
	key := s.Key("api-per-key", id)
	n, err := c.MemoryUsage(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	enc := c.ObjectEncoding(context.Background(), key).Val()
	t.Logf("MEMORY USAGE %s = %d bytes (encoding %s)", key, n, enc)
	if v := c.Get(context.Background(), key).Val(); len(v) != 40 {
		t.Errorf("state is %d bytes, want 40", len(v))
	}
	if n > 136 {
		t.Errorf("an active bucket uses %d bytes, want at most 136", n)
	}
}

func TestKeysOfOneIdentityShareAClusterSlot(t *testing.T) {
	s := redisstore.New(nil, "")
	a, b := s.Key("per-key", "k:abc"), s.Key("per-ip", "k:abc")
	if a != "fg:per-key:{k:abc}" {
		t.Errorf("key layout = %q", a)
	}
	if ha, hb := hashTag(a), hashTag(b); ha != hb || ha != "k:abc" {
		t.Errorf("hash tags %q and %q differ", ha, hb)
	}
}

func hashTag(k string) string {
	i := strings.IndexByte(k, '{')
	j := strings.IndexByte(k[i+1:], '}')
	return k[i+1 : i+1+j]
}

func TestOldRedisIsRefusedAtStartUp(t *testing.T) {
	srv := redistest.Start(t)
	if err := redisstore.CheckServer(context.Background(), srv.Client()); err != nil {
		t.Fatalf("CheckServer on this redis-server: %v", err)
	}
	srv.Kill()
	if err := redisstore.CheckServer(context.Background(), srv.Client()); err == nil {
		t.Fatal("CheckServer on a dead server returned no error")
	}
}

// TestConcurrentCallersNeverMintTokens hammers one bucket from 64 goroutines
// for about two seconds: the admitted count must be the capacity plus what
// the rate refilled in that time, within 2.
func TestConcurrentCallersNeverMintTokens(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer c.Close()
	hammer(t, redisstore.New(c, ""), c, 2*time.Second)
}

// hammer decides on one bucket (capacity 20, 50 tokens a second) from 64
// goroutines for about the given time: the admitted count must be the
// capacity plus what the rate refilled in that time by Redis' clock, within
// 2, and the bucket must have been under pressure. It returns the number of
// decisions.
func hammer(t *testing.T, s limiter.Store, c *redis.Client, d time.Duration) int64 {
	t.Helper()
	const capacity, rate = 20, 50
	l := limiter.MustLimit(capacity, strconv.Itoa(rate))
	ctx := context.Background()
	redisNow := func() time.Time { tm, _ := c.Time(ctx).Result(); return tm }

	start := redisNow()
	admitted, decisions := takeConcurrently(t, s, []limiter.Request{{Name: "hammer", ID: "one", Limit: l, Cost: 1}}, 64, 200_000, time.Now().Add(d))
	elapsed := redisNow().Sub(start)
	want := capacity + rate*elapsed.Seconds()
	t.Logf("%d decisions, %d admitted in %v (Redis clock); capacity + rate·elapsed = %.1f", decisions, admitted, elapsed, want)
	if got := float64(admitted); got < want-2 || got > want+2 {
		t.Errorf("admitted %v, want %.1f ± 2", got, want)
	}
	if decisions < 10*admitted {
		t.Errorf("only %d decisions for %d admitted: the bucket was not under pressure", decisions, admitted)
	}
	return decisions
}

// takeConcurrently runs the decision reqs from g goroutines, each at most
// max times and not past stop, and counts the decisions and the admitted.
func takeConcurrently(t *testing.T, s limiter.Store, reqs []limiter.Request, g, max int, stop time.Time) (admitted, decisions int64) {
	t.Helper()
	var a, d atomic.Int64
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]limiter.Result, len(reqs))
			for i := 0; i < max && time.Now().Before(stop); i++ {
				ok, err := s.Take(context.Background(), reqs, res)
				if err != nil {
					t.Error(err)
					return
				}
				d.Add(1)
				if ok {
					a.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return a.Load(), d.Load()
}

// TestAForeignValueIsAnErrorNotADecision: 40 bytes under a bucket's key
// that are not a bucket (another program writing under the prefix) make the
// decision fail with an error naming the key, rather than read garbage as
// tokens.
func TestAForeignValueIsAnErrorNotADecision(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := redisstore.New(c, "")
	if err := c.Set(context.Background(), s.Key("foreign", "a"), strings.Repeat("\x00", 40), 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Take(context.Background(), []limiter.Request{{Name: "foreign", ID: "a", Limit: limiter.MustLimit(5, "1"), Cost: 1}}, make([]limiter.Result, 1))
	if err == nil || !strings.Contains(err.Error(), "not a Floodgate bucket") {
		t.Errorf("Take on a foreign value: %v, want an error naming it", err)
	}
}
