// Package replay decides an Envoy access log's requests offline, exactly as
// `floodgate serve` would have decided them, and reports what each policy
// would have done: `floodgate replay`.
//
// It is a second driver of the serving engine, not a copy of it: a log line
// becomes the CheckRequest Envoy would have sent, read by extauthz's View;
// extauthz.Engine.Plan matches and identifies; extauthz.Decider takes from
// the in-memory store (limiter/memory), the decide step Check itself runs:
// all or nothing across the enforced policies and the shadow ones on their
// own. Only the clock differs: it reads the logged start_time.
//
// Envoy writes a line when a request ends, so lines come out of start order.
// Lines are decided in start_time order within a bounded reorder window,
// streaming: memory holds the window's lines and the callers seen, never the
// log. Parsing and planning (JSON, matching, the identity hash) run on every
// core; deciding runs in order on one goroutine.
package replay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/internal/config"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/pipeline"
)

// Options configure a Run.
type Options struct {
	Engine *extauthz.Engine
	// MaxBuckets caps the in-memory store (memory.Options.MaxBuckets):
	// at least 1; a configuration's store.memory.max_buckets (whose default
	// is config.DefaultMaxBuckets) replays as serve would run.
	MaxBuckets int
	// ReorderWindow is how far out of start order a line may come and still
	// be decided in order, 0 or more (the CLI's default is
	// DefaultReorderWindow).
	ReorderWindow time.Duration
	// Workers parse and plan lines in parallel: at least 1 (the CLI runs
	// GOMAXPROCS of them).
	Workers int
	// Malformed receives "line N: why" for the first ShowMalformed (0 or
	// more; the CLI's is DefaultShowMalformed) skipped lines; nil discards
	// them.
	Malformed     io.Writer
	ShowMalformed int
	// MaxLineBytes bounds one line, at least 1 (the CLI's is
	// DefaultMaxLineBytes); a longer one is skipped.
	MaxLineBytes int
	// OnDecision, when set, hears every decided line in decision order:
	// whether the request would have passed (shadow policies aside).
	OnDecision func(line int64, allowed bool)
	// MaxCallers bounds the distinct callers the run holds (0: no bound).
	// Each costs memory until the run ends (docs/replay.md); once the bound
	// is reached, a line that would add a caller is not decided and is
	// counted in Result.BeyondMaxCallers.
	MaxCallers int
}

// validate refuses options Run cannot use: it takes every value as given.
func (o Options) validate() error {
	switch {
	case o.Engine == nil:
		return errors.New("replay: no engine")
	case o.MaxBuckets < 1:
		return fmt.Errorf("replay: MaxBuckets must be at least 1 (got %d)", o.MaxBuckets)
	case o.ReorderWindow < 0:
		return fmt.Errorf("replay: ReorderWindow must not be negative (got %v)", o.ReorderWindow)
	case o.Workers < 1:
		return fmt.Errorf("replay: Workers must be at least 1 (got %d)", o.Workers)
	case o.ShowMalformed < 0:
		return fmt.Errorf("replay: ShowMalformed must not be negative (got %d)", o.ShowMalformed)
	case o.MaxLineBytes < 1:
		return fmt.Errorf("replay: MaxLineBytes must be at least 1 (got %d)", o.MaxLineBytes)
	}
	return nil
}

// The values floodgate replay runs with.
const (
	DefaultReorderWindow = 60 * time.Second
	DefaultShowMalformed = 5
	DefaultMaxLineBytes  = 1 << 20
)

// A batch of lines travels between the stages once it holds batchLines
// lines or batchBytes bytes.
const (
	batchLines = 512
	batchBytes = 4 << 20
)

// batch is a run of consecutive lines and, once done is closed, their entries.
type batch struct {
	first   int64 // line number of the first line
	data    []byte
	ends    []int // end offsets of the lines in data
	entries []entry
	done    chan struct{}
}

