package redisstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
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

// The pipelined store must be the store: the same conformance suite, the
// same one script call per decision, the same recovery from a flushed script
// cache or a restarted server, and Take must still return by the caller's
// deadline. (The script itself is checked against the model, pipelined, in
// model_internal_test.go.)

func pipelined(t *testing.T, c redisstore.Client, prefix string) *redisstore.Store {
	s := redisstore.NewPipelined(c, prefix, redisstore.PipelineOptions{})
	t.Cleanup(s.Close)
	return s
}

// pipelinedOnAServer starts a redis-server and returns a client to it and
// a pipelined store on that client.
func pipelinedOnAServer(t *testing.T) (*redis.Client, *redisstore.Store) {
	c := redistest.Start(t).Client()
	return c, pipelined(t, c, "")
}

func TestPipelinedConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	storetest.Run(t, harness(pipelined(t, c, ""), c, func(t *testing.T, d time.Duration) { advance(t, c, d) }))
}

func TestPipelinedDecisionIsOneScriptCall(t *testing.T) {
	c, s := pipelinedOnAServer(t)
	l := limiter.MustLimit(5, "1")
	take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: l, Cost: 1})
	before := commandCalls(t, c)
	for i := 0; i < 10; i++ {
		take(t, s,
			limiter.Request{Name: "per-key", ID: "k1", Limit: l, Cost: 1},
			limiter.Request{Name: "per-ip", ID: "k1", Limit: l, Cost: 1})
	}
	after := commandCalls(t, c)
	if d := after["evalsha"] - before["evalsha"]; d != 10 {
		t.Errorf("Redis counted %d EVALSHA calls for 10 decisions, want 10", d)
	}
	if d := after["eval"] - before["eval"]; d != 0 {
		t.Errorf("Redis counted %d EVAL calls: the script was sent again", d)
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
	s := redisstore.NewPipelined(c, "", redisstore.PipelineOptions{OnBatch: func(decisions, calls int) {
		batched.Add(int64(decisions))
		batchCalls.Add(int64(calls))
	}})
	defer s.Close()
	take(t, s, limiter.Request{Name: "warm", ID: "w", Limit: limiter.MustLimit(1, "1"), Cost: 1}) // the script cached: no EVAL below
	h.pipelines.Store(0)
	h.scripts.Store(0)
	h.decisions.Store(0)
	batched.Store(0)
	batchCalls.Store(0)
	before := commandCalls(t, c)
	n := hammer(t, s, c, time.Second)
	after := commandCalls(t, c)
	if batched.Load() != n || batchCalls.Load() != h.scripts.Load() {
		t.Errorf("OnBatch reported %d decisions in %d script calls; %d were decided in %d", batched.Load(), batchCalls.Load(), n, h.scripts.Load())
	}
	t.Logf("%d decisions in %d pipelines (largest %d decisions), %d script calls (largest %d decisions)",
		n, h.pipelines.Load(), h.biggestPipeline.Load(), h.scripts.Load(), h.biggestCall.Load())
	if d := after["evalsha"] - before["evalsha"]; d != h.scripts.Load() {
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
	if h.biggestPipeline.Load() > redisstore.DefaultMaxBatch {
		t.Errorf("a pipeline carried %d decisions, above the maximum batch %d", h.biggestPipeline.Load(), redisstore.DefaultMaxBatch)
	}
}

func TestPipelinedScriptCacheFlushIsTransparent(t *testing.T) {
	c, s := pipelinedOnAServer(t)
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
}

func TestPipelinedRestartedRedisMeansFullBuckets(t *testing.T) {
	srv := redistest.Start(t)
	restartEmpty(t, srv, pipelined(t, srv.Client(), ""))
}

// TestTakeReturnsByTheDeadline: on a paused server, every caller, the one
// whose batch is on the wire and those queued behind it, gets its error by
// its own deadline, even with a client timeout far longer: a deadline given
// by the context (Take) or alongside it (TakeBy), pipelined or not.
func TestTakeReturnsByTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	c, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: 10 * time.Second, PoolSize: 64})
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
	c, s := pipelinedOnAServer(t)
	r := limiter.Request{Name: "gone", ID: "a", Limit: limiter.MustLimit(5, "1/60"), Cost: 1}
	take(t, s, r)
	before := commandCalls(t, c)
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
	if d := commandCalls(t, c)["evalsha"] - before["evalsha"]; d != 1 {
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
		s := redisstore.NewPipelined(srv.Client(), "", redisstore.PipelineOptions{MaxBatch: 4})
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
	uc, err := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}})
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
