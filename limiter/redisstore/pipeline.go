package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pipelining. Without it every decision is one round trip on a connection of
// its own: Redis pays a read and a write system call per script call, the
// client as much again, and at a few hundred microseconds per round trip the
// pool needs as many connections as decisions in flight. With it, decisions
// that arrive while others are on the wire leave together: one write and
// one read for the whole batch on each side, and one script call for up to
// perScript of them (tokenbucket.lua decides them in turn, each atomic on
// its own, so Redis parses, looks up and starts one script instead of
// many). Against one EVALSHA per decision in one pipeline, that took about
// a quarter of Redis' CPU per decision off in make bench.
//
// The coalescer is small on purpose. Flushers (PipelineOptions.Flushers, one
// connection each at a time) take the first waiting decision, add every
// other one already waiting up to MaxBatch, and send them at once: a batch
// leaves as soon as it is full or nothing else is waiting, so a lone
// decision is sent at once (no timer, no added delay at low load) and
// batches grow only when decisions queue up behind a batch on the wire.
//
// go-redis' own AutoPipeline (v9.23) was considered and not used: it does
// not honour a command's context once the command is queued (its blocking
// face waits for the batch whatever the context says, and on its deferred
// face Script.Run reads the EVALSHA result without a context), while the
// resilience layer relies on Take returning by its deadline. Here a caller
// whose context ends stops waiting at once, and a decision whose context has
// ended before its batch leaves is dropped, not sent: it can no longer
// charge a bucket for a request already answered by the failure mode.

// DefaultMaxBatch bounds the decisions in one pipeline when
// PipelineOptions.MaxBatch is 0. At 7–10 µs of Redis time per decision a full
// batch is about a millisecond of Redis' time.
const DefaultMaxBatch = 128

// DefaultFlushers is the number of batches that may be on the wire at once
// when PipelineOptions.Flushers is 0. One is best when Redis runs on the same
// few cores as its clients: every decision that arrives while a batch is on
// the wire joins the next one, so batches are as deep as the load allows and
// Redis pays its per-read and per-write system calls once per batch. On the
// make bench machine (2 cores) one flusher against two gave pipelines about
// 1.7 times deeper, 1–2 µs less Redis CPU per decision and a lower p99. More
// flushers suit a Redis with cores of its own and a long round trip, where
// Redis would otherwise idle while a batch's replies travel back.
const DefaultFlushers = 1

// PipelineOptions tune the coalescer of NewPipelined.
type PipelineOptions struct {
	// MaxBatch bounds the decisions sent in one pipeline (default DefaultMaxBatch).
	MaxBatch int
	// Flushers is how many batches may be in flight at once, each on one
	// connection (default DefaultFlushers).
	Flushers int
	// OnBatch, when set, is called after each batch with the decisions it
	// sent and the script calls that carried them (a decision run again
	// alone after failing in a shared call counts twice as a call): how
	// deep the pipelines run in production. It must not block.
	OnBatch func(decisions, scriptCalls int)
}

// PipelineClient is what pipelining needs of a client: scripts and
// pipelines. *redis.Client (standalone or Sentinel) and *redis.ClusterClient
// (which splits a pipeline by node) both are.
type PipelineClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// ErrClosed is returned by Take on a pipelined store after Close.
var ErrClosed = errors.New("redis: store closed")

// NewPipelined is New with pipelining: concurrent decisions share round
// trips (see the comment at the top of pipeline.go). Close stops it.
func NewPipelined(client PipelineClient, prefix string, o PipelineOptions) *Store {
	s := New(client, prefix)
	s.pipe = newCoalescer(client, o)
	return s
}

// Close stops a pipelined store's flushers; decisions waiting for a batch
// fail with ErrClosed. It does not close the client. It is a no-op on a
// store made by New.
func (s *Store) Close() {
	if s.pipe != nil {
		s.pipe.close()
	}
}