// Run reads the log from r and decides it. Its error is for the input as a
// whole (a read error); bad lines are counted in the result.
func Run(ctx context.Context, r io.Reader, o Options) (*Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var keyHdrs []string
	for _, s := range o.Engine.Inputs().Sources {
		if h, ok := strings.CutPrefix(s, "header:"); ok {
			keyHdrs = append(keyHdrs, h)
		}
	}
	seed := maphash.MakeSeed()
	work := make(chan *batch, 2*o.Workers)
	order := make(chan *batch, 4*o.Workers)
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps := newParser(o.Engine, keyHdrs, seed)
			for b := range work {
				parseBatch(ps, b)
			}
		}()
	}
	var readErr error
	go func() {
		defer close(order)
		defer close(work)
		readErr = readBatches(ctx, r, o.MaxLineBytes, func(b *batch) bool {
			select {
			case work <- b:
			case <-ctx.Done():
				return false
			}
			select {
			case order <- b:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()

	d := newSequencer(o)
	for b := range order {
		<-b.done
		for i := range b.entries {
			d.add(&b.entries[i])
		}
		if ctx.Err() != nil {
			break
		}
	}
	cancel()
	for range order { // let the reader stop
	}
	wg.Wait()
	if err := parent.Err(); err != nil {
		return nil, fmt.Errorf("replay interrupted: %w", err)
	}
	if readErr != nil && !errors.Is(readErr, context.Canceled) {
		return nil, readErr
	}
	d.flush()
	return d.result(), nil
}

// dataPool recycles the batches' line buffers.
var dataPool = sync.Pool{New: func() any { b := make([]byte, 0, 256<<10); return &b }}

// readBatches splits r into batches of lines and hands each to send.
func readBatches(ctx context.Context, r io.Reader, maxLine int, send func(*batch) bool) error {
	br := bufio.NewReaderSize(r, 1<<20)
	line := int64(0)
	newBatch := func() *batch {
		return &batch{first: line + 1, done: make(chan struct{}), data: (*dataPool.Get().(*[]byte))[:0], ends: make([]int, 0, batchLines)}
	}
	b := newBatch()
	flush := func() bool {
		if len(b.ends) == 0 {
			return true
		}
		ok := send(b)
		b = newBatch()
		return ok
	}
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 || err == nil || errors.Is(err, bufio.ErrBufferFull) {
			line++
			start := len(b.data)
			b.data = append(b.data, chunk...)
			tooLong := false
			for errors.Is(err, bufio.ErrBufferFull) {
				chunk, err = br.ReadSlice('\n')
				if !tooLong && len(b.data)-start+len(chunk) <= maxLine {
					b.data = append(b.data, chunk...)
				} else {
					tooLong = true
				}
			}
			if tooLong || len(b.data)-start > maxLine {
				b.data = append(b.data[:start], tooLongMark...)
			}
			b.ends = append(b.ends, len(b.data))
			if len(b.ends) == batchLines || len(b.data) >= batchBytes {
				if !flush() {
					return ctx.Err()
				}
			}
		}
		if err != nil {
			if err == io.EOF {
				flush()
				return nil
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			return fmt.Errorf("reading the log: %w", err)
		}
	}
}

// tooLongMark replaces a line longer than the limit (it is not JSON, so the
// parser reports it; the message says why).
const tooLongMark = "\x00too long"

func parseBatch(ps *parser, b *batch) {
	b.entries = make([]entry, len(b.ends))
	n := len(b.ends) * len(ps.engine.Policies) // at most a bucket per policy a line
	st := batchStore{plan: extauthz.Plan{Buckets: make([]decide.Bucket, 0, n), Policies: make([]*extauthz.Policy, 0, n)},
		callers: make([]caller, 0, n), ids: make([]uint64, 0, n)}
	start := 0
	for i, end := range b.ends {
		e := &b.entries[i]
		e.line = b.first + int64(i)
		ln := trimSpace(b.data[start:end])
		start = end
		switch {
		case len(ln) == 0:
			e.err = "" // a blank line is skipped quietly
			e.at = blank
		case string(ln) == tooLongMark:
			e.err = "longer than the line limit"
		default:
			ps.parse(ln, e, &st)
		}
	}
	data := b.data[:0]
	dataPool.Put(&data)
	b.data = nil
	close(b.done)
}

// blank marks a blank line's entry.
const blank = math.MinInt64

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// virtualClock is the store's clock: the start_time of the line being
// decided. Only the deciding goroutine moves or reads it.
type virtualClock struct{ us int64 }

func (c *virtualClock) Now() time.Time { return time.UnixMicro(c.us) }

// sequencer is the in-order stage: the reorder window, the store, the
// decisions (decide.Decider, as Check decides) and the counts.
type sequencer struct {
	o       Options
	window  int64 // µs
	clock   virtualClock
	store   *memory.Store
	dec     decide.Decider
	pipe    *pipeline.Pipeline // on the in-memory store, made with it
	res     []limiter.Result
	pending entryHeap
	maxSeen int64
	seen    bool
	// held is a line that started more than the window after every line
	// admitted before it: the next line says whether it is where the log
	// went (admitted) or an outlier (set aside as ahead).
	held *entry

	lines, decided, skipped, late, ahead, beyond int64
	from, to                                     int64
	shown                                        int
	stats                                        []*policyStats // one per policy, in the engine's order
	callers                                      callerTable
}

func newSequencer(o Options) *sequencer {
	d := &sequencer{o: o, window: o.ReorderWindow.Microseconds(),
		from: math.MaxInt64, to: math.MinInt64, callers: callerTable{index: map[uint64]int32{}}}
	for _, p := range o.Engine.Policies {
		d.stats = append(d.stats, newPolicyStats(p))
	}
	return d
}

// statsOf returns p's counts (a handful of policies: a scan beats a map).
func (d *sequencer) statsOf(p *extauthz.Policy) *policyStats {
	for _, s := range d.stats {
		if s.p == p {
			return s
		}
	}
	panic("replay: a plan names a policy of another engine")
}

// add takes the next line in file order.
func (d *sequencer) add(e *entry) {
	d.lines++
	if e.err != "" || e.at == blank {
		d.skipped++
		if e.err != "" && d.shown < d.o.ShowMalformed && d.o.Malformed != nil {
			d.shown++
			fmt.Fprintf(d.o.Malformed, "line %d: %s\n", e.line, e.err)
		}
		return
	}
	// A line more than the window before the latest start admitted may
	// follow lines already decided: deciding it would run the clock
	// backwards.
	if d.seen && e.at < d.maxSeen-d.window {
		d.late++
		return
	}
	// A line far ahead of everything before it moves the window only if
	// the next line agrees: one line dated an hour or a century ahead (a
	// wrong clock) would otherwise make every line after it late.
	if h := d.held; h != nil {
		d.held = nil
		if e.at >= h.at-d.window {
			d.admit(h)
		} else {
			d.setAside(h)
		}
	}
	if !d.seen || e.at > d.maxSeen+d.window {
		d.held = e
		return
	}
	d.admit(e)
}

// setAside counts a held line that the next line contradicted.
func (d *sequencer) setAside(e *entry) {
	d.ahead++
	if d.shown < d.o.ShowMalformed && d.o.Malformed != nil {
		d.shown++
		fmt.Fprintf(d.o.Malformed, "line %d: start_time %s is more than the reorder window after the lines around it; set aside (ahead)\n",
			e.line, formatTime(e.at))
	}
}

// admit takes a line into the window: it is decided once a line starting
// more than the window after it has been admitted, or at the end.
func (d *sequencer) admit(e *entry) {
	if !d.seen || e.at > d.maxSeen {
		d.maxSeen, d.seen = e.at, true
	}
	if len(e.plan.Buckets) == 0 {
		d.count(e) // no bucket: its place in the order changes nothing
		if d.o.OnDecision != nil {
			d.o.OnDecision(e.line, true)
		}
	} else {
		d.pending.push(e)
	}
	for len(d.pending) > 0 && d.pending[0].at < d.maxSeen-d.window {
		d.decide(d.pending.pop())
	}
}

// flush decides every line still waiting (the end of the log).
func (d *sequencer) flush() {
	if h := d.held; h != nil {
		d.held = nil
		d.admit(h) // nothing after it says otherwise
	}
	for len(d.pending) > 0 {
		d.decide(d.pending.pop())
	}
}

func (d *sequencer) count(e *entry) {
	d.decided++
	d.from, d.to = min(d.from, e.at), max(d.to, e.at)
}

func (d *sequencer) decide(e *entry) {
	if d.o.MaxCallers > 0 && d.newCallers(e) > d.o.MaxCallers-len(d.callers.names) {
		d.beyond++
		return
	}
	d.count(e)
	d.clock.us = e.at
	if d.store == nil {
		o := store.MemoryOptions(config.Memory{MaxBuckets: d.o.MaxBuckets}) // sharded as serve shards it, so it forgets as serve would
		o.Clock = &d.clock
		d.store = memory.New(o)
		d.pipe = pipeline.New(pipeline.Options{Store: d.store})
	}
	n := len(e.plan.Buckets)
	if cap(d.res) < n {
		d.res = make([]limiter.Result, n)
	}
	res := d.res[:n]
	clear(res)
	dec, _ := d.pipe.Decide(context.Background(), &d.dec, e.plan.Buckets, res, zap.Skip())
	allowed, err := dec.Allowed, dec.Err
	if err != nil {
		// The in-memory store refuses only malformed requests, which Plan
		// does not make; count it as a skipped line rather than guess.
		d.decided--
		d.skipped++
		if d.shown < d.o.ShowMalformed && d.o.Malformed != nil {
			d.shown++
			fmt.Fprintf(d.o.Malformed, "line %d: %v\n", e.line, err)
		}
		return
	}
	if d.o.OnDecision != nil {
		d.o.OnDecision(e.line, allowed)
	}
	g, last, counted := int32(-1), uint64(0), false
	for i, p := range e.plan.Policies {
		r := pipeline.ClassifyBucket(e.plan.Buckets[i], &res[i], &dec) // as every door counts it
		ok := r == pipeline.Allowed || r == pipeline.ShadowAllowed
		// A line's buckets often share an identity (per key, per address):
		// look it up once.
		if g < 0 || e.ids[i] != last {
			g, last = d.callers.of(e, i), e.ids[i]
		}
		s := d.statsOf(p)
		s.record(e, i, g, ok, r == pipeline.Denied || r == pipeline.ShadowDenied)
		if s.collateral && !counted && e.callers[i].source == "client_ip" {
			d.callers.behind(g, e.ua, e.key) // once a line, whichever policies count it
			counted = true
		}
	}
}

// newCallers counts the callers of e the run has not seen yet.
func (d *sequencer) newCallers(e *entry) int {
	n := 0
	for i, id := range e.ids {
		if _, ok := d.callers.index[id]; !ok && !slices.Contains(e.ids[:i], id) {
			n++
		}
	}
	return n
}

// entryHeap orders entries by start_time, then line number. It holds the
// keys beside the pointers, so comparing two never reads an entry.
type entryHeap []heapItem

type heapItem struct {
	at, line int64
	e        *entry
}

func (h entryHeap) less(i, j int) bool {
	return h[i].at < h[j].at || (h[i].at == h[j].at && h[i].line < h[j].line)
}

func (h *entryHeap) push(e *entry) {
	*h = append(*h, heapItem{e.at, e.line, e})
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *entryHeap) pop() *entry {
	s := *h
	top := s[0].e
	n := len(s) - 1
	s[0] = s[n]
	s[n] = heapItem{}
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
