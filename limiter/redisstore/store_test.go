package redisstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
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
	"github.com/floodgate/floodgate/limiter/storetest"
)

// The store's behaviour on a real redis-server. The pipelined store must be
// the store: the same conformance suite, the same one script call per
// decision, the same recovery from a flushed script cache or a restarted
// server, so those tests run on both (eachStore); Take must still return by
// the caller's deadline. (The script itself is checked against the model,
// pipelined, in model_internal_test.go.)

func take(t *testing.T, s limiter.Store, reqs ...limiter.Request) (bool, []limiter.Result) {
	t.Helper()
	res := make([]limiter.Result, len(reqs))
	ok, err := s.Take(context.Background(), reqs, res)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return ok, res
}

// advance makes d pass for every bucket under prefix (the one its store
// was made with) by moving each bucket's
// "full at" instant d earlier: E in its value and its expiry (see
// bucket.lua). The rest of the value (the part of a millisecond, the limit)
// is untouched, so the shift is exact (for a limit counted in steps longer
// than a millisecond, d must be whole steps); a key whose bucket is then
// full is deleted, as it would be once expired.
func advance(t *testing.T, c *redis.Client, prefix string, d time.Duration) {
	t.Helper()
	if err := shiftKeys(context.Background(), c, prefix, d); err != nil {
		t.Fatal(err)
	}
}

// shiftKeys is advance for the keys under prefix on one server.
func shiftKeys(ctx context.Context, c *redis.Client, prefix string, d time.Duration) error {
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := shiftScript.Run(ctx, c, []string{k}, d.Milliseconds()).Err(); err != nil {
			return err
		}
	}
	return nil
}