// run runs script once for one decision: in a shared pipeline when the
// store pipelines, else on its own round trip. A non-zero deadline bounds it
// as well as ctx (only a pipelined store is given one: takeBy derives a
// context for the others).
func (s *Store) run(ctx context.Context, deadline time.Time, keys []string, buckets []bucketArgs, extra []any) ([]int64, error) {
	if s.pipe == nil {
		return s.script.Run(ctx, s.client, keys, oneDecision(buckets, extra)...).Int64Slice()
	}
	return s.pipe.run(ctx, deadline, s.script, keys, buckets, extra)
}

// call is one decision waiting for, or riding, a batch. Calls are pooled:
// a caller that got its reply returns its call; one that stopped waiting
// (its context ended) leaves it to the collector, as the batch may still
// hold it.
type call struct {
	ctx      context.Context
	deadline time.Time   // the earlier of ctx's deadline and the caller's; zero: none
	timer    *time.Timer // fires at deadline; kept with the pooled call
	script   *redis.Script
	keys     []string
	buckets  []bucketArgs
	extra    []any // arguments after the buckets' (tests: a clock)
	reply    []int64
	err      error
	done     chan struct{} // one send (buffered) once reply or err is final
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func (cl *call) finish() { cl.done <- struct{}{} }

type coalescer struct {
	client   PipelineClient
	cluster  bool // client is a Redis Cluster client: script calls are per slot
	maxBatch int
	onBatch  func(decisions, scriptCalls int)
	calls    chan *call
	quit     chan struct{}
	closed   atomic.Bool // set before quit closes
	once     sync.Once
	wg       sync.WaitGroup
}

func newCoalescer(client PipelineClient, o PipelineOptions) *coalescer {
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.Flushers <= 0 {
		o.Flushers = DefaultFlushers
	}
	_, cluster := client.(*redis.ClusterClient)
	c := &coalescer{
		client:   client,
		cluster:  cluster,
		maxBatch: o.MaxBatch,
		onBatch:  o.OnBatch,
		// Room for every flusher's next full batch: beyond that, callers
		// wait to enqueue (bounded by their own deadline).
		calls: make(chan *call, o.MaxBatch*o.Flushers),
		quit:  make(chan struct{}),
	}
	c.wg.Add(o.Flushers)
	for i := 0; i < o.Flushers; i++ {
		go c.flusher()
	}
	return c
}

func (c *coalescer) close() {
	c.once.Do(func() {
		c.closed.Store(true)
		close(c.quit)
	})
	c.wg.Wait()
	c.failQueued()
}

// failQueued completes every queued call with ErrClosed: once the flushers
// are gone nothing else will. A caller that queues a call after close has
// drained the queue sees closed set and calls it too, so no call is left
// waiting in the queue.
func (c *coalescer) failQueued() {
	for {
		select {
		case cl := <-c.calls:
			cl.err = ErrClosed
			cl.finish()
		default:
			return
		}
	}
}

// run queues one script call and waits for its reply, for ctx to end or for
// deadline (if not zero), whichever comes first.
func (c *coalescer) run(ctx context.Context, deadline time.Time, script *redis.Script, keys []string, buckets []bucketArgs, extra []any) ([]int64, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	cl := callPool.Get().(*call)
	cl.ctx, cl.deadline, cl.script, cl.keys, cl.buckets, cl.extra = ctx, deadline, script, keys, buckets, extra
	var expired <-chan time.Time
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			cl.recycle()
			return nil, context.DeadlineExceeded
		}
		if cl.timer == nil {
			cl.timer = time.NewTimer(left)
		} else {
			cl.timer.Reset(left)
		}
		expired = cl.timer.C
	}
	// Try the queue alone first: a select over several channels locks them
	// all, and every caller shares c.calls and c.quit.
	select {
	case c.calls <- cl:
	default:
		select {
		case c.calls <- cl:
		case <-ctx.Done():
			cl.recycle()
			return nil, ctx.Err()
		case <-expired:
			cl.recycle()
			return nil, context.DeadlineExceeded
		case <-c.quit:
			cl.recycle()
			return nil, ErrClosed
		}
	}
	if c.closed.Load() {
		// Closing: the flushers may be gone before they reach this call.
		c.failQueued()
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		// The batch may still carry the call; its reply is dropped.
		return nil, ctx.Err()
	case <-expired:
		return nil, context.DeadlineExceeded
	}
	reply, err := cl.reply, cl.err
	cl.recycle()
	return reply, err
}

