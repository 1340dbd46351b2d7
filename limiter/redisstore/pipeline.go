package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
)

// Pipelining. Without it every decision is one round trip on a connection of
// its own: Redis pays a read and a write system call per script call, the
// client as much again, and at a few hundred microseconds per round trip the
// pool needs as many connections as decisions in flight. With it, decisions
// that arrive while others are on the wire leave together: one write and
// one read for the whole batch on each side, and one script call for up to
// perScript of them (tokenbucket.lua decides them in turn, each atomic on
// its own, so Redis parses, looks up and starts one script instead of
// many; docs/performance.md has the figures).
//
// The coalescer is small on purpose. Flushers (PipelineOptions.Flushers, one
// connection each at a time) take the first waiting decision, add every
// other one already waiting up to MaxBatch, and send them at once: a batch
// leaves as soon as it is full or nothing else is waiting, so a lone
// decision is sent at once (no added delay at low load) and batches grow
// when decisions queue up behind a batch on the wire. One exception: when
// the flusher's previous batch held at least minWaitBatch decisions (the
// load is steady and high enough that decisions keep arriving) and this one
// holds fewer, it waits up to PipelineOptions.Wait for more to join, until
// it holds as many as the previous one. Under moderate load the pipelines
// are otherwise shallow and each batch's fixed costs (a write and a read on
// each side, waking Redis, a script call) fall on few decisions;
// docs/performance.md has the figures.
//
// A Redis far away, or slow. Waiting for the batch on the wire costs a
// decision up to a round trip before its own begins: nothing against a 50
// ms timeout while round trips take a tenth of a millisecond, but with
// round trips of 30 ms a decision could wait 30 and then take 30, time out,
// and the breaker opened on a Redis that answered every call in time. So,
// once the longest recent round trip is over a quarter of what a batch's
// first decision has left, the flusher sends the batch from a goroutine of
// its own instead of waiting on it, and waits for the wire only until the
// latest moment its next batch can leave and still be back by its first
// decision's deadline (with an eighth of a round trip to spare); then that
// batch leaves beside the one on the wire, on another connection of the
// client's pool (up to the pool's size in all, less the Flushers). A
// connection new to the pool costs its batch a handshake round trip first;
// the reply of a flusher's batch is read for one round trip past its
// callers' deadlines (see flush), so the connection is kept for the next.
// A Redis that seems to have stopped answering (the batch on the wire out
// for two round trips) gets no extra batch: it would only cost connections;
// nor does a link whose bandwidth is what makes round trips long, once
// extra batches stop coming back in time (see extrasPay).
//
// A Redis a network hop away. A same-zone hop of half a millisecond or more
// is short against the deadlines but long against Redis' own work, and a
// decision that arrives while a batch is on the wire would wait for its
// reply, half a round trip on average, before its own leaves. So, once the
// shortest recent round trip of a small batch (floor: the wire, not Redis'
// work) is at least
// hopFloor, a batch that finds the wire taken leaves beside it at once, on
// another connection, with the same bounds as above and hopExtras at most
// (past them it waits for whichever batch is back first). Near Redis (loopback,
// or a host whose round trips come back faster) a batch waits and grows as
// before: its fewer script calls are what the wait buys.
// docs/performance/network-hop.md has the figures.
//
// go-redis' own AutoPipeline (v9.23) was considered and not used: it does
// not honour a command's context once the command is queued (its blocking
// face waits for the batch whatever the context says, and on its deferred
// face Script.Run reads the EVALSHA result without a context), while the
// resilience layer relies on Take returning by its deadline. Here a caller
// whose context ends stops waiting at once, and a decision whose context has
// ended before its batch leaves is dropped, not sent: it can no longer
// charge a bucket for a request already answered by the failure mode.

// minWaitBatch is the smallest previous batch after which a flusher waits
// for a smaller one to grow: below it the load is light, and a decision
// leaves at once.
const minWaitBatch = 4

