package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/limiter"
)

// Envoy plays Envoy's rate_limit_quota filter against a quota server, as
// its source does it (source/extensions/filters/http/rate_limit_quota/,
// the GlobalRateLimitClientImpl of global_client_impl.cc and the filter of
// filter.cc), for the tests, floodbench and floodgate check --rlqs:
//
//   - one stream per domain, opened when the first bucket is made; a new
//     bucket's report is sent at once, counting the request that made it,
//     over no time (createBucketImpl);
//   - every interval (Report, or Run's ticker) a report of every bucket it
//     holds, counters zeroed, time_elapsed in whole seconds since the
//     bucket's last report, domain set (buildReports); a closed stream is
//     reopened then, and when it cannot be the report is dropped
//     (onSendReportsTimer);
//   - an answer's actions matched to its buckets by bucket_id, unknown ones
//     and ones without an id dropped; a token bucket kept, tokens and all,
//     while max_tokens, tokens_per_fill and fill_interval's nanos are the
//     same (protoTokenBucketsEq), else made anew, full, refilling
//     tokens_per_fill / whole seconds of fill_interval a second (a
//     sub-second interval divides by zero: no limit); requests_per_time_unit
//     and an action with no strategy dropped; abandon erases the bucket
//     (onQuotaResponseImpl);
//   - an assignment expires after assignment_time_to_live's whole seconds
//     (unset: at once) to the expired_assignment_behavior for its timeout,
//     then to the no_assignment_behavior (startActionExpirationTimer,
//     onActionExpirationTimer, onFallbackExpirationTimer);
//   - a request matching a bucket it does not hold is allowed unless the
//     no_assignment_behavior is DENY_ALL, and makes the bucket
//     (executeMatchedAction); one it holds is decided by its assignment, a
//     token bucket taking one token (shouldAllowRequest).
//
// Safe for concurrent use. Time is its Clock's (the token buckets, the
// TTLs); the reports go when Report is called or Run ticks.
type Envoy struct {
	o      EnvoyOptions
	client rlqsv3.RateLimitQuotaServiceClient

	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	stream  rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	tried   bool // the first bucket tried the stream
	buckets map[string]*envoyBucket
	pending int // reports sent on the current stream not answered yet
	answers int // every answer received
	streams int // streams opened
	dropped int // reports dropped: no stream could be started
	changed chan struct{}
	closed  bool
	lastErr error
}

// EnvoyOptions are the filter's settings, as RateLimitQuotaBucketSettings
// names them, and the client's.
type EnvoyOptions struct {
	Domain string
	// Clock is the filter's time (nil: the system clock).
	Clock limiter.Clock
	// NoAssignment is no_assignment_behavior.fallback_rate_limit (nil:
	// ALLOW_ALL).
	NoAssignment *typev3.RateLimitStrategy
	// Expired is expired_assignment_behavior.fallback_rate_limit (nil:
	// none), for ExpiredTimeout (whole seconds).
	Expired        *typev3.RateLimitStrategy
	ExpiredTimeout time.Duration
}

// envoyBucket is a bucket as Envoy caches it (CachedBucket).
type envoyBucket struct {
	id              *rlqsv3.BucketId
	allowed, denied uint64
	lastReport      time.Time
	action          *rlqsv3.RateLimitQuotaResponse_BucketAction // nil: the default
	tb              *atomicTokenBucket
	expires         time.Time // the action's
	// fallback: the action expired to Expired, until fallbackEnds.
	fallback     bool
	fallbackEnds time.Time
}

