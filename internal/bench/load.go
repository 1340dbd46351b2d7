package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

const checkMethod = "/envoy.service.auth.v3.Authorization/Check"

// rawMsg is a message in wire form. The lean client sends pre-encoded
// requests and reads back only each response's status code. The proto
// client (msg set) does what a client building its requests does on every
// call: the request becomes a protobuf message (decoded from its wire form,
// about what building it costs) that protobuf marshals, and the whole
// response is decoded into msg.
type rawMsg struct {
	b   []byte
	msg proto.Message
}

// rawCodec passes rawMsg bytes through, doing protobuf's work as well when
// the message asks for it. Its name is "proto", so servers decode the
// requests with their usual protobuf codec.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m := v.(*rawMsg)
	if m.msg == nil {
		return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
	}
	proto.Reset(m.msg)
	if err := proto.Unmarshal(m.b, m.msg); err != nil {
		return nil, err
	}
	b, err := proto.Marshal(m.msg)
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := v.(*rawMsg)
	n := data.Len()
	if cap(m.b) < n {
		m.b = make([]byte, n)
	}
	m.b = m.b[:n]
	data.CopyTo(m.b)
	if m.msg == nil {
		return nil
	}
	proto.Reset(m.msg)
	return proto.Unmarshal(m.b, m.msg)
}

// Client kinds (--client): lean sends pre-encoded requests and reads only
// each answer's status; proto also does protobuf's work on every call, as a
// client that builds its requests does (see rawMsg).
const (
	ClientLean  = "lean"
	ClientProto = "proto"
)

// statusCode reads CheckResponse.status.code (fields 1 and 1) from the wire
// form without decoding the rest; a missing status reads as 0 (OK), as
// protobuf's defaults do.
func statusCode(b []byte) (int32, error) {
	st, err := field(b, 1)
	if err != nil || st == nil {
		return 0, err
	}
	v, err := varintField(st, 1)
	return int32(v), err
}

// walk calls fn with the number, type and encoded value of each field of
// the message b, in order.
func walk(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return protowire.ParseError(n)
		}
		fn(num, typ, b[:n])
		b = b[n:]
	}
	return nil
}

// field returns the bytes of the last length-delimited field num in b.
func field(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	err := walk(b, func(n protowire.Number, typ protowire.Type, v []byte) {
		if n == num && typ == protowire.BytesType {
			out, _ = protowire.ConsumeBytes(v)
		}
	})
	return out, err
}

// varintField returns the last varint field num in b; 0 when absent.
func varintField(b []byte, num protowire.Number) (uint64, error) {
	var out uint64
	err := walk(b, func(n protowire.Number, typ protowire.Type, v []byte) {
		if n == num && typ == protowire.VarintType {
			out, _ = protowire.ConsumeVarint(v)
		}
	})
	return out, err
}

// client is the load generator's connections to one server.
type client struct {
	conns []*grpc.ClientConn
	kind  string // ClientLean or ClientProto
}