// PipelineOptions tune the coalescer of NewPipelined.
type PipelineOptions struct {
	// MaxBatch bounds the decisions sent in one pipeline; at least 1.
	MaxBatch int
	// Flushers is how many batches may be in flight at once, each on one
	// connection, while round trips are short against the deadlines; at
	// least 1. One gives the deepest batches, best when Redis shares cores
	// with its clients (docs/performance.md compares one flusher with two).
	// When a round trip is a large part of a decision's deadline, batches
	// that cannot wait for these leave beside them (see "A Redis far away"
	// above), and so do batches across a network hop (see "A Redis a
	// network hop away").
	Flushers int
	// Wait bounds how long a flusher holds a batch smaller than its
	// previous one (of at least minWaitBatch decisions) for more decisions
	// to join; 0 (or less) never holds one. Floodgate's configuration
	// documents the usual value (store.redis.pipeline_wait).
	Wait time.Duration
	// OnBatch, when set, is called after each batch with the decisions it
	// sent and the script calls that carried them: how deep the pipelines
	// run in production. It must not block.
	OnBatch func(decisions, scriptCalls int)
}

// ErrClosed is returned by Take on a pipelined store after Close.
var ErrClosed = errors.New("redis: store closed")

// NewPipelined is New with pipelining: concurrent decisions share round
// trips (see the comment at the top of pipeline.go). Close stops it.
//
// On a Redis Cluster each master gets a coalescer of its own (flushers,
// queue and batches): a batch waits for the slowest node it carries, so a
// master that hangs or is gone would otherwise hold up, behind its own
// timeouts, the decisions of every healthy master sharing its batches.
//
// It panics when o.MaxBatch or o.Flushers is below 1: a programmer's
// mistake, as a configuration's values are checked before they get here.
func NewPipelined(client Client, prefix string, o PipelineOptions) *Store {
	if o.MaxBatch < 1 {
		panic(fmt.Sprintf("redisstore.NewPipelined: PipelineOptions.MaxBatch must be at least 1 (got %d)", o.MaxBatch))
	}
	if o.Flushers < 1 {
		panic(fmt.Sprintf("redisstore.NewPipelined: PipelineOptions.Flushers must be at least 1 (got %d)", o.Flushers))
	}
	s := New(client, prefix)
	s.pipeOpts = o
	s.pipe = newCoalescer(s, o)
	return s
}

// Close stops a pipelined store's flushers; decisions waiting for a batch
// fail with ErrClosed. It does not close the client. It is a no-op on a
// store made by New.
func (s *Store) Close() {
	if s.pipe == nil {
		return
	}
	s.pipesMu.Lock()
	s.pipesClosed = true
	s.pipesMu.Unlock()
	s.pipe.close()
	s.pipes.Range(func(_, c any) bool {
		c.(*coalescer).close()
		return true
	})
}

// pipeFor returns the coalescer of the master serving key: on a Cluster,
// the one of that master (made on first use); otherwise, or before the
// client has read the cluster's slot map, the store's own.
func (s *Store) pipeFor(ctx context.Context, key string) *coalescer {
	addr := s.masterOf(ctx, key)
	if addr == "" {
		return s.pipe
	}
	if c, ok := s.pipes.Load(addr); ok {
		return c.(*coalescer)
	}
	s.pipesMu.Lock()
	defer s.pipesMu.Unlock()
	if s.pipesClosed {
		return s.pipe // closed: its run says ErrClosed
	}
	if c, ok := s.pipes.Load(addr); ok {
		return c.(*coalescer)
	}
	c := newCoalescer(s, s.pipeOpts)
	s.pipes.Store(addr, c)
	return c
}

