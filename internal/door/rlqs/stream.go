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
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/door"
	"github.com/floodgate/floodgate/internal/door/rlqs/allot"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
)

// MaxBuckets bounds the buckets one stream may hold: past it a new bucket
// is answered ALLOW_ALL and not followed (counted, logged), so that one
// Envoy's bucket_id_builder keyed on a client's every value cannot grow
// the door without bound.
const MaxBuckets = 1 << 16

// errDraining ends the streams of a replica that stops.
var errDraining = status.Error(codes.Unavailable, "floodgate is shutting down: reopen the stream on another replica")

// stream is one Envoy's StreamRateLimitQuotas: its domain and its buckets.
// Its goroutine owns the buckets; the ledgers hold what other streams read.
type stream struct {
	d      *quotaDoor
	peer   string
	ctx    context.Context
	cancel context.CancelCauseFunc
	push   chan struct{}

	domain  string
	buckets map[string]*bucket
	// said: the stream has logged its domain's lack of limits.
	said bool

	// dirty are the buckets whose shares other streams' reports moved,
	// all set by a reload: what the next push reassesses.
	dmu   sync.Mutex
	dirty map[string]struct{}
	all   bool
}

// mark has the stream push key's share anew.
func (st *stream) mark(key string) {
	st.dmu.Lock()
	if st.dirty == nil {
		st.dirty = map[string]struct{}{}
	}
	st.dirty[key] = struct{}{}
	st.dmu.Unlock()
	st.d.poke(st)
}

// marked takes the buckets to reassess: all of them (nil, true), or those.
func (st *stream) marked() (map[string]struct{}, bool) {
	st.dmu.Lock()
	defer st.dmu.Unlock()
	d, all := st.dirty, st.all
	st.dirty, st.all = nil, false
	return d, all
}

// bucket is one of a stream's buckets.
type bucket struct {
	id      *rlqsv3.BucketId // as Envoy sent it, echoed in every answer
	key     string           // its pairs, sorted, as one string
	chain   []door.Entry
	quota   door.Quota
	version uint64 // the board's, when quota was selected
	ledger  *ledger
	last    time.Time // the last report's arrival
	demand  float64   // requests a second, -1 before it is known
	share   float64   // what it was last assigned, requests a second
	sent    sent
	limited bool // it was ever sent a limit (a token bucket, DENY_ALL)
	// given is what its token buckets gave it since its last report (NaN
	// when anything else ruled part of that time): their refill up to
	// givenAt, and each new bucket's max tokens.
	given   float64
	givenAt time.Time
}

// give accounts the bucket's assignments up to now, and then next (a new
// one, when changed: Envoy makes it full).
func (b *bucket) give(now time.Time, next sent, changed bool) {
	if b.sent.kind == "token_bucket" {
		b.given += b.sent.tb.Rate() * now.Sub(b.givenAt).Seconds()
	} else if now.After(b.givenAt) {
		b.given = math.NaN()
	}
	b.givenAt = now
	if changed && next.kind == "token_bucket" {
		b.given += float64(next.tb.MaxTokens)
	}
}

// taken is what the bucket's assignments gave it since its last report,
// up to now, and starts the next report's account.
func (b *bucket) taken(now time.Time) float64 {
	b.give(now, b.sent, false)
	g := b.given
	b.given = 0
	return g
}

// sent is the last action a bucket was sent.
type sent struct {
	kind string // "token_bucket", "allow_all", "deny_all", "" for none yet
	tb   allot.TokenBucket
}