// dial opens n connections to target, which must be a loopback address,
// for a client of the given kind.
func dial(target string, n int, kind string) (*client, error) {
	if err := CheckLoopback(target); err != nil {
		return nil, err
	}
	if kind != ClientLean && kind != ClientProto {
		return nil, fmt.Errorf("unknown client %q (lean or proto)", kind)
	}
	c := &client{kind: kind}
	for i := 0; i < max(n, 1); i++ {
		conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		if err != nil {
			c.close()
			return nil, err
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

// CheckLoopback refuses a target that is not a loopback address.
func CheckLoopback(target string) error {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("target %s is not a loopback address: floodbench only sends to 127.0.0.0/8 or ::1", target)
	}
	return nil
}

func (c *client) close() {
	for _, conn := range c.conns {
		conn.Close()
	}
}

// cell bounds one measurement: a warm-up, then a window, and at most
// maxCount requests in all. rpcTimeout bounds each call.
type cell struct {
	// conc is the requests in flight: closed-loop, each of conc workers
	// sends again when answered; with rate, the most in flight at once.
	conc int
	// rate, when > 0, sends open-loop: requests are scheduled at random
	// (Poisson) arrivals averaging rate a second, whatever the answers
	// do, and each is timed from its scheduled send, so a request that
	// waits for a free worker counts the wait (as Envoy's traffic, which
	// arrives whether or not earlier requests are answered).
	rate       float64
	warmup     time.Duration
	window     time.Duration
	maxCount   int64
	rpcTimeout time.Duration
	// atWindow, if set, runs when the window opens (the orchestrator reads
	// Redis' counters there).
	atWindow func()
}

// result is one cell's measurement: what completed inside the window.
type result struct {
	decisions  int64 // answered checks (allowed or denied)
	unexpected int64 // answered, but not the answer the workload expects
	rpcErrors  int64 // failed calls (an ext_authz server should have none)
	window     time.Duration
	p50, p99   time.Duration
	durs       []time.Duration // every answered call's latency, sorted
	firstErr   error
}

// merge adds o's measurement to r's (the rounds of one cell).
func (r *result) merge(o result) {
	r.decisions += o.decisions
	r.unexpected += o.unexpected
	r.rpcErrors += o.rpcErrors
	r.window += o.window
	r.durs = append(r.durs, o.durs...)
	slices.Sort(r.durs)
	r.p50, r.p99 = percentile(r.durs, 50), percentile(r.durs, 99)
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
}

func (r result) rate() float64 {
	if r.window <= 0 {
		return 0
	}
	return float64(r.decisions) / r.window.Seconds()
}

type sample struct {
	end int64 // ns since the cell started
	dur time.Duration
	bad bool // unexpected answer or error
	err bool
}

// drive runs one cell of w against c: conc workers, each sending one request
// at a time, stopping at the end of the window or after maxCount requests.
func (c *client) drive(ctx context.Context, w workload, cl cell) result {
	method := w.rpc()
	return driveCalls(ctx, cl, func(i int) callFunc {
		conn := c.conns[i%len(c.conns)]
		next := i * 7919 // callers walk the workload from spread-out points
		req, resp := &rawMsg{}, &rawMsg{}
		if c.kind == ClientProto {
			req.msg, resp.msg = w.newMessages()
		}
		return func(ctx context.Context) (bool, error) {
			req.b = w.reqs[next%len(w.reqs)]
			next++
			if err := conn.Invoke(ctx, method, req, resp); err != nil {
				return true, err
			}
			ok, err := w.answer(resp.b)
			return ok != w.allow, err
		}
	})
}

// callFunc makes one timed call of a worker: bad reports an answer other
// than the workload expects, err a failed call.
type callFunc func(ctx context.Context) (bad bool, err error)

// driveCalls runs one cell: cl.conc workers, worker i calling the function
// newCall(i) returns one call at a time, each call timed, stopping at the end
// of the window or after cl.maxCount calls. Every driver of the table (the
// gRPC client, and the load generator's own Redis calls) shares it, so every
// row is timed alike.
func driveCalls(ctx context.Context, cl cell, newCall func(i int) callFunc) result {
	start := time.Now()
	windowStart := start.Add(cl.warmup)
	deadline := windowStart.Add(cl.window)
	ws := int64(cl.warmup)
	var issued atomic.Int64
	var exhausted atomic.Int64 // ns since start when maxCount ran out; 0: not yet
	var errOnce sync.Once
	var firstErr error
	samples := make([][]sample, cl.conc)
	var tickets chan time.Time // open-loop: scheduled sends
	if cl.rate > 0 {
		tickets = make(chan time.Time, 1<<16)
		sctx, stop := context.WithCancel(ctx) // ends the schedule with the cell, even blocked on a full channel
		defer stop()
		go schedule(sctx, tickets, cl.rate, start, deadline)
	}
	var wg sync.WaitGroup
	for i := 0; i < cl.conc; i++ {
		wg.Add(1)
		call := newCall(i)
		go func(i int) {
			defer wg.Done()
			local := make([]sample, 0, 4096)
			for ctx.Err() == nil {
				if issued.Add(1) > cl.maxCount {
					exhausted.CompareAndSwap(0, int64(time.Since(start)))
					break
				}
				t0 := time.Now()
				if tickets != nil {
					at, ok := <-tickets
					if !ok || !time.Now().Before(deadline) {
						break // the window is over: what is still queued is not sent
					}
					t0 = at // timed from the scheduled send: waiting for a worker counts
				}
				if !t0.Before(deadline) {
					break
				}
				rctx, cancel := context.WithTimeout(ctx, cl.rpcTimeout)
				bad, err := call(rctx)
				cancel()
				t1 := time.Now()
				s := sample{end: int64(t1.Sub(start)), dur: t1.Sub(t0), bad: bad}
				if err != nil {
					s.err, s.bad = true, true
					errOnce.Do(func() { firstErr = err })
				}
				if s.end >= ws {
					local = append(local, s)
				}
			}
			samples[i] = local
		}(i)
	}
	if cl.atWindow != nil {
		select {
		case <-time.After(time.Until(windowStart)):
		case <-ctx.Done():
		}
		cl.atWindow()
	}
	wg.Wait()
	end := int64(cl.warmup + cl.window)
	if x := exhausted.Load(); x > 0 && x < end {
		end = x
	}
	var r result
	var durs []time.Duration
	for _, local := range samples {
		for _, s := range local {
			if s.end > end {
				continue
			}
			switch {
			case s.err:
				r.rpcErrors++
			case s.bad:
				r.unexpected++
				r.decisions++
			default:
				r.decisions++
			}
			if !s.err {
				durs = append(durs, s.dur)
			}
		}
	}
	r.window = time.Duration(end - ws)
	if r.window < 0 {
		r.window = 0
	}
	slices.Sort(durs)
	r.durs = durs
	r.p50, r.p99 = percentile(durs, 50), percentile(durs, 99)
	r.firstErr = firstErr
	if ctx.Err() != nil && r.firstErr == nil {
		r.firstErr = ctx.Err()
	}
	return r
}

// schedule sends tickets, the times requests are due, at Poisson arrivals
// averaging rate a second from start until deadline, then closes it. It
// sends every ticket already due at once, so a late wake-up of its own
// does not thin the load; a full channel (every worker busy for 65,536
// arrivals) holds it back.
func schedule(ctx context.Context, tickets chan<- time.Time, rate float64, start, deadline time.Time) {
	defer close(tickets)
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 1))
	next := start
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if !next.Before(deadline) {
			return
		}
		if wait := time.Until(next); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
		select {
		case tickets <- next:
		case <-ctx.Done():
			return
		}
	}
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// LoadOptions are one server, one scenario's requests, and how to send them.
type LoadOptions struct {
	Target, Scenario, Client string
	Keys, Conc, Conns        int
	Rate                     float64 // requests a second, open-loop (0: closed-loop)
	Duration                 time.Duration
	Max                      int64
}

