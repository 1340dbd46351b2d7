// Package redisstore is the limiter.Store shared by every Floodgate replica:
// one Lua script (bucket.lua + tokenbucket.lua) is the whole algorithm, run atomically
// inside Redis with Redis' clock. The Go side only builds keys and arguments
// and reads the reply.
//
// Key layout: <prefix><bucket name>:{<identity>}. The braces are a Redis
// Cluster hash tag, so all of one identity's buckets share a slot and one
// script call decides them together. Identities reach this package already
// hashed where they carry secrets (extauthz does that).
//
// Each key holds its bucket's state, the instant it is full again and the
// limit it was written under, read with one GET, and expires at that
// instant; bucket.lua has the exact encoding. Requires Redis >= 7.0
// (PEXPIRETIME, which reads a key of the previous encoding).
//
// Topologies: Dial builds the client for a standalone server, a Redis Cluster
// or a Sentinel-managed master. On a Cluster, pipelined decisions of
// different callers share a script call per node, each master batching
// apart (pipeline.go); one decision whose own buckets fall in several slots
// (several identities) runs the script once per slot and refunds the
// charged slots when another denies; see takeAcrossSlots. Shards tells the
// resilience layer which masters a decision needs, so that it keeps a
// circuit breaker per master (shards.go).
package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/limiter"
)

// The scripts: bucket.lua (the state encoding and the clock) followed by
// each script's own body.
var (
	//go:embed bucket.lua
	bucketSource string
	//go:embed tokenbucket.lua
	takeBody string
	//go:embed refund.lua
	refundBody string

	// takeScript decides; refundScript gives back what takeScript took from
	// some buckets (only a decision spanning several Redis Cluster slots
	// uses it).
	takeScript   = newScript(bucketSource + takeBody)
	refundScript = newScript(bucketSource + refundBody)
)

// script is a Lua script and the SHA1 that EVALSHA names it by.
type script struct{ src, sha string }

func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// ErrRefund reports a decision of several script calls (across Redis
// Cluster slots, or over more than MaxScriptBuckets buckets) that was
// denied but whose refund of the calls already charged failed: the decision stands
// (Take returns false and fills the results), but those buckets may have
// paid. They recover at their refill rate.
var ErrRefund = fmt.Errorf("redis: refund after a denial across script calls failed (%w)", limiter.ErrDeniedDespite)

// Client is what the store needs of a go-redis client: commands and
// pipelines. *redis.Client (standalone or Sentinel), *redis.ClusterClient
// (which routes each script call by its first key and splits a pipeline by
// node) and redis.UniversalClient all are.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

// Store is a limiter.Store backed by Redis. Safe for concurrent use.
type Store struct {
	client  Client
	cluster *redis.ClusterClient // client, when it is a Redis Cluster client
	prefix  string
	take    *script
	refund  *script
	pipe    *coalescer // NewPipelined: decisions share round trips

	// On a Cluster, a pipelined store's coalescer per master address
	// (pipeFor); pipesMu serialises making one and Close.
	pipeOpts    PipelineOptions
	pipes       sync.Map // string → *coalescer
	pipesMu     sync.Mutex
	pipesClosed bool
	// slotsKnown: the Cluster client has read the slot map (masterOf).
	slotsKnown atomic.Bool
	// warming: whether warm is making a connection to a server, by
	// address ("" outside a Cluster) → *atomic.Int32 (0 or 1).
	warming sync.Map

	// onScripts, when set (ObserveScripts), hears how long each round trip
	// of script calls took and how many calls it carried.
	onScripts func(calls int, elapsed time.Duration)

	// The offset of Redis' clock from this process' (microseconds), the
	// margin of its measure, and when it was measured (Unix nanoseconds, 0:
	// never); clockSyncing: a call asking for Redis' clock is out. See
	// redisDeadline. onLate, when set (ObserveLate), hears of decisions
	// that came back undecided past their deadline.
	clockOff, clockMargin, clockAt atomic.Int64
	clockSyncing                   atomic.Bool
	onLate                         func(outcome string, decisions int)

	// testClock, set by tests only, is appended to every script call's
	// arguments (seconds, microseconds) for scripts whose TIME call the
	// tests replaced by those arguments.
	testClock func() time.Time
}

// New returns a store that runs its script on client and starts every key
// with prefix ("" for none: keys then start with the bucket's name).
func New(client Client, prefix string) *Store {
	cluster, _ := client.(*redis.ClusterClient)
	return &Store{client: client, cluster: cluster, prefix: prefix, take: takeScript, refund: refundScript}
}

// ObserveScripts makes the store call f after every round trip of script
// calls (a pipelined batch's, or one decision's without pipelining) with
// the calls it carried and the time from sending them to reading every
// reply, the resend of a script Redis did not have cached included. Call it
// before the store decides anything; f must not block.
func (s *Store) ObserveScripts(f func(calls int, elapsed time.Duration)) { s.onScripts = f }