// StreamRateLimitQuotas serves one Envoy: every report is answered with
// the assignment of each of its buckets; a reload or a push of the limits
// sends the assignments that changed at once.
func (d *quotaDoor) StreamRateLimitQuotas(ss grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil)
	st := &stream{d: d, ctx: ctx, cancel: cancel, push: make(chan struct{}, 1), buckets: map[string]*bucket{}, peer: "-"}
	if p, ok := peer.FromContext(ss.Context()); ok && p.Addr != nil {
		st.peer = p.Addr.String()
	}
	d.mu.Lock()
	if d.draining {
		d.mu.Unlock()
		return errDraining
	}
	d.streams[st] = struct{}{}
	d.mu.Unlock()
	d.metrics.streams.Inc()
	defer func() {
		d.mu.Lock()
		delete(d.streams, st)
		d.mu.Unlock()
		select {
		case <-st.push:
			d.queued.Add(-1)
		default:
		}
		d.metrics.streams.Dec()
		var ls []*ledger
		for _, b := range st.buckets {
			if b.ledger != nil {
				ls = append(ls, b.ledger)
			}
		}
		st.forget(ls)
	}()

	reports := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := ss.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case m := <-reports:
			resp, err := st.report(m)
			if err != nil {
				d.log.Warn("malformed quota report; the stream ends", zap.String("envoy", st.peer), zap.String("domain", st.domain), zap.Error(err))
				return err
			}
			if err := st.send(ss, resp); err != nil {
				return err
			}
		case <-st.push:
			err := st.send(ss, st.reassess())
			d.queued.Add(-1)
			if err != nil {
				return err
			}
		case err := <-errc:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
				return c
			}
			return ctx.Err()
		}
	}
}

func (st *stream) send(ss grpc.ServerStream, resp *rlqsv3.RateLimitQuotaResponse) error {
	if resp == nil || len(resp.GetBucketAction()) == 0 {
		return nil
	}
	if err := ss.SendMsg(resp); err != nil {
		return err
	}
	st.d.sent.Add(1)
	return nil
}

// malformed is the stream's end for a report Envoy would never send:
// InvalidArgument, saying what is wrong, counted by reason.
func (st *stream) malformed(reason, format string, args ...any) error {
	st.d.metrics.malformed.WithLabelValues(reason).Inc()
	return status.Errorf(codes.InvalidArgument, "floodgate rlqs: "+format, args...)
}