// recycle returns a call whose reply has been read (or that was never
// queued) to the pool, its timer stopped.
func (cl *call) recycle() {
	if cl.timer != nil {
		cl.timer.Stop()
	}
	cl.ctx, cl.deadline, cl.script, cl.keys, cl.buckets, cl.extra, cl.reply, cl.err = nil, time.Time{}, nil, nil, nil, nil, nil, nil
	callPool.Put(cl)
}

// flusher sends batches until the coalescer closes: it waits for one call,
// takes every other call already waiting (up to maxBatch), and sends them.
func (c *coalescer) flusher() {
	defer c.wg.Done()
	batch := make([]*call, 0, c.maxBatch)
	live := make([]*call, 0, c.maxBatch)
	for {
		select {
		case cl := <-c.calls:
			batch = append(batch, cl)
		case <-c.quit:
			return
		}
	fill:
		for len(batch) < c.maxBatch {
			select {
			case cl := <-c.calls:
				batch = append(batch, cl)
			default:
				break fill
			}
		}
		c.flush(batch, live)
		clear(batch)
		clear(live[:cap(live)])
		batch = batch[:0]
	}
}

// flush sends one batch and completes every call in it. Calls whose
// context already ended are completed with its error and not sent. The
// others share script calls: up to perScript decisions in one EVALSHA (on a
// Cluster, decisions of one slot), all of a batch's script calls in one
// pipeline. A decision the script reports as failed (allowed = -1) is run
// again on its own, which yields its error. A script call whose script is
// not in Redis' cache (NOSCRIPT: Redis restarted, or SCRIPT FLUSH) is sent
// again with EVAL, which caches it, as Script.Run does.
func (c *coalescer) flush(batch, live []*call) {
	var deadline time.Time
	bounded := true
	now := time.Now()
	for _, cl := range batch {
		err := cl.ctx.Err()
		if err == nil && !cl.deadline.IsZero() && !now.Before(cl.deadline) {
			err = context.DeadlineExceeded
		}
		if err != nil {
			cl.err = err
			cl.finish()
			continue
		}
		live = append(live, cl)
		if cl.deadline.IsZero() {
			bounded = false
		} else if cl.deadline.After(deadline) {
			deadline = cl.deadline
		}
	}
	if len(live) == 0 {
		return
	}
	// The batch runs until the last of its callers stops waiting (the
	// client's read and write timeouts bound it too); no single caller's
	// cancellation cuts the batch short for the others.
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if bounded {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()

	calls := c.scriptCalls(ctx, live)
	pipe := c.client.Pipeline()
	for _, sc := range calls {
		_ = pipe.Process(ctx, sc.cmd)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	var again []*scriptCall
	for _, sc := range calls {
		reply, err := sc.cmd.Result()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, sc)
			continue
		}
		sc.deliver(reply, err)
	}
	if len(again) > 0 {
		evals := make([]*redis.Cmd, len(again))
		pipe = c.client.Pipeline()
		for i, sc := range again {
			evals[i] = sc.script.Eval(ctx, pipe, sc.keys(), sc.args()...)
		}
		_, _ = pipe.Exec(ctx)
		for i, sc := range again {
			sc.deliver(evals[i].Int64Slice())
		}
	}
	// Decisions that failed inside a shared script call, alone: their
	// reply or their own error.
	var alone []*scriptCall
	for _, cl := range live {
		if cl.err == nil && len(cl.reply) > 0 && cl.reply[0] < 0 {
			sc := &scriptCall{script: cl.script, calls: []*call{cl}}
			sc.cmd = sc.evalSha(ctx)
			alone = append(alone, sc)
		}
	}
	if len(alone) > 0 {
		pipe = c.client.Pipeline()
		for _, sc := range alone {
			_ = pipe.Process(ctx, sc.cmd)
		}
		_, _ = pipe.Exec(ctx)
		for _, sc := range alone {
			sc.deliver(sc.cmd.Result())
		}
	}
	// Counted before any caller hears back, so that what a caller saw is
	// already in the counts.
	if c.onBatch != nil {
		c.onBatch(len(live), len(calls)+len(again)+len(alone))
	}
	for _, cl := range live {
		cl.finish()
	}
}