// ObserveLate makes the store call f with the number of decisions of a
// token-bucket script call that outlived its deadline, and what became of
// their charge: "expired_unrun" when the reply says Redis started the
// script past the deadline and it took nothing; "refunded" (or
// "refund_failed") for pipelined decisions Redis allowed after their
// callers stopped waiting, whose takes were given back; "unanswered" when no reply
// came by the deadline (it took nothing if Redis started it past the
// deadline, and charged if Redis started it before). Call it before the
// store decides anything; f must not block.
func (s *Store) ObserveLate(f func(outcome string, decisions int)) { s.onLate = f }

// ErrExpired reports a decision whose script call Redis started after the
// decision's deadline: it decided nothing, took nothing.
var ErrExpired = fmt.Errorf("redis: the script started after the decision's deadline and decided nothing (%w)", context.DeadlineExceeded)

// clockEvery is how often a script call asks for Redis' clock (see
// redisDeadline).
const clockEvery = 30 * time.Second

// redisDeadline is a decision's deadline (zero: none) as tokenbucket.lua
// reads it: microseconds by Redis' clock, for the script to decide nothing
// when it starts later, as a call queued behind a slow script, a stalled
// Redis or a saturated link does, its caller having been answered that the
// store failed. The clocks are compared through the offset a call measured
// (Redis' TIME against the middle of the round trip that carried it), the
// deadline moved later by the measure's margin (half that round trip, and a
// millisecond): a call still in time is never refused for want of a
// precise clock. Until an offset is known, a call carries no deadline.
func (s *Store) redisDeadline(deadline time.Time) int64 {
	if deadline.IsZero() || s.clockAt.Load() == 0 {
		return 0
	}
	return deadline.UnixMicro() + s.clockOff.Load() + s.clockMargin.Load()
}

// wantsClock reports whether the next script call is to ask for Redis'
// clock: none is out, and the last measure is older than clockEvery (or
// none was made). It reserves the ask; exec releases it.
func (s *Store) wantsClock() bool {
	at := s.clockAt.Load()
	if at != 0 && time.Now().UnixNano()-at < int64(clockEvery) {
		return false
	}
	return s.clockSyncing.CompareAndSwap(false, true)
}

// readClock records the offset of Redis' clock (sec, usec: its TIME) from a
// call sent at sent and answered at got.
func (s *Store) readClock(sec, usec int64, sent, got time.Time) {
	mid := sent.UnixMicro() + got.Sub(sent).Microseconds()/2
	s.clockOff.Store(sec*1_000_000 + usec - mid)
	s.clockMargin.Store(got.Sub(sent).Microseconds()/2 + 1000)
	s.clockAt.Store(got.UnixNano())
}

// Key returns the Redis key of bucket (name, id).
func (s *Store) Key(name, id string) string {
	return s.prefix + name + ":{" + id + "}"
}

// QuotaKey returns the Redis key of the calendar quota (name, id): named
// apart from any bucket's, so that a policy turned from one into the other
// starts afresh, and in the same slot as the identity's buckets.
func (s *Store) QuotaKey(name, id string) string {
	return s.prefix + name + ":quota:{" + id + "}"
}

// ErrQuotaClock reports a decision over a calendar quota that Redis' clock
// (TIME) placed outside the windows this replica cut around its estimate of
// that clock: the estimate is off by more than a window (Redis' clock was
// stepped, or the first estimate is not in yet). Nothing was counted; Take
// measures the clock again and decides once more before returning it.
var ErrQuotaClock = errors.New("redis: Redis' clock (TIME) is outside the quota windows this replica cut around its estimate of it; nothing was counted, and the clock is measured again")

// quotaClock is the allowed tokenbucket.lua reports for a decision that
// failed on ErrQuotaClock in a shared call.
const quotaClock = -3

// quotaClockMark is what the script's error says on ErrQuotaClock.
const quotaClockMark = "QUOTA_CLOCK"

// redisNow is this replica's estimate of Redis' clock: its own, moved by the
// offset last measured (none until one is).
func (s *Store) redisNow() time.Time {
	now := time.Now()
	if s.clockAt.Load() != 0 {
		now = now.Add(time.Duration(s.clockOff.Load()) * time.Microsecond)
	}
	return now
}

// syncClock measures the offset of Redis' clock with a TIME command, for a
// decision over a quota that finds none measured.
func (s *Store) syncClock(ctx context.Context) error {
	cmd := redis.NewTimeCmd(ctx, "time")
	sent := time.Now()
	if err := s.client.Process(ctx, cmd); err != nil {
		return fmt.Errorf("redis: reading Redis' clock (TIME) for a quota: %w", explain(err))
	}
	t := cmd.Val()
	s.readClock(t.Unix(), int64(t.Nanosecond()/1000), sent, time.Now())
	return nil
}