// report answers one report: each bucket's assignment.
func (st *stream) report(m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	d := st.d
	now := d.o.Clock.Now()
	d.metrics.reports.Inc()
	switch dom := m.GetDomain(); {
	case st.domain == "" && dom == "":
		return nil, st.malformed("no_domain", "the first report of a stream must name its domain (RateLimitQuotaUsageReports.domain): the rate limit domain whose limits the buckets meet")
	case st.domain == "":
		st.domain = dom
	case dom != "" && dom != st.domain:
		return nil, st.malformed("domain_changed", "a report for domain %q on a stream of domain %q: one stream serves one domain, open another for %q", dom, st.domain, dom)
	}
	usages := m.GetBucketQuotaUsages()
	for i, u := range usages {
		if len(u.GetBucketId().GetBucket()) == 0 {
			return nil, st.malformed("empty_bucket_id", "bucket_quota_usages[%d] has no bucket_id pairs: Envoy's bucket_id_builder makes at least one", i)
		}
	}
	src, version := d.board.Current()
	if src != nil && !src.HasDomain(st.domain) && !st.said {
		st.said = true
		d.log.Info("a quota stream's domain has no rate limits: its buckets are answered ALLOW_ALL", zap.String("envoy", st.peer), zap.String("domain", st.domain))
	}

	// Each bucket: its quota, its demand since its last report; the
	// limited ones' counts planned into one call to the store.
	type item struct {
		b               *bucket
		allowed, denied uint64
		elapsed         time.Duration
		tracked         bool
		prevShare       float64
	}
	items := make([]item, 0, len(usages))
	var reqs []limiter.Request
	var parts []part
	seen := map[string]bool{}
	for _, u := range usages {
		key := bucketKey(u.GetBucketId())
		if seen[key] {
			continue // the same bucket twice in one report: Envoy's cache holds each once
		}
		seen[key] = true
		it := item{allowed: u.GetNumRequestsAllowed(), denied: u.GetNumRequestsDenied()}
		b := st.buckets[key]
		if b == nil {
			if len(st.buckets) >= MaxBuckets {
				d.metrics.allowAll.WithLabelValues("too_many_buckets").Inc()
				d.log.Warn("a quota stream holds the most buckets it may: a new one is answered ALLOW_ALL and not followed", zap.String("envoy", st.peer),
					zap.String("domain", st.domain), zap.Int("max_buckets", MaxBuckets))
				it.b = &bucket{id: u.GetBucketId(), key: key, demand: -1}
				items = append(items, it)
				continue
			}
			b = &bucket{id: u.GetBucketId(), key: key, chain: chainOf(u.GetBucketId()), demand: -1}
			st.buckets[key] = b
			if te := u.GetTimeElapsed().AsDuration(); u.GetTimeElapsed() != nil && te > 0 {
				// A stream Envoy reopened: the counts since its last report.
				it.elapsed = te
			}
		} else {
			it.elapsed = now.Sub(b.last)
		}
		it.tracked = true
		b.last = now
		st.select_(b, src, version, now)
		it.b = b
		it.prevShare = b.share
		given := b.taken(now)
		rose := allot.Rose(b.demand, it.allowed, it.denied, it.elapsed, given)
		b.demand = allot.Recent(b.demand, it.allowed, it.denied, it.elapsed, given)
		if b.quota.Meets == door.Bucketed {
			// The fleet's registers hold the demand the share is divided
			// for: the other replicas divide by it.
			var p part
			reqs, p = b.ledger.plan(d.fleet, st, b.key, now, b.demand, rose, it.allowed, it.elapsed, reqs)
			parts = append(parts, p)
		}
		items = append(items, it)
	}
	if len(reqs) > 0 {
		res := make([]limiter.Result, len(reqs))
		ok := st.decide(reqs, res)
		for i := range parts {
			parts[i].absorb(d.fleet, now, res, ok)
		}
	}
	d.fleet.sweep(now)

	resp := &rlqsv3.RateLimitQuotaResponse{}
	for _, it := range items {
		b := it.b
		if !it.tracked {
			resp.BucketAction = append(resp.BucketAction, allowAll(b.id, d.ttl()))
			continue
		}
		st.count(b, it.allowed, it.denied, it.elapsed, it.prevShare, now)
		if a := st.assign(b, now, true); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	// The replica's other Envoys of these buckets take their part of the
	// move in demand now (a newcomer's share given up, a fall's taken
	// up), not at their next reports.
	for i := range parts {
		parts[i].l.pushOthers(st, now, d.o.Interval)
	}
	return resp, nil
}

// forget takes st out of the ledgers of, and its rates out of their
// registers, in one call to the store: the other replicas see it gone at
// their next look, not two epochs on.
func (st *stream) forget(of []*ledger) {
	d := st.d
	reqs, done := d.fleet.forget(st, of, d.o.Clock.Now(), nil)
	if len(reqs) == 0 {
		done(true)
		return
	}
	res := make([]limiter.Result, len(reqs))
	ctx, cancel := context.WithTimeout(context.Background(), d.o.StoreTimeout)
	defer cancel()
	_, err := d.store.Take(ctx, reqs, res)
	ok := err == nil
	for i := range res {
		ok = ok && !res[i].Degraded
	}
	if !ok {
		d.metrics.storeErrors.Inc()
	}
	done(ok)
}

// decide makes the report's one call to the store; false when it could not
// decide, or decided without the shared store (a degraded answer: the
// per-replica fallback's, which knows nothing of the fleet).
func (st *stream) decide(reqs []limiter.Request, res []limiter.Result) bool {
	d := st.d
	ctx, cancel := context.WithTimeout(st.ctx, d.o.StoreTimeout)
	defer cancel()
	_, err := d.store.Take(ctx, reqs, res)
	degraded := false
	for i := range res {
		degraded = degraded || res[i].Degraded
	}
	if err != nil || degraded {
		d.metrics.storeErrors.Inc()
		if err == nil {
			err = errors.New("the store answered without the shared store (degraded)")
		}
		d.log.Warn("the quota door could not count the fleet in the store: shares divide the last fleet it read", zap.String("envoy", st.peer),
			zap.String("domain", st.domain), zap.Error(err))
		return false
	}
	return true
}

// select_ selects b's quota from src when the board changed since, and its
// ledger for a bucketed one.
func (st *stream) select_(b *bucket, src door.QuotaSource, version uint64, now time.Time) {
	if b.version == version && version != 0 {
		if b.ledger != nil {
			b.ledger.mu.Lock()
			b.ledger.lastUsed = now
			b.ledger.mu.Unlock()
		}
		return
	}
	b.version = version
	q := door.Quota{}
	if src != nil {
		q = src.Quota(st.domain, b.chain)
	}
	if b.ledger != nil && (q.Meets != door.Bucketed || q.Bucket.Name != b.ledger.key.name || q.Bucket.ID != b.ledger.key.id) {
		st.forget([]*ledger{b.ledger})
		b.ledger = nil
	}
	b.quota = q
	if q.Meets == door.Bucketed && q.Bucket.Limit.Capacity > 0 {
		b.ledger = st.d.fleet.of(st.domain, q, now)
	} else if q.Meets == door.Bucketed {
		b.quota.Meets = door.NoQuota // a limit no bucket holds
	}
}

// count feeds one report's counts to the metrics and the report of who is
// limited: for a shadow limit, what the share it would have had would
// have denied (Envoy allowed them all).
func (st *stream) count(b *bucket, allowed, denied uint64, elapsed time.Duration, prevShare float64, now time.Time) {
	d := st.d
	q := b.quota
	if q.Meets == door.NoQuota {
		return
	}
	shadow := st.shadowed(q)
	if shadow && q.Meets == door.Bucketed && prevShare > 0 && elapsed > 0 {
		would := max(float64(allowed)-prevShare*elapsed.Seconds(), 0)
		denied = uint64(would)
		allowed -= min(allowed, denied)
	} else if shadow && q.Meets == door.Never {
		denied, allowed = allowed+denied, 0
	}
	d.metrics.count(st.domain, q.Name, shadow, allowed, denied)
	if t := d.tally("rlqs:"+st.domain+"/"+q.Name, shadow); t != nil {
		n := envoyName{key: q.Key, caller: q.Caller, envoy: st.peer}
		if r, ok := t.(interface {
			RecordN(time.Time, string, decide.Namer, int64, int64)
		}); ok {
			r.RecordN(now, q.Bucket.ID+"@"+st.peer, &n, int64(allowed), int64(denied))
			return
		}
		for range min(allowed, maxRecords) {
			t.Record(now, q.Bucket.ID+"@"+st.peer, &n, false)
		}
		for range min(denied, maxRecords) {
			t.Record(now, q.Bucket.ID+"@"+st.peer, &n, true)
		}
	}
}

// maxRecords bounds the decisions one report records one by one in a
// recorder that cannot take them at once.
const maxRecords = 1000

// envoyName labels a bucket of one Envoy in /debug/limited.
type envoyName struct{ key, caller, envoy string }

func (n *envoyName) Name() (key, caller string) { return n.key, n.caller + " via " + n.envoy }

func (st *stream) shadowed(q door.Quota) bool { return q.Shadow || st.d.shadow.Load() }

// assign is b's action now, or nil when it need not be sent (refresh
// false, and the same as last sent). A bucket whose limit disappeared is
// abandoned, once, and forgotten: Envoy erases it, and its next request
// makes it anew, answered ALLOW_ALL.
func (st *stream) assign(b *bucket, now time.Time, refresh bool) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	d := st.d
	q := b.quota
	ttl := d.ttl()
	var next sent
	var a *rlqsv3.RateLimitQuotaResponse_BucketAction
	switch {
	case (q.Meets == door.NoQuota || q.Meets == door.Unlimited) && b.limited:
		d.metrics.assignments.WithLabelValues("abandon").Inc()
		delete(st.buckets, b.key)
		if b.ledger != nil {
			st.forget([]*ledger{b.ledger})
		}
		return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
	case q.Meets == door.NoQuota || q.Meets == door.Unlimited || st.shadowed(q):
		next = sent{kind: "allow_all"}
		if refresh || next != b.sent {
			reason := "no_limit"
			switch {
			case q.Meets == door.Unlimited:
				reason = "unlimited"
			case q.Meets != door.NoQuota:
				reason = "shadow"
			}
			d.metrics.allowAll.WithLabelValues(reason).Inc()
		}
		a = allowAll(b.id, ttl)
		if q.Meets == door.Bucketed {
			b.share, _ = b.ledger.share(st, b.key, b.demand, allot.TokenBucket{}, 0, now, d.o.Interval)
		}
	case q.Meets == door.Never:
		next = sent{kind: "deny_all"}
		b.limited = true
		a = blanket(b.id, typev3.RateLimitStrategy_DENY_ALL, ttl)
	default:
		tolerance := allot.Hysteresis
		if !refresh {
			tolerance = PushShift // a push gives way only to a move worth the burst
		}
		share, tb := b.ledger.share(st, b.key, b.demand, b.sent.tb, tolerance, now, d.o.Interval)
		b.share = share
		b.limited = true
		next = sent{kind: "token_bucket", tb: tb}
		a = tokenBucket(b.id, tb, ttl)
	}
	if !refresh && next == b.sent {
		return nil
	}
	b.give(now, next, next != b.sent)
	b.sent = next
	d.metrics.assignments.WithLabelValues(next.kind).Inc()
	return a
}