// NewEnvoy is an Envoy whose filter talks to the quota server on conn.
func NewEnvoy(conn grpc.ClientConnInterface, o EnvoyOptions) *Envoy {
	if o.Clock == nil {
		o.Clock = limiter.SystemClock{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Envoy{o: o, client: rlqsv3.NewRateLimitQuotaServiceClient(conn), ctx: ctx, cancel: cancel,
		buckets: map[string]*envoyBucket{}, changed: make(chan struct{})}
}

// Close ends the stream and the Envoy's work.
func (e *Envoy) Close() {
	e.mu.Lock()
	e.closed = true
	s := e.stream
	e.stream = nil
	e.mu.Unlock()
	if s != nil {
		s.CloseSend()
	}
	e.cancel()
}

// Request decides one request whose bucket_id_builder made bucket, as the
// filter does; true when it is allowed.
func (e *Envoy) Request(bucket map[string]string) bool {
	now := e.o.Clock.Now()
	id := &rlqsv3.BucketId{Bucket: bucket}
	k := bucketKey(id)
	e.mu.Lock()
	b := e.buckets[k]
	if b != nil {
		ok := e.allow(b, now)
		if ok {
			b.allowed++
		} else {
			b.denied++
		}
		e.mu.Unlock()
		return ok
	}
	ok := !isDenyAll(e.o.NoAssignment)
	b = &envoyBucket{id: proto.Clone(id).(*rlqsv3.BucketId), lastReport: now}
	if ok {
		b.allowed = 1
	} else {
		b.denied = 1
	}
	e.buckets[k] = b
	if !e.tried {
		e.tried = true
		e.startLocked()
	}
	report := e.reportLocked(now, []*envoyBucket{b})
	s := e.stream
	if s != nil {
		e.pending++
	}
	e.mu.Unlock()
	if s != nil {
		e.sendOn(s, report)
	}
	return ok
}

// allow decides one request by b's assignment (e.mu held).
func (e *Envoy) allow(b *envoyBucket, now time.Time) bool {
	e.expire(b, now)
	var s *typev3.RateLimitStrategy
	switch {
	case b.action != nil:
		s = b.action.GetQuotaAssignmentAction().GetRateLimitStrategy()
	case b.fallback:
		s = e.o.Expired
	default:
		s = e.o.NoAssignment
	}
	switch x := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return x.BlanketRule != typev3.RateLimitStrategy_DENY_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		if b.tb == nil {
			b.tb = newAtomicTokenBucket(x.TokenBucket, now)
		}
		return b.tb.consume(now)
	}
	return true // requests_per_time_unit ("not yet supported"), or none: allowed
}

// expire applies the TTLs that ran out by now (e.mu held): the action to
// the expired_assignment_behavior, that to the no_assignment_behavior.
func (e *Envoy) expire(b *envoyBucket, now time.Time) {
	if b.action != nil && !now.Before(b.expires) {
		at := b.expires
		b.action = nil
		if e.o.Expired != nil {
			b.fallback, b.fallbackEnds = true, at.Add(e.o.ExpiredTimeout.Truncate(time.Second))
			if tb := e.o.Expired.GetTokenBucket(); tb == nil {
				b.tb = nil
			} else if b.tb == nil || !b.tb.same(tb) {
				b.tb = newAtomicTokenBucket(tb, now)
			}
		} else {
			b.tb = nil
		}
	}
	if b.fallback && !now.Before(b.fallbackEnds) {
		b.fallback, b.tb = false, nil
	}
}

// Report is one tick of Envoy's report timer: every bucket's usage, on
// the stream, reopened if it was closed; dropped (false) when it cannot be.
func (e *Envoy) Report() bool {
	now := e.o.Clock.Now()
	e.mu.Lock()
	if len(e.buckets) == 0 || e.closed {
		e.mu.Unlock()
		return false
	}
	bs := make([]*envoyBucket, 0, len(e.buckets))
	for _, b := range e.buckets {
		bs = append(bs, b)
	}
	sort.Slice(bs, func(i, j int) bool { return bucketKey(bs[i].id) < bucketKey(bs[j].id) })
	report := e.reportLocked(now, bs)
	if e.stream == nil && !e.startLocked() {
		e.dropped++
		e.mu.Unlock()
		return false
	}
	s := e.stream
	e.pending++
	e.mu.Unlock()
	e.sendOn(s, report)
	return true
}

// Run reports every interval until ctx ends or the Envoy is closed.
func (e *Envoy) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			e.Report()
		case <-ctx.Done():
			return
		case <-e.ctx.Done():
			return
		}
	}
}