// call is one decision waiting for, or riding, a batch. Calls are pooled:
// a caller that got its reply returns its call; one that stopped waiting
// (its context ended) leaves it to the collector, as the batch may still
// hold it.
type call struct {
	ctx      context.Context
	deadline time.Time   // the earlier of ctx's deadline and the caller's; zero: none
	timer    *time.Timer // fires at the caller's own deadline; kept with the pooled call
	keys     []string
	buckets  []bucketArgs
	reply    []int64
	err      error
	done     chan struct{} // one send (buffered) once reply or err is final
	state    atomic.Int32  // waiting, left or answered (see left)
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func (cl *call) finish() { cl.done <- struct{}{} }

type coalescer struct {
	store    *Store
	maxBatch int
	wait     time.Duration // <= 0: never
	onBatch  func(decisions, scriptCalls int)
	calls    chan *call
	// wire holds one token per batch on the wire (Flushers of them): a
	// flusher takes one before it sends, and so does a caller that finds
	// none taken and nobody queued, and sends its decision itself.
	wire chan struct{}
	// extra holds one token per batch sent beside them because it could
	// not wait for the wire (see "A Redis far away" above); its capacity is
	// the client's pool size less Flushers.
	extra chan struct{}
	// hop holds one token per batch sent beside them across a hop (see "A
	// Redis a network hop away" above), each with an extra token too.
	hop chan struct{}
	// rtt is the longest recent round trip of a batch that Redis answered
	// (nanoseconds: a new longest at once, a shorter one an eighth of the
	// way); wireAt is when a batch last took a wire token (Unix
	// nanoseconds): with one flusher, when the batch on the wire left.
	rtt    atomic.Int64
	wireAt atomic.Int64
	// floorCur and floorPrev are the shortest round trips of a batch that
	// Redis answered in the current window of floorWindow, begun at floorAt
	// (Unix nanoseconds), and in the one before it (nanoseconds; 0: none
	// seen), of floorCurN and floorPrevN batches: how long the wire itself
	// is, whatever Redis' queue adds.
	floorCur, floorPrev, floorAt atomic.Int64
	floorCurN, floorPrevN        atomic.Int64
	// extraMisses and extraAt: see extrasPay.
	extraMisses atomic.Int64
	extraAt     atomic.Int64
	quit        chan struct{}
	closed      atomic.Bool // set before quit closes
	once        sync.Once
	wg          sync.WaitGroup
}

func newCoalescer(s *Store, o PipelineOptions) *coalescer {
	c := &coalescer{
		store:    s,
		maxBatch: o.MaxBatch,
		wait:     o.Wait,
		onBatch:  o.OnBatch,
		// Room for every flusher's next full batch: beyond that, callers
		// wait to enqueue (bounded by their own deadline).
		calls: make(chan *call, o.MaxBatch*o.Flushers),
		wire:  make(chan struct{}, o.Flushers),
		extra: make(chan struct{}, max(0, poolSize(s.client)-o.Flushers)),
		hop:   make(chan struct{}, hopExtras),
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

// run queues one decision, cl (from callPool) deciding keys and buckets
// (cl's own buffers, or none), and waits for its reply, for ctx to end or
// for deadline (if not zero), whichever comes first. Only a deadline of the
// caller's own needs a timer: ctx's ends ctx.
func (c *coalescer) run(ctx context.Context, deadline time.Time, cl *call, keys []string, buckets []bucketArgs) ([]int64, error) {
	cl.keys, cl.buckets = keys, buckets
	if c.closed.Load() {
		cl.recycle()
		return nil, ErrClosed
	}
	own := !deadline.IsZero()
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	cl.ctx, cl.deadline = ctx, deadline
	var expired <-chan time.Time
	if own {
		left := time.Until(deadline)
		if left <= 0 {
			cl.recycle()
			return nil, context.DeadlineExceeded
		}
		if c.sendAlone(cl) {
			reply, err := cl.reply, cl.err
			cl.recycle()
			return reply, err
		}
		if cl.timer == nil {
			cl.timer = time.NewTimer(left)
		} else {
			cl.timer.Reset(left)
		}
		expired = cl.timer.C
	}
	if !own && c.sendAlone(cl) {
		reply, err := cl.reply, cl.err
		cl.recycle()
		return reply, err
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
		// The batch may still carry the call: its reply is dropped and,
		// if it took, refunded (see left), unless the batch answered first.
		if cl.state.CompareAndSwap(waiting, left) {
			return nil, ctx.Err()
		}
		<-cl.done
	case <-expired:
		if cl.state.CompareAndSwap(waiting, left) {
			return nil, context.DeadlineExceeded
		}
		<-cl.done
	}
	reply, err := cl.reply, cl.err
	cl.recycle()
	return reply, err
}

// sendAlone sends cl as a batch of its own on the caller's goroutine when
// no batch is on the wire and no decision is queued: at low load a decision
// then costs no handoff to a flusher and back (two goroutine wake-ups, each
// tens of microseconds on a small machine). Decisions that arrive while it
// is on the wire queue and leave together in the flusher's next batch, as
// before. It reports false, having done nothing, when a batch is on the
// wire or decisions are queued. The round trip is bounded by cl's deadline,
// as every batch is by its callers'.
func (c *coalescer) sendAlone(cl *call) bool {
	select {
	case c.wire <- struct{}{}:
	default:
		return false
	}
	if len(c.calls) > 0 {
		<-c.wire
		return false
	}
	c.wireAt.Store(time.Now().UnixNano())
	one, live := [1]*call{cl}, [1]*call{}
	c.flush(one[:], live[:0], false) // its caller waits on it: no grace
	<-c.wire
	<-cl.done
	return true
}

// recycle returns a call whose reply has been read (or that was never
// queued) to the pool, its timer stopped. It keeps the call's key and
// bucket buffers, emptied, for the next decision.
func (cl *call) recycle() {
	if cl.timer != nil {
		cl.timer.Stop()
	}
	clear(cl.keys)
	cl.ctx, cl.deadline, cl.keys, cl.buckets, cl.reply, cl.err = nil, time.Time{}, cl.keys[:0], cl.buckets[:0], nil, nil
	cl.state.Store(waiting)
	callPool.Put(cl)
}

// flusher sends batches until the coalescer closes: it waits for one call,
// takes every other call already waiting (up to maxBatch), and sends them.
func (c *coalescer) flusher() {
	defer c.wg.Done()
	batch := make([]*call, 0, c.maxBatch)
	live := make([]*call, 0, c.maxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	prev := 0
	for {
		select {
		case cl := <-c.calls:
			batch = append(batch, cl)
		case <-c.quit:
			return
		}
		slot, ok := c.acquire(batch[0], timer)
		if !ok {
			cl := batch[0]
			cl.err = ErrClosed
			cl.finish()
			return
		}
		if slot != onWire {
			// Its own buffers: the flusher goes on with the next batch.
			b := c.fill(append(make([]*call, 0, c.maxBatch), batch[0]), 0, timer)
			clear(batch)
			batch = batch[:0]
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				dialled := c.dialled()
				inTime := c.flush(b, make([]*call, 0, len(b)), true)
				if c.dialled() == dialled {
					// Not while the pool grows: a batch on a new
					// connection pays its handshake first.
					c.extraDone(inTime)
				}
				<-c.extra
				if slot == besideHop {
					<-c.hop
				}
			}()
			continue
		}
		batch = c.fill(batch, prev, timer)
		prev = len(batch)
		if c.slow(batch[0]) {
			// The flusher goes on to the batches that cannot wait for
			// this one (see acquire) while it is on the wire.
			b := append(make([]*call, 0, len(batch)), batch...)
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.flush(b, make([]*call, 0, len(b)), true)
				<-c.wire
			}()
		} else {
			c.flush(batch, live, true)
			<-c.wire
		}
		clear(batch)
		clear(live[:cap(live)])
		batch = batch[:0]
	}
}

// slow reports whether the longest recent round trip is over a quarter of
// what cl has left, or Redis is a hop away (see floor): a decision that
// waited for cl's batch would risk its deadline, or wait a long wire out,
// so the flusher does not wait on the batch itself but sends it from a
// goroutine of its own, free to send the next one beside it.
func (c *coalescer) slow(cl *call) bool {
	rtt := time.Duration(c.rtt.Load())
	if rtt <= 0 || cap(c.extra) == 0 {
		return false
	}
	return (!cl.deadline.IsZero() && 4*rtt > time.Until(cl.deadline)) || c.floor() >= hopFloor
}

// A slot is where acquire lets a batch go: on the wire (a wire token),
// beside the batch on the wire because it cannot wait (an extra token), or
// beside it across a hop (a hop token and an extra one).
type slot int

const (
	onWire slot = iota
	beside
	besideHop
)

// acquire takes a wire token for a batch whose first decision is cl. While
// Redis answers slowly (see "A Redis far away" above), the batch waits for
// one only until the latest moment it can leave and still be back by cl's
// deadline, by the longest recent round trip and with an eighth of one to
// spare (decisions arriving meanwhile join it); then it leaves beside the
// batch on the wire, when fewer than the pool's connections are out. Across
// a hop (see "A Redis a network hop away" above) it leaves beside it at
// once, or as soon as one of the hopExtras batches beside it is back if it
// is back before the one on the wire. ok is false when the coalescer closes
// first.
func (c *coalescer) acquire(cl *call, timer *time.Timer) (s slot, ok bool) {
	defer func() {
		if ok && s == onWire {
			c.wireAt.Store(time.Now().UnixNano())
		}
	}()
	select {
	case c.wire <- struct{}{}:
		return onWire, true
	default:
	}
	rtt := time.Duration(c.rtt.Load())
	if rtt <= 0 || cap(c.extra) == 0 || !c.answering(rtt) {
		return c.waitWire()
	}
	// A hop: the wire itself is long, and short against the deadline.
	if c.floor() >= hopFloor && (cl.deadline.IsZero() || 4*rtt <= time.Until(cl.deadline)) {
		if !c.extrasPay(rtt) {
			return c.waitWire()
		}
		select {
		case c.wire <- struct{}{}:
			return onWire, true
		case c.hop <- struct{}{}:
			select {
			case c.extra <- struct{}{}:
				c.extraAt.Store(time.Now().UnixNano())
				return besideHop, true
			default:
				<-c.hop // the pool's connections are out
				return c.waitWire()
			}
		case <-c.quit:
			return onWire, false
		}
	}
	if cl.deadline.IsZero() {
		return c.waitWire()
	}
	timer.Reset(time.Until(cl.deadline.Add(-(rtt + rtt/8))))
	select {
	case c.wire <- struct{}{}:
		timer.Stop()
		return onWire, true
	case <-timer.C:
	case <-c.quit:
		timer.Stop()
		return onWire, false
	}
	if c.extrasPay(rtt) {
		select {
		case c.extra <- struct{}{}:
			c.extraAt.Store(time.Now().UnixNano())
			return beside, true
		default:
		}
	}
	return c.waitWire()
}

// waitWire waits for a wire token; ok is false when the coalescer closes
// first.
func (c *coalescer) waitWire() (s slot, ok bool) {
	select {
	case c.wire <- struct{}{}:
		return onWire, true
	case <-c.quit:
		return onWire, false
	}
}

// hopFloor is the shortest round trip (see floor) from which a batch that
// finds the wire taken leaves beside it at once. Below it Redis is near
// (on this project's machine batches came back in 40 to 80 µs at every
// load, docs/performance/network-hop.md): a wait for the wire is short, and
// the batch it grows saves Redis script calls. Past it the wire, not Redis,
// is what a decision waits for, up to a round trip before its own begins.
const hopFloor = 300 * time.Microsecond

// hopExtras bounds the batches that leave beside the one on the wire across
// a hop: past it a batch waits for one of them and grows. Every batch sent
// is a script call and a read and a write on each side, and Redis has one
// thread for all of them: without a bound, decisions at a high rate would
// each leave alone.
const hopExtras = 3

// dialled is how many connections the client's pool has made (go-redis'
// pool misses), or 0 for a client whose pool it cannot see.
func (c *coalescer) dialled() uint32 {
	switch cc := c.store.client.(type) {
	case *redis.Client:
		return cc.PoolStats().Misses
	case *redis.ClusterClient:
		return cc.PoolStats().Misses
	}
	return 0
}

// extraDone records whether an extra batch came back by its deadline.
// extraMisses is a moving share of the recent ones that did not, in 1/1024:
// each moves it a quarter of the way.
func (c *coalescer) extraDone(inTime bool) {
	m := c.extraMisses.Load()
	if inTime {
		m -= m / 4
	} else {
		m += (1024 - m) / 4
	}
	c.extraMisses.Store(m)
}

// extrasPay reports whether batches sent beside the one on the wire are
// worth sending: most recent ones came back in time. When Redis is far
// away they do; when the link to it is what is slow (its bandwidth), they
// do not: more batches at once only split decisions into more script
// calls, more bytes on a link that carries too few already, and the
// adaptive batching of one batch at a time (a batch grows while decisions
// wait) is what keeps the bytes per decision down. Then one extra batch a
// round trip (of rtt) tries again.
func (c *coalescer) extrasPay(rtt time.Duration) bool {
	return c.extraMisses.Load() < 512 || time.Since(time.Unix(0, c.extraAt.Load())) > rtt
}

// answering reports whether the batch on the wire left less than two round
// trips of rtt ago: past that, Redis seems to have stopped answering, and
// more connections would gain nothing.
func (c *coalescer) answering(rtt time.Duration) bool {
	return time.Since(time.Unix(0, c.wireAt.Load())) < 2*rtt
}

// observe records a batch of n decisions sent at sent that Redis answered
// (see rtt, and floorCur for batches of at most floorMaxBatch).
func (c *coalescer) observe(sent time.Time, n int) {
	now := time.Now()
	d := int64(now.Sub(sent))
	if n <= floorMaxBatch {
		c.observeFloor(now.UnixNano(), d)
	}
	if old := c.rtt.Load(); d < old {
		d = old + (d-old)/8
	}
	c.rtt.Store(d)
}

// floorWindow is how long a window of the round trips' floor lasts at
// least (and floorRounds of the floor, when longer): long enough to hold
// some short batches under any load, short enough that a Redis that moved
// nearer is seen at once.
const (
	floorWindow = 100 * time.Millisecond
	floorRounds = 16
)

// floorMaxBatch is the most decisions a batch may carry for its round trip
// to count in the floor: what Redis does for a few is nothing against a
// hop, but a deep batch's round trip is mostly Redis' work, which grows
// with the load, and on a Redis near and busy, every batch is deep. Then
// the floor is not known, and batches wait and grow as they should.
const floorMaxBatch = 4

// floorBatches is how many batches the floor's two windows must hold for it
// to be known: a connection's first batch pays its handshake, a store's
// first ones load the script, and a Redis that stalls answers few.
const floorBatches = 8

// observeFloor records a round trip of d nanoseconds that ended at now
// (Unix nanoseconds) in the floor's windows. Two batches that end together
// as a window closes may both start the next: one's round trip is then
// missing from it, which a floor can afford.
func (c *coalescer) observeFloor(now, d int64) {
	at := c.floorAt.Load()
	window := max(int64(floorWindow), floorRounds*shorterFloor(c.floorCur.Load(), c.floorPrev.Load()))
	if now-at >= window && c.floorAt.CompareAndSwap(at, now) {
		prev, prevN := c.floorCur.Swap(d), c.floorCurN.Swap(1)
		if now-at >= 2*window {
			prev, prevN = 0, 0 // the window before this one saw no batch
		}
		c.floorPrev.Store(prev)
		c.floorPrevN.Store(prevN)
		return
	}
	c.floorCurN.Add(1)
	for {
		cur := c.floorCur.Load()
		if cur != 0 && cur <= d {
			return
		}
		if c.floorCur.CompareAndSwap(cur, d) {
			return
		}
	}
}

// floor is the shortest round trip of the last one or two windows (see
// floorWindow), or 0 while they hold fewer than floorBatches.
func (c *coalescer) floor() time.Duration {
	if c.floorCurN.Load()+c.floorPrevN.Load() < floorBatches {
		return 0
	}
	return time.Duration(shorterFloor(c.floorCur.Load(), c.floorPrev.Load()))
}

// shorterFloor is the shorter of two windows' floors, of which 0 is none.
func shorterFloor(cur, prev int64) int64 {
	if prev == 0 || (cur != 0 && cur < prev) {
		return cur
	}
	return prev
}

// poolSize is how many connections client keeps to a server: go-redis'
// pool size, or its default when client is not a go-redis client.
func poolSize(client Client) int {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize
	}
	return 10 * runtime.GOMAXPROCS(0)
}

// fill adds to batch (which holds a call) every call already waiting, up to
// maxBatch. Then, when the previous batch held prev >= minWaitBatch calls
// and this one fewer, it waits for more, with timer (stopped), until batch
// holds as many as the previous one, c.wait has passed or the coalescer
// closes.
func (c *coalescer) fill(batch []*call, prev int, timer *time.Timer) []*call {
queued:
	for len(batch) < c.maxBatch {
		select {
		case cl := <-c.calls:
			batch = append(batch, cl)
		default:
			break queued
		}
	}
	target := min(prev, c.maxBatch)
	if c.wait <= 0 || prev < minWaitBatch || len(batch) >= target {
		return batch
	}
	timer.Reset(c.wait)
	defer timer.Stop()
	for len(batch) < target {
		select {
		case cl := <-c.calls:
			batch = append(batch, cl)
		case <-timer.C:
			return batch
		case <-c.quit:
			return batch
		}
	}
	return batch
}

// flush sends one batch and completes every call in it, and reports
// whether Redis answered it by the earliest of its calls' deadlines. Calls
// whose context already ended are completed with its error and not sent. The
// others share script calls: up to perScript decisions in one call (on a
// Cluster, decisions of one slot), all of a batch's script calls in one
// pipeline (exec). A decision the script reports as failed (allowed = -1)
// gets ErrKeyType.
func (c *coalescer) flush(batch, live []*call, grace bool) (inTime bool) {
	var deadline, earliest time.Time
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
		} else {
			if cl.deadline.After(deadline) {
				deadline = cl.deadline
			}
			if earliest.IsZero() || cl.deadline.Before(earliest) {
				earliest = cl.deadline
			}
		}
	}
	if len(live) == 0 {
		return false
	}
	// The batch runs until the last of its callers stops waiting (the
	// client's read and write timeouts bound it too); no single caller's
	// cancellation cuts the batch short for the others. With grace (its
	// callers wait for it on their own deadlines, not on it), its reply is
	// read for one longest recent round trip more, which they do not hear
	// of: go-redis drops a connection whose read timed out, and the one
	// that replaces it costs a handshake round trip inside some decision's
	// deadline, so a Redis a little slower than the deadline would
	// otherwise cost every batch its connection.
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if bounded {
		if grace {
			deadline = deadline.Add(time.Duration(c.rtt.Load()))
		}
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()

	sent := c.decide(ctx, c.split(ctx, live, false))
	if gotReplies(live) {
		c.observe(now, len(live))
		inTime = earliest.IsZero() || !time.Now().After(earliest)
	}
	// Counted before any caller hears back, so that what a caller saw is
	// already in the counts.
	if c.onBatch != nil {
		c.onBatch(len(live), sent)
	}
	var left []*call // decisions whose callers stopped waiting while their batch was out
	for _, cl := range live {
		if !cl.state.CompareAndSwap(waiting, answered) {
			left = append(left, cl)
		}
		cl.finish()
	}
	if len(left) > 0 {
		c.store.refundLeft(left)
	}
	return inTime
}

