package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// testPipeline is how the tests here pipeline: Floodgate's default batch
// bound and flushers (internal/config's, which this package's own tests
// cannot import), and no wait.
var testPipeline = PipelineOptions{MaxBatch: 128, Flushers: 1}

// TestPipelinedScriptMatchesTheRationalModel is
// TestScriptMatchesTheRationalModel through the coalescer: the real script on
// an injected clock, checked decision by decision against the model.
func TestPipelinedScriptMatchesTheRationalModel(t *testing.T) {
	srv := redistest.Start(t)
	s := NewPipelined(srv.Client(), "", testPipeline)
	defer s.Close()
	storetest.RunModel(t, 3, 2500, modelTake(t, s))
}

// TestBatchesMatchTheRationalModel: batches of up to 40 decisions (more than
// one script call holds), one instant each, often naming one bucket several
// times, through the coalescer's own flush and the real script: decided in
// turn, every figure what the model gives one by one.
func TestBatchesMatchTheRationalModel(t *testing.T) {
	srv := redistest.Start(t)
	s := NewPipelined(srv.Client(), "", testPipeline)
	defer s.Close()
	var decisions, scriptCalls, batches int
	s.pipe.onBatch = func(d, calls int) { decisions, scriptCalls, batches = decisions+d, scriptCalls+calls, batches+1 }
	storetest.RunModelBatched(t, 5, 4000, 40, 3, batchTake(t, s))
	t.Logf("%d decisions in %d batches, %d script calls", decisions, batches, scriptCalls)
	if scriptCalls <= batches || scriptCalls*4 > decisions {
		t.Errorf("%d decisions in %d batches went out in %d script calls: the batches were not shared, or not split", decisions, batches, scriptCalls)
	}
}

// batchTake is the batched model's TakeBatchAt for s: the batch through the
// coalescer's own flush, at the injected instant.
func batchTake(t *testing.T, s *Store) storetest.TakeBatchAt {
	setClock := testClockAt(t, s)
	return func(at time.Duration, reqs [][]limiter.Request, res [][]limiter.Result) ([]bool, []error) {
		setClock(at)
		calls := make([]*call, len(reqs))
		for j := range reqs {
			if err := limiter.Validate(reqs[j], res[j]); err != nil {
				t.Fatal(err)
			}
			keys, buckets := s.prepare(reqs[j])
			calls[j] = newCall(keys, buckets...)
		}
		flushOne(t, s.pipe, calls)
		ok, errs := make([]bool, len(calls)), make([]error, len(calls))
		for j, cl := range calls {
			if errs[j] = cl.err; cl.err == nil {
				ok[j] = results(reqs[j], res[j], cl.reply)
			}
		}
		return ok, errs
	}
}

// TestClusterBatchesMatchTheRationalModel is
// TestBatchesMatchTheRationalModel on a Redis Cluster of three masters, with
// one-bucket decisions (the coalescer takes decisions of one slot; a
// decision across slots takes takeAcrossSlots): each call decides buckets
// of several slots of one node, often one bucket several times.
func TestClusterBatchesMatchTheRationalModel(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := NewPipelined(cl.Client(), "", testPipeline)
	defer s.Close()
	var crossSlot int
	s.pipe.onBatch = func(d, calls int) {
		if calls < d {
			crossSlot++
		}
	}
	storetest.RunModelBatched(t, 9, 3000, 40, 1, batchTake(t, s))
	if crossSlot == 0 {
		t.Error("no batch shared a script call across slots")
	}
}

// flushOne sends calls as one batch through c, as a flusher would, and
// returns each call's reply and error.
func flushOne(t *testing.T, c *coalescer, calls []*call) {
	t.Helper()
	c.flush(calls, make([]*call, 0, len(calls)), false)
	for i, cl := range calls {
		select {
		case <-cl.done:
		default:
			t.Fatalf("call %d was not completed by its batch", i)
		}
	}
}

func newCall(keys []string, buckets ...bucketArgs) *call {
	return &call{ctx: context.Background(), keys: keys, buckets: buckets, done: make(chan struct{}, 1)}
}