// reassess is what the stream sends when the limits or the settings
// changed (every bucket), or other Envoys' reports moved the fleet (the
// buckets marked): the assignment of every bucket whose own changed, from
// what is known now (no report, no call to the store).
func (st *stream) reassess() *rlqsv3.RateLimitQuotaResponse {
	now := st.d.o.Clock.Now()
	src, version := st.d.board.Current()
	resp := &rlqsv3.RateLimitQuotaResponse{}
	dirty, all := st.marked()
	keys := make([]string, 0, len(st.buckets))
	for k := range st.buckets {
		if _, ok := dirty[k]; ok || all {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b := st.buckets[k]
		st.select_(b, src, version, now)
		if a := st.assign(b, now, false); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	return resp
}

func allowAll(id *rlqsv3.BucketId, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return blanket(id, typev3.RateLimitStrategy_ALLOW_ALL, ttl)
}

func blanket(id *rlqsv3.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return assignment(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, ttl)
}

func tokenBucket(id *rlqsv3.BucketId, tb allot.TokenBucket, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return assignment(id, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: tb.MaxTokens,
		// Always set: Envoy reads tokens_per_fill().value(), 0 when unset,
		// though the proto documents a default of 1.
		TokensPerFill: wrapperspb.UInt32(tb.TokensPerFill),
		FillInterval:  durationpb.New(time.Duration(tb.FillSeconds) * time.Second),
	}}}, ttl)
}

func assignment(id *rlqsv3.BucketId, s *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: id, BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			// Always set, in whole seconds: Envoy reads only its seconds,
			// and an unset TTL as 0, which expires at once
			// (startActionExpirationTimer), though the proto says unset
			// means no expiry.
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    s,
		}}}
}

// chainOf is a bucket_id's pairs sorted by key: the descriptor chain that
// selects its limit (shared/DESIGN.md).
func chainOf(id *rlqsv3.BucketId) []door.Entry {
	m := id.GetBucket()
	out := make([]door.Entry, 0, len(m))
	for k, v := range m {
		out = append(out, door.Entry{Key: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// bucketKey is a bucket_id as one string: its pairs sorted, each
// length-prefixed. Envoy matches answers by MessageUtil::hash(bucket_id),
// which the order of a map's pairs does not change (BucketId's own
// documentation: {a: A, b: B} and {b: B, a: A} are one bucket).
func bucketKey(id *rlqsv3.BucketId) string {
	var b strings.Builder
	for _, e := range chainOf(id) {
		fmt.Fprintf(&b, "%d:%s%d:%s", len(e.Key), e.Key, len(e.Value), e.Value)
	}
	return b.String()
}