// A call's state, once queued: its caller waits, or has stopped waiting
// (its deadline passed or its context ended: it was answered that the
// store failed), or the batch has answered it. Whichever of the caller
// and the flusher moves it from waiting first decides: a caller that finds
// it answered takes the reply after all; a flusher that finds it left gives
// back what its takes took (refundLeft), so that the answer and the charge
// agree.
const (
	waiting int32 = iota
	left
	answered
)

// refundLeft gives back the takes of the decisions in calls that Redis
// allowed after their callers had stopped waiting (in a batch shared with
// callers of later deadlines, or read in a flusher's grace): those callers
// were told the store failed. Their Charges and Refunds (limiter.Kind)
// stand, as for a denial. The refunds leave in one pipeline, on a context
// of their own (warmTimeout): the callers are gone. Counted through
// ObserveLate ("refunded", "refund_failed").
func (s *Store) refundLeft(calls []*call) {
	var refunds []*scriptCall
	var decided []int
	for _, cl := range calls {
		if cl.err != nil || len(cl.reply) == 0 || cl.reply[0] != 1 {
			continue // not answered, or denied: its takes took nothing
		}
		var keys []string
		var buckets []bucketArgs
		var values []int64
		for i, b := range cl.buckets {
			if b.kind == limiter.Take && b.cost > 0 {
				keys, buckets, values = append(keys, cl.keys[i]), append(buckets, b), append(values, cl.reply[i+1])
			}
		}
		if len(keys) > 0 {
			refunds = append(refunds, &scriptCall{script: s.refund, keys: keys, args: refundArgv(buckets, values), want: len(keys)})
			decided = append(decided, 1)
		}
	}
	if len(refunds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	defer cancel()
	s.exec(ctx, refunds...)
	if s.onLate == nil {
		return
	}
	var ok, failed int
	for i, sc := range refunds {
		if sc.err != nil {
			failed += decided[i]
		} else {
			ok += decided[i]
		}
	}
	if ok > 0 {
		s.onLate("refunded", ok)
	}
	if failed > 0 {
		s.onLate("refund_failed", failed)
	}
}

// gotReplies reports whether Redis answered every decision of a batch:
// none failed for want of a reply (a timeout, a connection lost); an error
// reply is an answer.
func gotReplies(live []*call) bool {
	for _, cl := range live {
		if cl.err != nil && !isReply(cl.err) {
			return false
		}
	}
	return true
}

// isReply reports whether err is Redis' answer (an error reply), not the
// want of one. Apart so that its error target is made only for an error.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) || errors.Is(err, ErrKeyType)
}