// resultOf is bucket r's result from m, its value in the script's reply
// (q: its quota's windows, nil for a bucket): allowed, or, when not, whether
// its Take could have paid alone; uncharged reports a charged Take as it
// was before its charge.
func (s *Store) resultOf(r *limiter.Request, q *quotaArgs, m int64, allowed, uncharged bool) limiter.Result {
	if q == nil {
		if uncharged {
			k, _ := r.Limit.Units()
			m -= r.Cost * k
		}
		return r.Limit.Result(m, r.Kind, r.Cost, allowed || r.Limit.Fits(m, r.Cost))
	}
	used, w := quotaValue(m)
	if uncharged {
		used -= r.Cost
	}
	start, end := q.window(w)
	left := time.Duration(end-s.redisNow().UnixMicro()) * time.Microsecond
	return r.Quota.Result(used, r.Kind, r.Cost, allowed || r.Quota.Fits(used, r.Cost), max(left, 0), time.Duration(end-start)*time.Microsecond)
}

// Take implements limiter.Store. Buckets that share a Redis Cluster slot
// (always, outside a Cluster; within one, all buckets of one identity) are
// decided by one script call: one round trip, atomic. On a Cluster, a
// decision spanning several slots takes the path of takeAcrossSlots: still
// all-or-nothing, but not atomic; in the rare case its refund fails, Take
// returns false, the filled results and an error wrapping ErrRefund.
func (s *Store) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	return s.TakeBy(ctx, time.Time{}, reqs, res)
}

// TakeBy implements limiter.DeadlineStore: Take, ending at deadline too (a
// zero deadline adds none). A pipelined store waits for the deadline with a
// timer it pools (BenchmarkDeadline measures what that saves over a context
// derived per decision); otherwise a context is derived for it.
func (s *Store) TakeBy(ctx context.Context, deadline time.Time, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	if err := limiter.Validate(reqs, res); err != nil {
		return false, err
	}
	if !hasQuota(reqs) {
		return s.takeBy(ctx, deadline, reqs, res)
	}
	// A quota's windows are cut around Redis' clock as this replica
	// estimates it: measured first if it never was, and again when the
	// script found the estimate off by more than a window.
	if s.clockAt.Load() == 0 {
		if err := s.syncClock(ctx); err != nil {
			return false, err
		}
	}
	off := s.clockOff.Load()
	allowed, err := s.takeBy(ctx, deadline, reqs, res)
	switch {
	case errors.Is(err, ErrQuotaClock):
		if err := s.syncClock(ctx); err != nil {
			return false, err
		}
		allowed, err = s.takeBy(ctx, deadline, reqs, res)
	case errors.Is(err, ErrExpired) && absDiff(s.clockOff.Load(), off) > clockStep:
		// Expired by a deadline converted with an offset that the call's
		// own reading of Redis' clock (every quota call reads it) shows
		// stale by more than a second: Redis' clock was stepped, not late.
		// Nothing was decided; decide once more on the new offset.
		allowed, err = s.takeBy(ctx, deadline, reqs, res)
	}
	return allowed, err
}

// clockStep is how far Redis' clock must move against the last measure for
// an expired quota decision to be retried (microseconds).
const clockStep = 1_000_000

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// hasQuota reports whether a decision names a calendar quota.
func hasQuota(reqs []limiter.Request) bool {
	for i := range reqs {
		if reqs[i].Quota != nil {
			return true
		}
	}
	return false
}