var shiftScript = redis.NewScript(`
local s = redis.call('GET', KEYS[1])
if not s then return 0 end
local e, v, c, k, g, j
if #s == 41 then
  e, v, c, k, g, j = struct.unpack('<dddddB', s)
else
  e, v, c, k, g = struct.unpack('<ddddd', s)
  j = 0
end
local d = tonumber(ARGV[1])
local p = 10 ^ (j - 3) -- milliseconds a step, when more than one
if j > 3 then
  if d % p ~= 0 then
    return redis.error_reply('a shift of ' .. d .. ' ms is not whole steps of ' .. p .. ' ms')
  end
  d = d / p -- E counts steps
end
e = e - d
local t = redis.call('TIME')
local us = tonumber(t[2])
local now_ms, sub = tonumber(t[1]) * 1000 + math.floor(us / 1000), us % 1000
local m -- ticks missing, from the start of the current step
if j <= 3 then
  local r = 10 ^ j
  m = ((e - now_ms) * (1000 / r) - math.floor(sub / r)) * g - v
else
  m = (e - math.floor(now_ms / p)) * g - v
end
local ms = e
if j > 3 then ms = math.min(e * p, 2 ^ 52) end
if m <= 0 then -- full now
  redis.call('DEL', KEYS[1])
elseif j == 0 then
  redis.call('SET', KEYS[1], struct.pack('<ddddd', e, v, c, k, g), 'PXAT', string.format('%d', ms))
else
  redis.call('SET', KEYS[1], struct.pack('<dddddB', e, v, c, k, g, j), 'PXAT', string.format('%d', ms))
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
		Reclaim:   func(*testing.T) {},
		RealClock: true, // Redis' clock runs on meanwhile; the machine may be busy
	}
}

// pipelineOptions are the pipeline settings Floodgate runs with by default
// (internal/config's), without the wait.
func pipelineOptions() redisstore.PipelineOptions {
	return redisstore.PipelineOptions{MaxBatch: 128, Flushers: 1}
}

func pipelined(t *testing.T, c redisstore.Client, prefix string) *redisstore.Store {
	s := redisstore.NewPipelined(c, prefix, pipelineOptions())
	t.Cleanup(s.Close)
	return s
}

// eachStore runs f as a subtest for each way to build a store, unpipelined
// (New) and pipelined (NewPipelined), on a fresh redis-server. The stores
// have no key prefix (""): keys start with the bucket's name.
func eachStore(t *testing.T, f func(t *testing.T, srv *redistest.Server, c *redis.Client, s *redisstore.Store)) {
	for _, k := range []struct {
		name string
		new  func(t *testing.T, c *redis.Client) *redisstore.Store
	}{
		{"unpipelined", func(_ *testing.T, c *redis.Client) *redisstore.Store { return redisstore.New(c, "") }},
		{"pipelined", func(t *testing.T, c *redis.Client) *redisstore.Store { return pipelined(t, c, "") }},
	} {
		t.Run(k.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client()
			f(t, srv, c, k.new(t, c))
		})
	}
}

func TestConformance(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *redistest.Server, c *redis.Client, s *redisstore.Store) {
		storetest.Run(t, harness(s, c, func(t *testing.T, d time.Duration) { advance(t, c, "", d) }))
	})
}

func TestOneDecisionIsOneScriptCall(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *redistest.Server, c *redis.Client, s *redisstore.Store) {
		l := limiter.MustLimit(5, "1")
		// Load the script first: the very first call may need EVAL after NOSCRIPT.
		take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: l, Cost: 1})
		var sent []string
		c.AddHook(countingHook{&sent})
		before := redistest.CommandStats(t, c)
		sent = nil
		for i := 0; i < 10; i++ {
			take(t, s,
				limiter.Request{Name: "per-key", ID: "k1", Limit: l, Cost: 1},
				limiter.Request{Name: "per-ip", ID: "k1", Limit: l, Cost: 1})
		}
		if len(sent) != 10 || strings.Count(strings.Join(sent, " "), "evalsha") != 10 {
			t.Errorf("10 two-bucket decisions sent %v, want 10 EVALSHA", sent)
		}
		after := redistest.CommandStats(t, c)
		if d := after["evalsha"].Calls - before["evalsha"].Calls; d != 10 {
			t.Errorf("Redis counted %d EVALSHA calls for 10 decisions, want 10", d)
		}
		if d := after["eval"].Calls - before["eval"].Calls; d != 0 {
			t.Errorf("Redis counted %d EVAL calls: the script was sent again", d)
		}
	})
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
	eachStore(t, func(t *testing.T, _ *redistest.Server, c *redis.Client, s *redisstore.Store) {
		r := limiter.Request{Name: "flush", ID: "a", Limit: limiter.MustLimit(3, "1/60"), Cost: 1}
		take(t, s, r)
		if err := c.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if ok, res := take(t, s, r); !ok || res[0].Remaining != 1 {
			t.Fatalf("after SCRIPT FLUSH: allowed %v, remaining %d; want the bucket's state kept (1 left)", ok, res[0].Remaining)
		}
		// Several decisions meeting NOSCRIPT in one batch all recover.
		if err := c.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				res := make([]limiter.Result, 1)
				ok, err := s.Take(context.Background(), []limiter.Request{{Name: "flush", ID: "b" + strconv.Itoa(i), Limit: r.Limit, Cost: 1}}, res)
				if err == nil && (!ok || res[0].Remaining != 2) {
					err = errors.New("a fresh bucket did not pay 1 of 3")
				}
				errs <- err
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
}

func TestARestartedEmptyRedisMeansFullBuckets(t *testing.T) {
	eachStore(t, func(t *testing.T, srv *redistest.Server, _ *redis.Client, s *redisstore.Store) {
		restartEmpty(t, srv, s)
	})
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
// docs/performance.md quotes the figure.
func TestStateIsCompact(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := redisstore.New(c, "fg:")  // the default prefix
	id := "AbCdEfGhIjKlMnOpQrStUv" // a 22-character hashed identity, as extauthz makes
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
	s := redisstore.New(nil, "fg:")
	a, b := s.Key("per-key", "k:abc"), s.Key("per-ip", "k:abc")
	if a != "fg:per-key:{k:abc}" {
		t.Errorf("key layout = %q", a)
	}
	// No prefix is no prefix, not a default one.
	if k := redisstore.New(nil, "").Key("per-key", "k:abc"); k != "per-key:{k:abc}" {
		t.Errorf("key layout without a prefix = %q, want per-key:{k:abc}", k)
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
// goroutines for about the given time and checks that tokens were neither
// minted nor lost: what was admitted plus what is left at the end must be the
// capacity plus what the rate refilled between the first decision and the
// last, by Redis' clock. Each end is bracketed by two TIME calls, so the
// bounds hold however slowly a loaded machine starts or drains the
// goroutines; the 1 is the whole-token floor of what is left. It returns the
// number of decisions.
func hammer(t *testing.T, s limiter.Store, c *redis.Client, d time.Duration) int64 {
	t.Helper()
	const capacity, rate = 20, 50
	l := limiter.MustLimit(capacity, strconv.Itoa(rate))
	one := limiter.Request{Name: "hammer", ID: "one", Limit: l, Cost: 1}
	ctx := context.Background()
	redisNow := func() time.Time { tm, _ := c.Time(ctx).Result(); return tm }

	// The first decision starts the refill and empties the bucket: a full
	// bucket refills nothing, so a bucket left near full while a loaded
	// machine starts the goroutines would waste refill that no caller
	// could take (seen as 118 of 119 on a busy machine).
	all := one
	all.Cost = capacity
	start1 := redisNow()
	if ok, _ := take(t, s, all); !ok {
		t.Fatal("the first decision, on a new bucket, could not take its capacity")
	}
	start2 := redisNow()
	admitted, decisions := takeConcurrently(t, s, []limiter.Request{one}, 64, 200_000, time.Now().Add(d))
	// The last decision asks for the whole capacity: it takes nothing unless
	// the bucket is full, and either way tells what is left.
	end1 := redisNow()
	ok, res := take(t, s, all)
	end2 := redisNow()
	admitted += capacity // the first decision
	left := res[0].Remaining
	if ok {
		left += capacity
	}
	lo := capacity + rate*end1.Sub(start2).Seconds() - 1
	hi := capacity + rate*end2.Sub(start1).Seconds()
	got := float64(admitted + left)
	t.Logf("%d decisions, %d admitted and %d left over %v (Redis clock): want %.2f to %.2f", decisions+2, admitted, left, end2.Sub(start1), lo, hi)
	if got > hi {
		t.Errorf("admitted + left = %v, above capacity + rate·elapsed = %.2f: tokens were minted", got, hi)
	}
	// A bucket found full may have refilled past its capacity in a slow
	// drain, so only one found short of full shows whether tokens were lost.
	if left < capacity && got < lo {
		t.Errorf("admitted + left = %v, below %.2f: tokens were lost", got, lo)
	}
	if decisions < 10*admitted {
		t.Errorf("only %d decisions for %d admitted: the bucket was not under pressure", decisions, admitted)
	}
	return decisions + 2
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

// pipelineHook counts the round trips of script calls a client sends (a
// pipeline, or a lone script call), the script calls in them and the
// decisions those carry (D, in ARGV[1] of the token-bucket script); a new
// connection's set-up pipeline is not counted.
type pipelineHook struct {
	pipelines, scripts, decisions atomic.Int64
	biggestPipeline, biggestCall  atomic.Int64 // decisions
}

func (*pipelineHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		h.count([]redis.Cmder{c})
		return next(ctx, c)
	}
}
func (h *pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *pipelineHook) count(cmds []redis.Cmder) {
	var scripts, decisions int64
	for _, c := range cmds {
		if c.Name() != "evalsha" && c.Name() != "eval" {
			continue
		}
		a := c.Args()
		nkeys := a[2].(int)
		d := int64(binary.LittleEndian.Uint16(a[3+nkeys].([]byte))) // D leads ARGV[1]
		scripts++
		decisions += d
		raise(&h.biggestCall, d)
	}
	if scripts == 0 {
		return
	}
	h.pipelines.Add(1)
	h.scripts.Add(scripts)
	h.decisions.Add(decisions)
	raise(&h.biggestPipeline, decisions)
}

func raise(max *atomic.Int64, n int64) {
	for {
		b := max.Load()
		if n <= b || max.CompareAndSwap(b, n) {
			return
		}
	}
}

// TestPipelinedConcurrentDecisionsShareRoundTripsAndMintNothing hammers one
// bucket from 64 goroutines: decisions must share pipelines and script calls
// (that is the point), every decision must be in exactly one script call,
// and the admitted count must be the capacity plus what the rate refilled,
// within 2, as unpipelined.
func TestPipelinedConcurrentDecisionsShareRoundTripsAndMintNothing(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer c.Close()
	h := &pipelineHook{}
	c.AddHook(h)
	var batched, batchCalls atomic.Int64 // as PipelineOptions.OnBatch reports them
	o := pipelineOptions()
	o.OnBatch = func(decisions, calls int) {
		batched.Add(int64(decisions))
		batchCalls.Add(int64(calls))
	}
	s := redisstore.NewPipelined(c, "", o)
	defer s.Close()
	take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: limiter.MustLimit(1, "1"), Cost: 1}) // the script cached: no EVAL below
	h.pipelines.Store(0)
	h.scripts.Store(0)
	h.decisions.Store(0)
	batched.Store(0)
	batchCalls.Store(0)
	before := redistest.CommandStats(t, c)
	n := hammer(t, s, c, time.Second)
	after := redistest.CommandStats(t, c)
	if batched.Load() != n || batchCalls.Load() != h.scripts.Load() {
		t.Errorf("OnBatch reported %d decisions in %d script calls; %d were decided in %d", batched.Load(), batchCalls.Load(), n, h.scripts.Load())
	}
	t.Logf("%d decisions in %d pipelines (largest %d decisions), %d script calls (largest %d decisions)",
		n, h.pipelines.Load(), h.biggestPipeline.Load(), h.scripts.Load(), h.biggestCall.Load())
	if d := after["evalsha"].Calls - before["evalsha"].Calls; d != h.scripts.Load() {
		t.Errorf("Redis ran %d EVALSHA, the client sent %d", d, h.scripts.Load())
	}
	if h.decisions.Load() != n {
		t.Errorf("the script calls carried %d decisions; %d were decided", h.decisions.Load(), n)
	}
	if h.biggestCall.Load() < 2 || h.scripts.Load() >= n {
		t.Errorf("64 concurrent callers never shared a script call (%d calls for %d decisions, largest %d)", h.scripts.Load(), n, h.biggestCall.Load())
	}
	if h.biggestCall.Load() > 32 {
		t.Errorf("a script call carried %d decisions, above 32", h.biggestCall.Load())
	}
	if h.biggestPipeline.Load() > int64(o.MaxBatch) {
		t.Errorf("a pipeline carried %d decisions, above the maximum batch %d", h.biggestPipeline.Load(), o.MaxBatch)
	}
}

// TestTakeReturnsByTheDeadline: on a paused server, every caller, the one
// whose batch is on the wire and those queued behind it, gets its error by
// its own deadline, even with a client timeout far longer: a deadline given
// by the context (Take) or alongside it (TakeBy), pipelined or not.
func TestTakeReturnsByTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: 10 * time.Second, DialTimeout: 2 * time.Second, PoolSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := limiter.Request{Name: "stall", ID: "a", Limit: limiter.MustLimit(5, "1"), Cost: 1}
	stores := map[string]*redisstore.Store{"pipelined": pipelined(t, c, ""), "one round trip each": redisstore.New(c, "")}
	for _, s := range stores {
		take(t, s, r)
	}
	srv.Pause()
	defer srv.Resume()
	var wg sync.WaitGroup
	for name, s := range stores {
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				d := time.Duration(50+10*i) * time.Millisecond
				start := time.Now()
				var err error
				if i%2 == 0 {
					ctx, cancel := context.WithTimeout(context.Background(), d)
					defer cancel()
					_, err = s.Take(ctx, []limiter.Request{r}, make([]limiter.Result, 1))
				} else {
					_, err = s.TakeBy(context.Background(), start.Add(d), []limiter.Request{r}, make([]limiter.Result, 1))
				}
				// The error is the deadline's, or the read timeout the batch
				// got from it (the last caller's deadline is the batch's).
				if took := time.Since(start); err == nil || took > d+500*time.Millisecond {
					t.Errorf("%s, caller %d (deadline %v): err %v after %v; want an error near the deadline", name, i, d, err, took)
				}
			}(i)
		}
	}
	wg.Wait()
}

// TestPipelinedCallsWhoseCallerLeftAreNotSent: a decision whose context has
// ended, or whose deadline has passed, before its batch leaves charges nothing.
func TestPipelinedCallsWhoseCallerLeftAreNotSent(t *testing.T) {
	c := redistest.Start(t).Client()
	s := pipelined(t, c, "")
	r := limiter.Request{Name: "gone", ID: "a", Limit: limiter.MustLimit(5, "1/60"), Cost: 1}
	take(t, s, r)
	before := redistest.CommandStats(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 100; i++ {
		if _, err := s.Take(ctx, []limiter.Request{r}, make([]limiter.Result, 1)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Take with a cancelled context: %v", err)
		}
	}
	past := time.Now().Add(-time.Millisecond)
	for i := 0; i < 100; i++ {
		if _, err := s.TakeBy(context.Background(), past, []limiter.Request{r}, make([]limiter.Result, 1)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TakeBy with a deadline past: %v", err)
		}
	}
	if ok, res := take(t, s, r); !ok || res[0].Remaining != 3 {
		t.Errorf("after 200 decisions cancelled or past their deadline the bucket has %d left, want 3 (only two paid)", res[0].Remaining)
	}
	if d := redistest.CommandStats(t, c)["evalsha"].Calls - before["evalsha"].Calls; d != 1 {
		t.Errorf("%d EVALSHA sent for 200 decisions cancelled or past their deadline and one live one, want 1", d)
	}
}

func TestPipelinedClose(t *testing.T) {
	srv := redistest.Start(t)
	s := redisstore.NewPipelined(srv.Client(), "", redisstore.PipelineOptions{MaxBatch: 4, Flushers: 1})
	r := limiter.Request{Name: "close", ID: "a", Limit: limiter.MustLimit(5, "1"), Cost: 1}
	take(t, s, r)
	s.Close()
	s.Close() // twice is fine
	if _, err := s.Take(context.Background(), []limiter.Request{r}, make([]limiter.Result, 1)); !errors.Is(err, redisstore.ErrClosed) {
		t.Errorf("Take after Close: %v, want ErrClosed", err)
	}
}

// TestPipelinedCloseUnderLoad: callers without any deadline that race
// Close all return, either with a decision or with ErrClosed; none is left
// waiting in the queue.
func TestPipelinedCloseUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	for round := 0; round < 20; round++ {
		s := redisstore.NewPipelined(srv.Client(), "", redisstore.PipelineOptions{MaxBatch: 4, Flushers: 1})
		r := limiter.Request{Name: "close-race", ID: "a", Limit: limiter.MustLimit(1000, "1000"), Cost: 1}
		var wg sync.WaitGroup
		var decided, closed atomic.Int64
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 1000; i++ {
					_, err := s.Take(context.Background(), []limiter.Request{r}, make([]limiter.Result, 1))
					if errors.Is(err, redisstore.ErrClosed) {
						closed.Add(1)
						return
					}
					if err != nil {
						t.Errorf("Take: %v", err)
						return
					}
					decided.Add(1)
				}
			}()
		}
		for start := time.Now(); decided.Load() < 50 && time.Since(start) < 10*time.Second; {
			runtime.Gosched()
		}
		s.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: callers still waiting 10 s after Close", round)
		}
		if closed.Load() == 0 {
			t.Errorf("round %d: no caller saw ErrClosed (%d decisions)", round, decided.Load())
		}
	}
}

// TestPipelinedOnACluster: a cluster client splits each pipeline by node; a
// decision over one identity's buckets is still one script call, and the
// conformance suite passes.
func TestPipelinedOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client()
	ctx := context.Background()
	t.Run("conformance", func(t *testing.T) {
		const prefix = "pconf:"
		storetest.Run(t, harness(pipelined(t, cc, prefix), cc, func(t *testing.T, d time.Duration) { advanceCluster(t, cc, prefix, d) }))
	})
	t.Run("concurrent identities on every node", func(t *testing.T) {
		s := pipelined(t, cc, "pconc:")
		l := limiter.MustLimit(100, "1/3600")
		for i := 0; i < 30; i++ { // the script loaded on every node
			take(t, s, limiter.Request{Name: "api", ID: "warm-" + strconv.Itoa(i), Limit: l, Cost: 1})
		}
		sha0, eval0 := evalshaCalls(t, cl)
		var wg sync.WaitGroup
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				res := make([]limiter.Result, 2)
				reqs := []limiter.Request{
					{Name: "per-key", ID: "user-" + strconv.Itoa(g), Limit: l, Cost: 1},
					{Name: "per-route", ID: "user-" + strconv.Itoa(g), Limit: l, Cost: 1}}
				for i := 0; i < 10; i++ {
					ok, err := s.Take(ctx, reqs, res)
					if err != nil || !ok || res[0].Remaining != int64(99-i) || res[1].Remaining != int64(99-i) {
						t.Errorf("identity %d, decision %d: %v %v %+v", g, i, ok, err, res)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		sha1, eval1 := evalshaCalls(t, cl)
		// Decisions of one slot may share a script call; none is run twice.
		if sha1-sha0 < 1 || sha1-sha0 > 320 || eval1 != eval0 {
			t.Errorf("320 decisions ran %d EVALSHA and %d EVAL, want 1 to 320 and 0", sha1-sha0, eval1-eval0)
		}
	})
}

// TestPipelinesRideTheConnectionCheckServerOpened: a client from Dial keeps
// one pool for single commands and pipelines, so the first pipelined
// decisions after start do not pay a new connection (a TLS handshake, AUTH)
// within their deadline.
func TestPipelinesRideTheConnectionCheckServerOpened(t *testing.T) {
	srv := redistest.Start(t)
	uc, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: 50 * time.Millisecond, DialTimeout: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if err := redisstore.CheckServer(context.Background(), uc); err != nil {
		t.Fatal(err)
	}
	s := pipelined(t, uc, "")
	for i := 0; i < 5; i++ {
		take(t, s, limiter.Request{Name: "first", ID: strconv.Itoa(i), Limit: limiter.MustLimit(5, "1"), Cost: 1})
	}
	st := uc.(*redis.Client).PoolStats()
	conns := st.TotalConns
	if st.PipelineStats != nil {
		conns += st.PipelineStats.TotalConns
	}
	if conns != 1 {
		t.Errorf("after CheckServer and 5 sequential pipelined decisions the client holds %d connections, want 1", conns)
	}
}

// TestNewPipelinedRefusesNoBatchOrNoFlusher: a batch bound or a flusher
// count below 1 is a programmer's mistake, not a request for a default.
func TestNewPipelinedRefusesNoBatchOrNoFlusher(t *testing.T) {
	for _, tc := range []struct {
		o    redisstore.PipelineOptions
		want string
	}{
		{redisstore.PipelineOptions{Flushers: 1}, "PipelineOptions.MaxBatch must be at least 1 (got 0)"},
		{redisstore.PipelineOptions{MaxBatch: -1, Flushers: 1}, "PipelineOptions.MaxBatch must be at least 1 (got -1)"},
		{redisstore.PipelineOptions{MaxBatch: 128}, "PipelineOptions.Flushers must be at least 1 (got 0)"},
		{redisstore.PipelineOptions{MaxBatch: 128, Flushers: -2}, "PipelineOptions.Flushers must be at least 1 (got -2)"},
	} {
		func() {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, tc.want) {
					t.Errorf("NewPipelined(%+v) panicked with %q, want %q", tc.o, msg, tc.want)
				}
			}()
			s := redisstore.NewPipelined(nil, "", tc.o)
			s.Close()
		}()
	}
}