// decide runs one script call per part and hands each decision its reply.
// On a Cluster, a call over several slots that Redis refused (a key the node
// does not hold: a slot moving) is decided again slot by slot, and a call
// of several decisions of one slot that Redis refused with TRYAGAIN (the
// slot is moving and its keys are on both nodes, which a call over several
// keys may not straddle) decision by decision; either refusal means the
// script did not run. It returns the number of script calls sent.
func (c *coalescer) decide(ctx context.Context, parts []batchPart) int {
	calls := make([]*scriptCall, len(parts))
	for i, p := range parts {
		calls[i] = p.script(c.store)
	}
	c.store.exec(ctx, calls...)
	var bySlot, alone []*call
	for i, p := range parts {
		var rerr redis.Error
		switch {
		case calls[i].crossSlot && errors.As(calls[i].err, &rerr):
			bySlot = append(bySlot, p...)
		case len(p) > 1 && calls[i].err != nil && redis.HasErrorPrefix(calls[i].err, "TRYAGAIN"):
			alone = append(alone, p...)
		default:
			p.deliver(calls[i].reply, calls[i].err)
		}
	}
	sent := len(calls)
	if len(bySlot) > 0 {
		sent += c.decide(ctx, c.split(ctx, bySlot, true))
	}
	if len(alone) > 0 {
		one := make([]batchPart, len(alone))
		for i := range alone {
			one[i] = alone[i : i+1 : i+1]
		}
		sent += c.decide(ctx, one)
	}
	return sent
}