// takeBy is TakeBy on valid input.
func (s *Store) takeBy(ctx context.Context, deadline time.Time, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	if len(reqs) > maxBuckets {
		return false, fmt.Errorf("redis: a decision over %d buckets, above the script's %d", len(reqs), maxBuckets)
	}
	// A pipelined decision's keys and arguments live in its pooled call.
	var cl *call
	var keys []string
	var buckets []bucketArgs
	if s.pipe != nil {
		cl = callPool.Get().(*call)
		keys, buckets = s.prepareInto(reqs, cl.keys[:0], cl.buckets[:0])
	} else {
		keys, buckets = s.prepare(reqs)
	}
	// A decision over more than MaxScriptBuckets buckets, or (on a
	// Cluster) over several slots, is several script calls.
	acrossSlots := len(keys) > MaxScriptBuckets || (s.cluster != nil && len(keys) > 1 && !sameSlot(keys))
	if acrossSlots && cl != nil {
		// keys and buckets stay with this decision: the call goes back
		// without them.
		cl.keys, cl.buckets = nil, nil
		cl.recycle()
		cl = nil
	}
	if !deadline.IsZero() && (s.pipe == nil || acrossSlots) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	if acrossSlots {
		return s.takeAcrossSlots(ctx, reqs, res, keys, buckets)
	}
	// A quota's windows outlive the pooled call that carries them.
	var quotas []*quotaArgs
	for i := range buckets {
		if buckets[i].q != nil {
			if quotas == nil {
				quotas = make([]*quotaArgs, len(buckets))
			}
			quotas[i] = buckets[i].q
		}
	}
	var reply []int64
	var err error
	if s.pipe != nil {
		reply, err = s.pipeFor(ctx, keys[0]).run(ctx, deadline, cl, keys, buckets)
	} else {
		dl := deadline
		if d, ok := ctx.Deadline(); ok && (dl.IsZero() || d.Before(dl)) {
			dl = d
		}
		// Built here rather than by takeCall, so that it stays on the stack.
		arg, extra := s.callDeadline(dl)
		if quotas != nil {
			extra = quotaClockReply
		}
		sc := &scriptCall{script: s.take, keys: keys, args: takeArgvBy(1, arg, func(int) []bucketArgs { return buckets }), want: 1 + len(keys) + extra, clock: extra > 0}
		s.exec(ctx, sc)
		reply, err = sc.reply, sc.err
		if err == nil && reply[0] == expired {
			err = ErrExpired
		}
	}
	if err != nil {
		return false, fmt.Errorf("redis: token-bucket script: %w", err)
	}
	if quotas != nil {
		return s.quotaResults(reqs, res, reply, quotas), nil
	}
	return results(reqs, res, reply), nil
}

// maxBuckets bounds one decision's buckets: the script reads the count as a
// 16-bit number.
const maxBuckets = 1<<16 - 1

// MaxScriptBuckets bounds the buckets one script call decides. Redis serves
// nobody else while a script runs, some 15-20 µs a bucket: a decision over
// more buckets is split into script calls of at most this many, sent in one
// pipeline (between which Redis serves its other clients) and kept
// all-or-nothing by refunds, as a decision across Cluster slots is (see
// takeAcrossSlots). 128 buckets hold Redis for about 2 ms, a small part of
// a 50 ms store timeout.
const MaxScriptBuckets = 128

// prepare returns the keys of reqs' buckets and what the script reads of
// each.
func (s *Store) prepare(reqs []limiter.Request) ([]string, []bucketArgs) {
	return s.prepareInto(reqs, make([]string, 0, len(reqs)), make([]bucketArgs, 0, len(reqs)))
}

// prepareInto is prepare appending to keys and buckets.
func (s *Store) prepareInto(reqs []limiter.Request, keys []string, buckets []bucketArgs) ([]string, []bucketArgs) {
	var now time.Time // Redis' clock as estimated, for quotas
	for i := range reqs {
		r := &reqs[i]
		if r.Quota != nil {
			if now.IsZero() {
				now = s.redisNow()
			}
			keys = append(keys, s.QuotaKey(r.Name, r.ID))
			buckets = append(buckets, bucketArgs{limitArgs{c: r.Quota.Limit, k: 1, g: 1, j: quotaRes, q: quotaArgsOf(r.Quota, now)}, r.Kind, r.Cost})
			continue
		}
		keys = append(keys, s.Key(r.Name, r.ID))
		buckets = append(buckets, bucketArgs{limitArgsOf(r.Limit), r.Kind, r.Cost})
	}
	return keys, buckets
}

// quotaResults is results for a decision naming quotas, quotas[i] bucket
// i's windows (nil for a bucket).
func (s *Store) quotaResults(reqs []limiter.Request, res []limiter.Result, reply []int64, quotas []*quotaArgs) bool {
	allowed := reply[0] == 1
	for i := range reqs {
		res[i] = s.resultOf(&reqs[i], quotas[i], reply[i+1], allowed, false)
	}
	return allowed
}

// results fills res from one decision's part of the script's reply
// (allowed, then the units missing from each bucket) and returns allowed.
func results(reqs []limiter.Request, res []limiter.Result, reply []int64) bool {
	allowed := reply[0] == 1
	for i := range reqs {
		r := &reqs[i]
		m := reply[i+1]
		res[i] = r.Limit.Result(m, r.Kind, r.Cost, allowed || r.Limit.Fits(m, r.Cost))
	}
	return allowed
}

func sameSlot(keys []string) bool {
	first := Slot(keys[0])
	for _, k := range keys[1:] {
		if Slot(k) != first {
			return false
		}
	}
	return true
}

// scriptCall is one call of a script: its keys and arguments, the number of
// values its reply must hold and, once exec has run it, the reply or the
// error.
type scriptCall struct {
	script    *script
	keys      []string
	args      []any
	want      int
	crossSlot bool // a Cluster call whose keys, beyond the first, follow args
	clock     bool // the call asks for Redis' clock: its reply ends with it (see redisDeadline)
	reply     []int64
	err       error
}