// perScript bounds the decisions one script call runs. Redis runs nothing
// else while a script runs: at about 7 µs a decision, 32 of them hold it for
// about a quarter of a millisecond. A larger batch is several script calls
// in one pipeline, between which Redis serves its other clients.
const perScript = 32

// scriptCall is one EVALSHA deciding several calls' decisions.
type scriptCall struct {
	script *redis.Script
	calls  []*call
	cmd    *redis.IntSliceCmd
}

// scriptCalls groups live into script calls: in arrival order, up to
// perScript decisions each, of one script and, on a Cluster, of one slot. A
// call with arguments beyond its buckets' (tests pass a clock that way)
// rides alone, its extra arguments last.
func (c *coalescer) scriptCalls(ctx context.Context, live []*call) []*scriptCall {
	var out []*scriptCall
	open := map[int]*scriptCall{} // by slot (always 0 outside a Cluster): the group still filling
	for _, cl := range live {
		slot := 0
		if c.cluster {
			slot = Slot(cl.keys[0])
		}
		sc := open[slot]
		plain := len(cl.extra) == 0
		if sc == nil || sc.script != cl.script || len(sc.calls) == perScript || !plain {
			sc = &scriptCall{script: cl.script}
			out = append(out, sc)
			open[slot] = sc
		}
		sc.calls = append(sc.calls, cl)
		if !plain {
			delete(open, slot)
		}
	}
	for _, sc := range out {
		sc.cmd = sc.evalSha(ctx)
	}
	return out
}

// keys are the script call's KEYS: every decision's buckets in turn.
func (sc *scriptCall) keys() []string {
	if len(sc.calls) == 1 {
		return sc.calls[0].keys
	}
	n := 0
	for _, cl := range sc.calls {
		n += len(cl.keys)
	}
	keys := make([]string, 0, n)
	for _, cl := range sc.calls {
		keys = append(keys, cl.keys...)
	}
	return keys
}

// args are the script call's ARGV (see tokenbucket.lua): its decisions in
// turn, each distinct limit once; a lone call's extra arguments last.
func (sc *scriptCall) args() []any {
	var extra []any
	if len(sc.calls) == 1 {
		extra = sc.calls[0].extra
	}
	return takeArgv(len(sc.calls), func(j int) []bucketArgs { return sc.calls[j].buckets }, extra)
}

// evalSha is EVALSHA sha keys args, as go-redis' Script builds it, its first
// key marked for Cluster routing. An IntSliceCmd reads the script's reply
// (an array of integers) straight into []int64 instead of a tree of
// interfaces converted afterwards.
func (sc *scriptCall) evalSha(ctx context.Context) *redis.IntSliceCmd {
	keys, args := sc.keys(), sc.args()
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", sc.script.Hash(), len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewIntSliceCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// deliver hands each call its part of the script call's reply: allowed and
// one value per bucket. An error, or a reply of the wrong length, goes to
// every call.
func (sc *scriptCall) deliver(reply []int64, err error) {
	if err == nil {
		want := 0
		for _, cl := range sc.calls {
			want += 1 + len(cl.keys)
		}
		if len(reply) != want {
			err = fmt.Errorf("token-bucket script returned %d values for %d decisions (%d expected)", len(reply), len(sc.calls), want)
		}
	}
	pos := 0
	for _, cl := range sc.calls {
		if err != nil {
			cl.reply, cl.err = nil, err
			continue
		}
		n := 1 + len(cl.keys)
		cl.reply, cl.err = reply[pos:pos+n:pos+n], nil
		pos += n
	}
}