// perScript bounds the decisions one script call runs. Redis runs nothing
// else while a script runs; a larger batch is several script calls in one
// pipeline, between which Redis serves its other clients.
const perScript = 32

// batchPart is the decisions of a batch that share one script call.
type batchPart []*call

// split splits live into parts: in arrival order, up to perScript
// decisions and MaxScriptBuckets buckets each (a decision has at most that
// many: TakeBy cuts a larger one) and, on a Cluster, of one node (or,
// bySlot, of one slot).
func (c *coalescer) split(ctx context.Context, live []*call, bySlot bool) []batchPart {
	if c.store.cluster == nil && len(live) <= perScript && bucketsOf(live) <= MaxScriptBuckets {
		return []batchPart{live}
	}
	var out []batchPart
	var size []int        // buckets of out[i]
	open := map[any]int{} // node, or slot (always 0 outside a Cluster) → the index in out of the part still filling
	for _, cl := range live {
		var where any = 0
		if c.store.cluster != nil {
			where = Slot(cl.keys[0])
			if !bySlot {
				if node, err := c.store.cluster.MasterForKey(ctx, cl.keys[0]); err == nil {
					where = node
					c.store.slotsKnown.Store(true)
				}
			}
		}
		i, ok := open[where]
		if !ok || len(out[i]) == perScript || size[i]+len(cl.keys) > MaxScriptBuckets {
			i = len(out)
			out, size = append(out, nil), append(size, 0)
			open[where] = i
		}
		out[i] = append(out[i], cl)
		size[i] += len(cl.keys)
	}
	return out
}