// takeCall is the token-bucket script's call for n decisions, decision j's
// buckets being buckets(j), their keys keys (every decision's in turn), to
// decide nothing if Redis starts it after deadline (zero: none).
func (s *Store) takeCall(keys []string, n int, deadline time.Time, buckets func(j int) []bucketArgs) *scriptCall {
	dl, extra := s.callDeadline(deadline)
	if extra == 0 && anyQuota(n, buckets) {
		extra = quotaClockReply
	}
	return &scriptCall{script: s.take, keys: keys, args: takeArgvBy(n, dl, buckets), want: n + len(keys) + extra, clock: extra > 0}
}

// quotaClockReply: a script call over a quota ends its reply with Redis'
// clock, as one asking for it does (see callDeadline), so that the quota's
// time left to its window's end is counted from an offset measured on that
// very call, even just after Redis' clock was stepped.
const quotaClockReply = 2

// anyQuota reports whether any of n decisions' buckets is a quota's.
func anyQuota(n int, buckets func(j int) []bucketArgs) bool {
	for j := 0; j < n; j++ {
		for _, b := range buckets(j) {
			if b.q != nil {
				return true
			}
		}
	}
	return false
}

// callDeadline is the deadline argument of a call ending at deadline and
// the values its reply holds beyond the decisions': the call asks for
// Redis' clock instead when it is time to (-1, and 2 more values).
func (s *Store) callDeadline(deadline time.Time) (int64, int) {
	if s.wantsClock() {
		return -1, 2
	}
	return s.redisDeadline(deadline), 0
}

// expired is the allowed tokenbucket.lua reports for the decisions of a
// call that started past its deadline.
const expired = -2

// ErrKeyType reports a decision that failed, in a script call it shared with
// others, on a key that is not a bucket: something else writes under the
// key prefix (WRONGTYPE). The other decisions of the call stand.
var ErrKeyType = errors.New("WRONGTYPE: a bucket's key holds another kind of value; something else writes under Floodgate's key prefix (store.redis.prefix): give Floodgate a prefix of its own")

// exec runs calls: each as EVALSHA, all of them in one pipeline when there
// are several (a Cluster client splits it by node and sends to every node at
// once). The calls whose server lacks the script (NOSCRIPT: Redis restarted,
// or SCRIPT FLUSH) are sent once more with EVAL, which caches it. Each call
// gets its reply, checked to hold want values, or its error.
func (s *Store) exec(ctx context.Context, calls ...*scriptCall) {
	if s.onScripts != nil {
		start := time.Now()
		defer func() { s.onScripts(len(calls), time.Since(start)) }()
	}
	var sent time.Time // for a call asking for Redis' clock
	for _, sc := range calls {
		if sc.clock {
			sent = time.Now()
		}
	}
	var clock []any
	if s.testClock != nil {
		now := s.testClock()
		clock = []any{now.Unix(), now.Nanosecond() / 1000}
	}
	cmds := make([]*redis.IntSliceCmd, len(calls))
	for i, sc := range calls {
		cmds[i] = sc.cmd(ctx, "evalsha", sc.script.sha, clock)
	}
	s.send(ctx, cmds)
	var again []*redis.IntSliceCmd
	for i, sc := range calls {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			cmds[i] = sc.cmd(ctx, "eval", sc.script.src, clock)
			again = append(again, cmds[i])
		}
	}
	if len(again) > 0 {
		s.send(ctx, again)
	}
	for i, sc := range calls {
		sc.reply, sc.err = cmds[i].Result()
		if sc.err == nil && s.cluster != nil && !s.slotsKnown.Load() {
			s.slotsKnown.Store(true) // the command was routed: the slot map is in
		}
		if sc.err != nil {
			if timedOut(sc.err) {
				s.warm(sc.keys[0])
				if sc.script == s.take && s.onLate != nil {
					s.onLate("unanswered", sc.decisions())
				}
			}
			sc.err = explain(sc.err) // on every path: alone, pipelined, slot by slot
			if strings.Contains(sc.err.Error(), quotaClockMark) {
				sc.err = fmt.Errorf("%w (%v)", ErrQuotaClock, sc.err)
			}
		} else if len(sc.reply) != sc.want {
			sc.err = fmt.Errorf("script returned %d values, %d expected", len(sc.reply), sc.want)
		} else if sc.clock {
			n := len(sc.reply)
			s.readClock(sc.reply[n-2], sc.reply[n-1], sent, time.Now())
			sc.reply = sc.reply[: n-2 : n-2]
		}
		if sc.clock {
			s.clockSyncing.Store(false)
		} else if sc.err == nil && sc.reply[0] == expired && s.onLate != nil {
			s.onLate("expired_unrun", sc.decisions())
		}
	}
}