// LoadScenario says whether floodbench load can send scenario id's
// requests: (rt) and (naive) are the load generator's own Redis calls.
func LoadScenario(id string) error {
	sc, ok := scenarioByID(id)
	if !ok {
		return fmt.Errorf("unknown scenario %q", id)
	}
	if sc.work == nil {
		return fmt.Errorf("scenario %s is the load generator's own Redis calls, not requests to a server: floodbench run --scenarios a,%s measures it", sc.id, sc.id)
	}
	return nil
}

// Load drives one server with one scenario's requests and prints the
// result: for ad-hoc runs and for profiling a running floodgate.
func Load(ctx context.Context, o LoadOptions, stdout io.Writer) error {
	if err := LoadScenario(o.Scenario); err != nil {
		return err
	}
	sc, _ := scenarioByID(o.Scenario)
	c, err := dial(o.Target, o.Conns, o.Client)
	if err != nil {
		return err
	}
	defer c.close()
	r := c.drive(ctx, sc.work(o.Keys), cell{conc: o.Conc, rate: o.Rate, window: o.Duration, maxCount: o.Max, rpcTimeout: 5 * time.Second})
	load := fmt.Sprintf("concurrency %d", o.Conc)
	if o.Rate > 0 {
		load = fmt.Sprintf("%.0f/s offered open-loop, at most %d in flight", o.Rate, o.Conc)
	}
	fmt.Fprintf(stdout, "%s at %s: %.0f decisions/s, p50 %s, p99 %s, %d unexpected, %d RPC errors\n",
		sc.label, load, r.rate(), fmtDur(r.p50), fmtDur(r.p99), r.unexpected, r.rpcErrors)
	if r.firstErr != nil && !errors.Is(r.firstErr, context.Canceled) {
		fmt.Fprintln(stdout, "first error:", r.firstErr)
	}
	return nil
}