// bucketsOf is the number of buckets of calls.
func bucketsOf(calls []*call) int {
	n := 0
	for _, cl := range calls {
		n += len(cl.keys)
	}
	return n
}

// script is the token-bucket script's call deciding p's decisions in
// turn: their buckets in turn, each distinct limit once. On a Cluster, a
// part spanning several slots (of one node) declares only its first key,
// the others following the arguments (see tokenbucket.lua).
func (p batchPart) script(s *Store) *scriptCall {
	keys := p[0].keys
	if len(p) > 1 {
		n := 0
		for _, cl := range p {
			n += len(cl.keys)
		}
		keys = make([]string, 0, n)
		for _, cl := range p {
			keys = append(keys, cl.keys...)
		}
	}
	// Past the last of its callers' deadlines, none waits for the call.
	var deadline time.Time
	for _, cl := range p {
		if cl.deadline.IsZero() {
			deadline = time.Time{}
			break
		}
		if cl.deadline.After(deadline) {
			deadline = cl.deadline
		}
	}
	sc := s.takeCall(keys, len(p), deadline, func(j int) []bucketArgs { return p[j].buckets })
	if s.cluster != nil && !sameSlot(keys) {
		args := make([]any, 0, len(sc.args)+len(keys)-1)
		args = append(args, sc.args...)
		for _, k := range keys[1:] {
			args = append(args, k)
		}
		sc.keys, sc.args, sc.crossSlot = keys[:1], args, true
	}
	return sc
}

// deliver hands each decision its part of the script call's reply: allowed
// and one value per bucket (exec checked the length). An error goes to
// every decision; a decision that failed alone in a shared call gets
// ErrKeyType (allowed = -1), or ErrQuotaClock (-3).
func (p batchPart) deliver(reply []int64, err error) {
	pos := 0
	for _, cl := range p {
		if err != nil {
			cl.reply, cl.err = nil, err
			continue
		}
		n := 1 + len(cl.keys)
		cl.reply, cl.err = reply[pos:pos+n:pos+n], nil
		switch {
		case cl.reply[0] == expired:
			cl.reply, cl.err = nil, ErrExpired
		case cl.reply[0] == quotaClock:
			cl.reply, cl.err = nil, ErrQuotaClock
		case cl.reply[0] < 0:
			cl.reply, cl.err = nil, ErrKeyType
		}
		pos += n
	}
}