// decisions is the number of decisions a token-bucket call carries.
func (sc *scriptCall) decisions() int {
	n := sc.want - len(sc.keys)
	if sc.clock {
		n -= 2
	}
	if sc.crossSlot {
		n = int(le.Uint16(sc.args[0].([]byte))) // D leads ARGV[1]
	}
	return n
}

// timedOut reports whether a command got no reply in time: go-redis then
// drops its connection (its stream may still hold the late reply), and on a
// Redis far away the one that replaces it may not fit a decision either (see
// warm). A reset or refused connection is not one: near or far, the next
// decision's handshake fares as any, and a dead Redis gains nothing from
// more dials.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// warmTimeout bounds warm: a dial and the handshake, each read and write
// still bounded by the client's own timeouts.
const warmTimeout = time.Second

// warm makes a connection to the server of key outside any decision, after
// a command timed out: a PING on a context of its own, one at a time per
// server (against a Redis that has stopped answering, more would only open
// connections). A new connection's handshake costs a round trip before its
// first command, inside the deadline of the decision that needs it: with
// Redis far enough away that two round trips exceed the timeout, a decision
// sent alone (which, unlike a flusher's batch, reads no reply past its
// deadline) could never make one, and the pool would not recover from a
// fault that closed its connections. The PING's connection goes back to the
// pool ready.
func (s *Store) warm(key string) {
	v, _ := s.warming.LoadOrStore(s.masterOf(context.Background(), key), new(atomic.Int32))
	n := v.(*atomic.Int32)
	if n.Add(1) > 1 {
		n.Add(-1)
		return
	}
	go func() {
		defer n.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
		defer cancel()
		if s.cluster != nil {
			if node, err := s.cluster.MasterForKey(ctx, key); err == nil {
				_ = node.Ping(ctx).Err()
			}
			return
		}
		_ = s.client.Process(ctx, redis.NewStatusCmd(ctx, "ping"))
	}()
}

// send runs cmds: alone, or in one pipeline. Errors are read per command.
// Each is sent once (sendOnce).
func (s *Store) send(ctx context.Context, cmds []*redis.IntSliceCmd) {
	if len(cmds) == 1 {
		_ = s.client.Process(ctx, sendOnce{cmds[0]})
		return
	}
	pipe := s.client.Pipeline()
	for _, c := range cmds {
		_ = pipe.Process(ctx, sendOnce{c})
	}
	_, _ = pipe.Exec(ctx)
}

// sendOnce is a script call that go-redis must not send again after a
// network error: the script may have run (its reply lost with the
// connection), and running it again charges the buckets twice. go-redis'
// cluster client did just that, resending a whole pipeline after a reset,
// the calls whose replies it had read included. Redirections (MOVED, ASK)
// and READONLY still go to the node named: those replies mean the call did
// not run.
type sendOnce struct{ *redis.IntSliceCmd }

// NoRetry implements redis.Cmder.
func (sendOnce) NoRetry() bool { return true }