// reportLocked builds the report of bs, zeroing their counters
// (getUsageFromBucket; e.mu held).
func (e *Envoy) reportLocked(now time.Time, bs []*envoyBucket) *rlqsv3.RateLimitQuotaUsageReports {
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: e.o.Domain}
	for _, b := range bs {
		elapsed := now.Sub(b.lastReport).Truncate(time.Second)
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: b.id, TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied})
		b.allowed, b.denied, b.lastReport = 0, 0, now
	}
	return proto.Clone(r).(*rlqsv3.RateLimitQuotaUsageReports)
}

// startLocked opens the stream (e.mu held); false when it cannot be.
func (e *Envoy) startLocked() bool {
	if e.stream != nil {
		return true
	}
	s, err := e.client.StreamRateLimitQuotas(e.ctx)
	if err != nil {
		e.lastErr = err
		return false
	}
	e.stream, e.pending = s, 0
	e.streams++
	go e.receive(s)
	return true
}

func (e *Envoy) sendOn(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, r *rlqsv3.RateLimitQuotaUsageReports) {
	// io.EOF: the server ended the stream; its status is what Recv returns,
	// which receive records (grpc-go's ClientStream.SendMsg).
	if err := s.Send(r); err != nil && !errors.Is(err, io.EOF) {
		e.mu.Lock()
		e.lastErr = err
		e.mu.Unlock()
	}
}

// receive applies the stream's answers until it closes (onRemoteClose:
// the stream is forgotten, reopened at the next report).
func (e *Envoy) receive(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	for {
		resp, err := s.Recv()
		if err != nil {
			e.mu.Lock()
			if e.stream == s {
				e.stream = nil
			}
			if !errors.Is(err, io.EOF) {
				e.lastErr = err
			}
			e.notifyLocked()
			e.mu.Unlock()
			return
		}
		e.apply(resp)
	}
}

// apply is onQuotaResponseImpl.
func (e *Envoy) apply(resp *rlqsv3.RateLimitQuotaResponse) {
	now := e.o.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pending > 0 {
		e.pending-- // a push that comes while a report waits is taken for its answer
	}
	e.answers++
	defer e.notifyLocked()
	for _, a := range resp.GetBucketAction() {
		if len(a.GetBucketId().GetBucket()) == 0 {
			continue
		}
		k := bucketKey(a.GetBucketId())
		b := e.buckets[k]
		if b == nil {
			continue
		}
		if a.GetAbandonAction() != nil {
			delete(e.buckets, k)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			continue
		}
		switch x := qa.GetRateLimitStrategy().GetStrategy().(type) {
		case *typev3.RateLimitStrategy_BlanketRule_:
			b.tb = nil
		case *typev3.RateLimitStrategy_TokenBucket:
			if b.action == nil || b.action.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil || b.tb == nil || !b.tb.same(x.TokenBucket) {
				b.tb = newAtomicTokenBucket(x.TokenBucket, now)
			}
		default: // requests_per_time_unit, or no strategy: dropped
			continue
		}
		b.action = proto.Clone(a).(*rlqsv3.RateLimitQuotaResponse_BucketAction)
		b.fallback = false
		b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	}
}

func (e *Envoy) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// Settle waits until every report sent on the current stream is answered,
// or the stream closed; false when ctx ends first.
func (e *Envoy) Settle(ctx context.Context) bool {
	return e.waitFor(ctx, func() bool { return e.stream == nil || e.pending == 0 })
}

// WaitAnswers waits until n answers have been received in all, or ctx
// ends (false).
func (e *Envoy) WaitAnswers(ctx context.Context, n int) bool {
	return e.waitFor(ctx, func() bool { return e.answers >= n })
}