// TestOneScriptCallDecidesInTurn: decisions that share a script call are
// decided one after the other at one instant: on a bucket of 3 (refilling
// once an hour), five decisions of one token pass three times; a decision
// over two buckets that one of them denies charges neither, and the next
// decision sees both as they were.
func TestOneScriptCallDecidesInTurn(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	if err := c.ScriptLoad(context.Background(), takeScript.src).Err(); err != nil { // no NOSCRIPT retry to count
		t.Fatal(err)
	}
	h := &scriptCounter{}
	c.AddHook(h)
	s := NewPipelined(c, "", testPipeline)
	defer s.Close()
	l := limiter.MustLimit(3, "1/3600")
	k, _ := l.Units()
	one := bucketArgs{limitArgsOf(l), limiter.Take, 1}
	hot, other := s.Key("hot", "a"), s.Key("other", "a")
	var calls []*call
	for i := 0; i < 5; i++ {
		calls = append(calls, newCall([]string{hot}, one))
	}
	calls = append(calls, newCall([]string{other, hot}, one, one), newCall([]string{other}, one))
	flushOne(t, s.pipe, calls)
	if h.scripts != 1 {
		t.Errorf("7 decisions went out in %d script calls, want 1", h.scripts)
	}
	for i, want := range []int64{1, 1, 1, 0, 0, 0, 1} {
		cl := calls[i]
		if cl.err != nil || len(cl.reply) != 1+len(cl.keys) || cl.reply[0] != want {
			t.Fatalf("decision %d: reply %v err %v, want allowed=%d", i, cl.reply, cl.err, want)
		}
	}
	// Units missing after each: the hot bucket empties at the third; the
	// denied two-bucket decision reports both as they were (other full, hot
	// empty); the last takes one token from other.
	if m := calls[2].reply[1]; m != 3*k {
		t.Errorf("hot after three tokens misses %d units, want %d", m, 3*k)
	}
	if r := calls[5].reply; r[1] != 0 || r[2] != 3*k {
		t.Errorf("the denied decision saw other %d, hot %d missing; want 0 and %d", r[1], r[2], 3*k)
	}
	if m := calls[6].reply[1]; m != k {
		t.Errorf("other after one token misses %d units, want %d", m, k)
	}
}

// TestAFailingDecisionDoesNotFailItsScriptCall: a key of another type under
// the prefix makes its decision fail (WRONGTYPE); the decisions that shared
// its script call are decided as usual, and the failing one gets
// ErrKeyType, having charged nothing.
func TestAFailingDecisionDoesNotFailItsScriptCall(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := NewPipelined(c, "", testPipeline)
	defer s.Close()
	ctx := context.Background()
	l := limiter.MustLimit(3, "1/3600")
	k, _ := l.Units()
	one := bucketArgs{limitArgsOf(l), limiter.Take, 1}
	bad := s.Key("api", "hash")
	if err := c.HSet(ctx, bad, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpire(ctx, bad, time.Hour).Err(); err != nil { // so the script reads its value
		t.Fatal(err)
	}
	good1, good2 := s.Key("api", "one"), s.Key("api", "two")
	calls := []*call{
		newCall([]string{good1}, one),
		newCall([]string{good2, bad}, one, one),
		newCall([]string{good2}, one),
	}
	flushOne(t, s.pipe, calls)
	for _, i := range []int{0, 2} {
		if cl := calls[i]; cl.err != nil || cl.reply[0] != 1 || cl.reply[1] != k {
			t.Errorf("decision %d beside the failing one: reply %v err %v, want allowed with one token taken", i, cl.reply, cl.err)
		}
	}
	if err := calls[1].err; !errors.Is(err, ErrKeyType) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("the decision on a hash key: reply %v err %v, want ErrKeyType", calls[1].reply, err)
	}
	// It charged nothing: good2 lost exactly the one token of decision 2.
	if v, err := c.Get(ctx, good2).Result(); err != nil {
		t.Fatalf("good2: %v", err)
	} else if calls[2].reply[1] != k {
		t.Errorf("good2 misses %d units after its one decision (value %s), want %d", calls[2].reply[1], v, k)
	}
}

// scriptCounter counts the script calls a client sends, alone or in pipelines.
type scriptCounter struct{ scripts int }

func (*scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if c.Name() == "evalsha" || c.Name() == "eval" {
			h.scripts++
		}
		return next(ctx, c)
	}
}
func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" || c.Name() == "eval" {
				h.scripts++
			}
		}
		return next(ctx, cmds)
	}
}

// TestACrossSlotCallRefusedIsDecidedSlotBySlot: on a Cluster, one script
// call decides buckets of several slots of one node. A call that meets a
// key its node does not hold (as when a slot moves between the split and
// the call) fails whole, writing nothing, and its decisions are decided
// again slot by slot: each charged exactly once.
func TestACrossSlotCallRefusedIsDecidedSlotBySlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := NewPipelined(cl.Client(), "", testPipeline)
	defer s.Close()
	l := limiter.MustLimit(5, "1/3600")
	k, _ := l.Units()
	one := bucketArgs{limitArgsOf(l), limiter.Take, 1}
	// One key on each node, in one part as if one node held them all.
	nodes := map[*redistest.Server]bool{}
	var calls []*call
	for i := 0; len(calls) < 3 && i < 1000; i++ {
		key := s.Key("moved", fmt.Sprint("id", i))
		if n := cl.NodeFor(key); !nodes[n] {
			nodes[n] = true
			calls = append(calls, newCall([]string{key}, one))
		}
	}
	if sent := s.pipe.decide(context.Background(), []batchPart{calls}); sent != 4 {
		t.Errorf("%d script calls, want 4: the refused one, then one per slot", sent)
	}
	for i, cl := range calls {
		if cl.err != nil || cl.reply[0] != 1 || cl.reply[1] != k {
			t.Errorf("decision %d: reply %v err %v, want allowed with one token taken", i, cl.reply, cl.err)
		}
	}
}