// cmd is the script call as a command: verb ("evalsha" or "eval") body
// numkeys keys... args... clock..., its first key marked for Cluster
// routing. An IntSliceCmd reads the script's reply (an array of integers)
// straight into []int64.
func (sc *scriptCall) cmd(ctx context.Context, verb, body string, clock []any) *redis.IntSliceCmd {
	a := make([]any, 0, 3+len(sc.keys)+len(sc.args)+len(clock))
	a = append(a, verb, body, len(sc.keys))
	for _, k := range sc.keys {
		a = append(a, k)
	}
	a = append(a, sc.args...)
	a = append(a, clock...)
	cmd := redis.NewIntSliceCmd(ctx, a...)
	if len(sc.keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// takeAcrossSlots decides buckets that live in several Redis Cluster slots,
// or more than MaxScriptBuckets of them. Redis runs a script only over keys
// of one slot, and one script over many buckets would hold Redis for
// everyone (tens of milliseconds for a few thousand), so no single call is
// atomic over them all. Instead:
//
//  1. The buckets are grouped by slot, each group cut into runs of at most
//     MaxScriptBuckets (groupBuckets), and the token-bucket script runs once
//     per group, all groups in one pipeline: go-redis sends each node its
//     groups in one round trip, to all nodes at once, and Redis serves its
//     other clients between them. Each group is all-or-nothing on its own.
//  2. If every group allowed, the decision is allowed: every bucket paid.
//  3. Otherwise the takes of the groups that were charged are refunded
//     (refund.lua, again one pipeline), so that no take paid; they report
//     what they held before the charge, as if never charged. A decision's
//     Charges and Refunds (limiter.Kind) stand whatever its takes decide:
//     they are never undone, in any group.
//
// The window. Between a group's charge and its refund (about one round trip)
// the charge is visible: a concurrent decision on those buckets may be
// denied for tokens that are about to come back. This errs towards denying,
// never towards admitting more than the limits allow, with one exception
// bounded by the window itself: a refund cannot make a bucket fuller than
// full, so if the bucket would have refilled to full during the window, the
// tokens it would have gained meanwhile are handed back too (rate × window,
// typically far below one token). The refund is not atomic with the denial
// either: if it fails (a node lost between the two steps), Take reports the
// denial with an error wrapping ErrRefund, and the charged buckets keep the
// charge until they refill.
//
// A group whose call fails leaves its own buckets uncertain (the script may
// or may not have run), as a failed call does on the single-slot path; the
// other groups' takes are refunded (their charges and refunds stand) and
// Take returns the error: one *NodeError per
// failed group (and failed refund), naming the master it failed on, so the
// resilience layer counts the failure against that master alone.
func (s *Store) takeAcrossSlots(ctx context.Context, reqs []limiter.Request, res []limiter.Result, keys []string, buckets []bucketArgs) (bool, error) {
	groups, slots := groupBuckets(keys, s.cluster != nil)
	dl, _ := ctx.Deadline()
	gkeys := make([][]string, len(groups))
	gbuckets := make([][]bucketArgs, len(groups))
	takes := make([]*scriptCall, len(groups))
	for g, idx := range groups {
		gkeys[g] = make([]string, len(idx))
		gbuckets[g] = make([]bucketArgs, len(idx))
		for j, i := range idx {
			gkeys[g][j], gbuckets[g][j] = keys[i], buckets[i]
		}
		takes[g] = s.takeCall(gkeys[g], 1, dl, func(int) []bucketArgs { return gbuckets[g] })
	}
	// A window of calls at a time: a reply is read only once its whole
	// pipeline is written, so a call that ran in time but whose reply is
	// not read by the deadline (its buckets charged, its caller told the
	// store failed) is one of at most the window's calls. Past the
	// deadline no more are sent.
	for i := 0; i < len(takes); i += callWindow {
		if err := ctx.Err(); err != nil {
			for _, sc := range takes[i:] {
				sc.err = err
			}
			break
		}
		s.exec(ctx, takes[i:min(i+callWindow, len(takes))]...)
	}
	for _, sc := range takes {
		if sc.err == nil && sc.reply[0] == expired {
			sc.err = ErrExpired // it took nothing: no refund
		}
	}
	// where names group g in errors: its slot on a Cluster, its place
	// among the calls otherwise.
	where := func(g int) string {
		if s.cluster != nil {
			return fmt.Sprintf("slot %d", slots[g])
		}
		return fmt.Sprintf("script call %d of %d", g+1, len(groups))
	}
	allowed := true
	var fails []error // one per failed group, each naming its master
	for g, sc := range takes {
		if sc.err != nil {
			allowed = false
			if s.cluster != nil || len(fails) == 0 { // outside a Cluster, the first says it
				fails = append(fails, s.onNode(ctx, gkeys[g][0], fmt.Errorf("redis: token-bucket script (%s): %w", where(g), sc.err)))
			}
			continue
		}
		if sc.reply[0] != 1 {
			allowed = false
		}
	}
	if allowed {
		for g, idx := range groups {
			for j, i := range idx {
				res[i] = s.resultOf(&reqs[i], gbuckets[g][j].q, takes[g].reply[j+1], true, false)
			}
		}
		return true, nil
	}

	// Refund the takes of every group that charged them (a decision's
	// charges and refunds stand whatever its takes decide). The refund
	// must happen even if the caller has given up on the decision (its
	// context cancelled or past its deadline), so it runs without the
	// caller's cancellation; the client's own read and write timeouts
	// still bound it.
	var refunds []*scriptCall
	var refunded []int // groups
	for g, sc := range takes {
		if sc.err != nil || sc.reply[0] != 1 {
			continue
		}
		var rkeys []string
		var rbuckets []bucketArgs
		var rvalues []int64
		for j, b := range gbuckets[g] {
			if b.kind == limiter.Take && b.cost > 0 {
				rkeys, rbuckets, rvalues = append(rkeys, gkeys[g][j]), append(rbuckets, b), append(rvalues, sc.reply[j+1])
			}
		}
		if len(rkeys) > 0 {
			refunds = append(refunds, &scriptCall{script: s.refund, keys: rkeys, args: refundArgv(rbuckets, rvalues), want: len(rkeys)})
			refunded = append(refunded, g)
		}
	}
	var refundErrs []error
	if len(refunds) > 0 {
		s.exec(context.WithoutCancel(ctx), refunds...)
		for j, sc := range refunds {
			if sc.err != nil {
				refundErrs = append(refundErrs, s.onNode(ctx, refunds[j].keys[0], fmt.Errorf("%w (%s): %w", ErrRefund, where(refunded[j]), sc.err)))
			}
		}
	}
	refundErr := errors.Join(refundErrs...)
	if len(fails) > 0 {
		return false, errors.Join(append(fails, refundErrs...)...)
	}
	for g, idx := range groups {
		wasCharged := takes[g].reply[0] == 1
		for j, i := range idx {
			r, q := &reqs[i], gbuckets[g][j].q
			m := takes[g].reply[j+1]
			switch {
			case r.Kind != limiter.Take:
				res[i] = s.resultOf(r, q, m, true, false)
			case wasCharged:
				// Report the bucket as it was before the charge.
				res[i] = s.resultOf(r, q, m, true, true)
			default:
				res[i] = s.resultOf(r, q, m, false, false)
			}
		}
	}
	return false, refundErr
}

// callWindow bounds the script calls of one decision on the wire at once
// (see takeAcrossSlots): a decision across Cluster slots has few groups,
// and they still leave together.
const callWindow = 4

// groupBuckets groups the indices of keys for takeAcrossSlots: by slot, in
// order of first appearance, on a Cluster (bySlot; one group outside one),
// each group cut into runs of at most MaxScriptBuckets. slots[g] is group
// g's slot (0 outside a Cluster).
func groupBuckets(keys []string, bySlot bool) (groups [][]int, slots []int) {
	var bucketsOf [][]int
	if !bySlot {
		all := make([]int, len(keys))
		for i := range all {
			all[i] = i
		}
		bucketsOf, slots = [][]int{all}, []int{0}
	} else {
		for i, k := range keys {
			sl := Slot(k)
			g := 0
			for g < len(slots) && slots[g] != sl {
				g++
			}
			if g == len(slots) {
				slots = append(slots, sl)
				bucketsOf = append(bucketsOf, nil)
			}
			bucketsOf[g] = append(bucketsOf[g], i)
		}
	}
	var outSlots []int
	for g, idx := range bucketsOf {
		for len(idx) > 0 {
			n := min(len(idx), MaxScriptBuckets)
			groups = append(groups, idx[:n:n])
			outSlots = append(outSlots, slots[g])
			idx = idx[n:]
		}
	}
	return groups, outSlots
}

// ErrNoMaster reports Sentinels that answered but named no master: they
// monitor none by the configured name.
var ErrNoMaster = errors.New("the Sentinels know no master by the configured name")

// ErrNoAuth reports a server that wants a password the client did not
// send. Redis answers NOAUTH to a short command; to a longer one (more than
// ten parts, as a script call deciding many buckets is) from a connection
// that has not authenticated, it answers only "Protocol error:
// unauthenticated multibulk length" and closes the connection. Either way
// the store's error wraps ErrNoAuth.
var ErrNoAuth = errors.New("NOAUTH: the Redis server requires a password (store.redis.password_file or password_env, and username for an ACL user)")

// explain adds what a user can act on to go-redis errors that lack it. The
// script and INFO never reply nil, so a nil reply is the Sentinels' answer
// to a master name they do not monitor.
func explain(err error) error {
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: %w", ErrNoMaster, err)
	}
	if redis.HasErrorPrefix(err, "NOAUTH") || (err != nil && strings.Contains(err.Error(), "Protocol error: unauthenticated")) {
		return fmt.Errorf("%w: %w", ErrNoAuth, err)
	}
	return err
}

// MinVersion is the oldest Redis the script runs on (PEXPIRETIME, SET PXAT).
const MinVersion = "7.0.0"

// ErrVersion reports a Redis server too old for the script.
var ErrVersion = errors.New("redis: server too old")

// CheckServer verifies that the server answers and is recent enough, so a
// misconfiguration is reported at start-up with a message a user can act on
// rather than as a script error on the first request.
func CheckServer(ctx context.Context, c redis.UniversalClient) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("redis: cannot read server info: %w", explain(err))
	}
	v := InfoField(info, "redis_version")
	if v == "" {
		return fmt.Errorf("redis: server info has no redis_version")
	}
	if versionLess(v, MinVersion) {
		return fmt.Errorf("%w: Floodgate needs Redis >= %s (PEXPIRETIME), the server is %s", ErrVersion, MinVersion, v)
	}
	return nil
}

// InfoField is the value of field name in the text of Redis' INFO ("" when
// absent): where a server says what it is (redis_version, maxmemory_policy)
// to a client that may not run CONFIG GET, as managed services refuse it.
func InfoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// versionLess compares dotted numeric versions ("6.2.14" < "7.0.0").
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