// waitFor waits until done, called with e.mu held, reports true, or ctx
// ends (false); it looks again each time e changes.
func (e *Envoy) waitFor(ctx context.Context, done func() bool) bool {
	for {
		e.mu.Lock()
		ok, ch := done(), e.changed
		e.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// Stats are what the Envoy did: answers received, streams opened, reports
// dropped for want of a stream, the last stream error.
type Stats struct {
	Answers, Streams, Dropped int
	Open                      bool
	Err                       error
}

// Stats says what the Envoy did.
func (e *Envoy) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Answers: e.answers, Streams: e.streams, Dropped: e.dropped, Open: e.stream != nil, Err: e.lastErr}
}

// Assignment describes the assignment bucket is under now: "none" (not
// held), "default", "expired", "allow_all", "deny_all", or a token bucket
// "token_bucket max M, T per Ns (R/s), ttl Ds".
func (e *Envoy) Assignment(bucket map[string]string) string {
	now := e.o.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.buckets[bucketKey(&rlqsv3.BucketId{Bucket: bucket})]
	if b == nil {
		return "none"
	}
	e.expire(b, now)
	switch {
	case b.action != nil:
		return describeAction(b.action)
	case b.fallback:
		return "expired"
	}
	return "default"
}

// Buckets lists the bucket_ids the Envoy holds, as key=value,... sorted.
func (e *Envoy) Buckets() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, b := range e.buckets {
		out = append(out, describeID(b.id))
	}
	sort.Strings(out)
	return out
}

// describeAction renders a bucket action on one line.
func describeAction(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	if a.GetAbandonAction() != nil {
		return "abandon"
	}
	qa := a.GetQuotaAssignmentAction()
	ttl := fmt.Sprintf("ttl %ds", qa.GetAssignmentTimeToLive().GetSeconds())
	switch x := qa.GetRateLimitStrategy().GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return strings.ToLower(x.BlanketRule.String()) + ", " + ttl
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := x.TokenBucket
		secs := tb.GetFillInterval().GetSeconds()
		rate := math.Inf(1)
		if secs > 0 {
			rate = float64(tb.GetTokensPerFill().GetValue()) / float64(secs)
		}
		return fmt.Sprintf("token_bucket max %d, %d per %ds (%.4g/s), %s", tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), secs, rate, ttl)
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		return "requests_per_time_unit (Envoy drops it), " + ttl
	}
	return "no strategy (Envoy drops it), " + ttl
}

func describeID(id *rlqsv3.BucketId) string {
	var parts []string
	for _, e := range chainOf(id) {
		parts = append(parts, e.Key+"="+e.Value)
	}
	return strings.Join(parts, ",")
}

func isDenyAll(s *typev3.RateLimitStrategy) bool {
	return s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL && s.GetStrategy() != nil
}

// atomicTokenBucket is Envoy's AtomicTokenBucketImpl
// (source/common/common/token_bucket_impl.cc): made full, refilled
// continuously at its fill rate, never below kMinFillRate.
type atomicTokenBucket struct {
	max  float64
	rate float64
	t    time.Time // the time at which the bucket held no token
	// cfg is the assignment it was made from, compared as
	// protoTokenBucketsEq does.
	maxTokens, perFill uint32
	nanos              int32
}

// kMinFillRate is Envoy's least fill rate: a token a year.
const kMinFillRate = 1.0 / (365 * 24 * 60 * 60)

func newAtomicTokenBucket(tb *typev3.TokenBucket, now time.Time) *atomicTokenBucket {
	secs := tb.GetFillInterval().AsDuration().Truncate(time.Second).Seconds() // absl::ToInt64Seconds
	rate := float64(tb.GetTokensPerFill().GetValue()) / secs                  // x/0 is +Inf (or NaN for 0/0) in C++ doubles too
	if math.IsNaN(rate) {
		rate = 0
	}
	rate = math.Max(math.Abs(rate), kMinFillRate)
	b := &atomicTokenBucket{max: float64(tb.GetMaxTokens()), rate: rate, maxTokens: tb.GetMaxTokens(),
		perFill: tb.GetTokensPerFill().GetValue(), nanos: tb.GetFillInterval().GetNanos()}
	b.t = now.Add(-time.Duration(b.max / rate * float64(time.Second)))
	return b
}

// same is protoTokenBucketsEq: max_tokens, tokens_per_fill and
// fill_interval's nanos (not its seconds).
func (b *atomicTokenBucket) same(tb *typev3.TokenBucket) bool {
	return b.maxTokens == tb.GetMaxTokens() && b.perFill == tb.GetTokensPerFill().GetValue() && b.nanos == tb.GetFillInterval().GetNanos()
}

// consume takes one token if the bucket holds one.
func (b *atomicTokenBucket) consume(now time.Time) bool {
	if b.max < 1 {
		return false
	}
	if math.IsInf(b.rate, 1) {
		return true // a fill interval under a second: refilled at once, always
	}
	held := math.Min(b.max, now.Sub(b.t).Seconds()*b.rate)
	if held < 1 {
		return false
	}
	b.t = now.Add(-time.Duration((held - 1) / b.rate * float64(time.Second)))
	return true
}

// ClientArgs are what `floodgate check --rlqs` plays: one Envoy of Domain
// at Addr, holding Buckets (each "key=value[,key=value...]"), Requests
// requests in each of them before every report, Reports reports Interval
// apart (Envoy's 5 s by default; the first at once, as Envoy sends a new
// bucket's), each answer awaited within Timeout.
type ClientArgs struct {
	Addr, Domain      string
	Buckets           []string
	Requests, Reports int
	Interval, Timeout time.Duration
}

// Play plays one Envoy's rate_limit_quota filter and prints, after each
// report, the assignment of each bucket as Envoy holds it: "#N
// key=value,...: token_bucket max M, T per Ns (R/s), ttl Ds", and how many
// of its requests the assignment allowed.
func Play(ctx context.Context, a ClientArgs, stdout, stderr io.Writer) int {
	const command = "floodgate check --rlqs"
	if a.Domain == "" {
		fmt.Fprintln(stderr, command+": --domain is required")
		return 2
	}
	if len(a.Buckets) == 0 {
		fmt.Fprintln(stderr, command+": give at least one --bucket key=value[,key=value...]")
		return 2
	}
	var buckets []map[string]string
	for _, s := range a.Buckets {
		b := map[string]string{}
		for _, kv := range strings.Split(s, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				fmt.Fprintf(stderr, "%s: --bucket %q: want key=value[,key=value...]\n", command, s)
				return 2
			}
			b[k] = v
		}
		buckets = append(buckets, b)
	}
	if a.Reports < 1 || a.Requests < 1 || a.Interval <= 0 || a.Timeout <= 0 {
		fmt.Fprintln(stderr, command+": --reports and --count must be at least 1 (a bucket is made by its first request), --interval and --timeout above 0")
		return 2
	}
	conn, err := grpc.NewClient(a.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(stderr, command+":", err)
		return 1
	}
	defer conn.Close()
	e := NewEnvoy(conn, EnvoyOptions{Domain: a.Domain})
	defer e.Close()
	wait := func(n int) bool {
		wctx, cancel := context.WithTimeout(ctx, a.Timeout)
		defer cancel()
		return e.WaitAnswers(wctx, n)
	}
	answers := 0
	for i := 1; i <= a.Reports; i++ {
		allowed := make([]int, len(buckets))
		for j, b := range buckets {
			for range a.Requests {
				if e.Request(b) {
					allowed[j]++
				}
			}
		}
		if i == 1 {
			// Each new bucket's report went at once.
			answers += len(buckets)
		} else {
			select {
			case <-time.After(a.Interval):
			case <-ctx.Done():
				return 1
			}
			e.Report()
			answers++
		}
		if !wait(answers) {
			st := e.Stats()
			fmt.Fprintf(stderr, "#%d error: no answer within %s (%v)\n", i, a.Timeout, st.Err)
			return 1
		}
		for j, b := range buckets {
			fmt.Fprintf(stdout, "#%d %s: %s; allowed %d of %d\n", i, a.Buckets[j], e.Assignment(b), allowed[j], a.Requests)
		}
	}
	return 0
}
