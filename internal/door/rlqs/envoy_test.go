package rlqs

import (
	"context"
	"math"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/limiter"
)

// What Envoy's rate_limit_quota filter does, read in its source
// (source/extensions/filters/http/rate_limit_quota/), pinned on the Envoy
// the tests play (client.go) against a scripted server, so that the door
// is tested against Envoy's behaviour and not against its own idea of it.

// scripted is a quota server that records reports and answers each with
// what answer returns.
type scripted struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	reports chan *rlqsv3.RateLimitQuotaUsageReports
	answer  func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse
	streams chan grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
}

func (s *scripted) StreamRateLimitQuotas(ss grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	select {
	case s.streams <- ss:
	default:
	}
	for {
		m, err := ss.Recv()
		if err != nil {
			return nil
		}
		s.reports <- m
		if s.answer != nil {
			if a := s.answer(m); a != nil {
				ss.Send(a)
			}
		}
	}
}

func scriptedEnvoy(t *testing.T, answer func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse, o EnvoyOptions) (*Envoy, *scripted, *limiter.ManualClock) {
	t.Helper()
	s := &scripted{reports: make(chan *rlqsv3.RateLimitQuotaUsageReports, 100), answer: answer, streams: make(chan grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse], 1)}
	r := &rig{t: t}
	r.srv = grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(r.srv, s)
	lis := listenLoopback(t)
	go r.srv.Serve(lis)
	t.Cleanup(r.srv.Stop)
	conn := dial(t, lis.Addr().String())
	clock := limiter.NewManualClock(epoch)
	if o.Domain == "" {
		o.Domain = "edge"
	}
	o.Clock = clock
	e := NewEnvoy(conn, o)
	t.Cleanup(e.Close)
	return e, s, clock
}

func next(t *testing.T, s *scripted) *rlqsv3.RateLimitQuotaUsageReports {
	t.Helper()
	select {
	case m := <-s.reports:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no report")
	}
	return nil
}

// tb is a token bucket action for bucket b.
func tbAction(b map[string]string, max, perFill uint32, fill, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return assignment(&rlqsv3.BucketId{Bucket: b}, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill)}}}, ttl)
}

func answerWith(as ...*rlqsv3.RateLimitQuotaResponse_BucketAction) func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
	return func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
		return &rlqsv3.RateLimitQuotaResponse{BucketAction: as}
	}
}

// global_client_impl.cc, createBucketImpl: the first request of a bucket
// opens the stream and sends that bucket's report at once, counting the
// request, time_elapsed 0, the domain set.
func TestEnvoySendsANewBucketsReportAtOnceCountingOne(t *testing.T) {
	e, s, _ := scriptedEnvoy(t, nil, EnvoyOptions{})
	if !e.Request(tenant1) {
		t.Fatal("the first request was denied (no_assignment_behavior unset: allow)")
	}
	m := next(t, s)
	u := m.GetBucketQuotaUsages()
	if m.GetDomain() != "edge" || len(u) != 1 || u[0].GetNumRequestsAllowed() != 1 || u[0].GetNumRequestsDenied() != 0 ||
		u[0].GetTimeElapsed().AsDuration() != 0 || u[0].GetBucketId().GetBucket()["tenant"] != "t1" {
		t.Errorf("the first report: %v", m)
	}
}

// filter.cc, noAssignmentBehaviorShouldAllow: only a blanket DENY_ALL
// no_assignment_behavior denies a bucket's first request (counted denied).
func TestEnvoyDeniesTheFirstRequestOnlyUnderDenyAll(t *testing.T) {
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	e, s, _ := scriptedEnvoy(t, nil, EnvoyOptions{NoAssignment: deny})
	if e.Request(tenant1) {
		t.Error("the first request was allowed under a DENY_ALL no_assignment_behavior")
	}
	if u := next(t, s).GetBucketQuotaUsages()[0]; u.GetNumRequestsDenied() != 1 || u.GetNumRequestsAllowed() != 0 {
		t.Errorf("%v", u)
	}
}

// global_client_impl.cc, getUsageFromBucket and buildReports: every report
// holds every bucket, its counters zeroed after, time_elapsed the whole
// seconds since its last report (truncated), the domain on every one.
func TestEnvoyReportsEveryBucketInWholeSeconds(t *testing.T) {
	e, s, clock := scriptedEnvoy(t, nil, EnvoyOptions{})
	e.Request(tenant1)
	next(t, s)
	clock.Advance(2 * time.Second)
	e.Request(map[string]string{"tenant": "t2"})
	next(t, s)
	e.Request(tenant1)
	e.Request(tenant1)
	clock.Advance(2999 * time.Millisecond)
	e.Report()
	m := next(t, s)
	if m.GetDomain() != "edge" || len(m.GetBucketQuotaUsages()) != 2 {
		t.Fatalf("%v", m)
	}
	for _, u := range m.GetBucketQuotaUsages() {
		want := map[string][2]int64{"t1": {2, 4}, "t2": {0, 2}}[u.GetBucketId().GetBucket()["tenant"]]
		if int64(u.GetNumRequestsAllowed()) != want[0] || u.GetTimeElapsed().GetSeconds() != want[1] || u.GetTimeElapsed().GetNanos() != 0 {
			t.Errorf("%v, want %d allowed over %d s", u, want[0], want[1])
		}
	}
	e.Report()
	for _, u := range next(t, s).GetBucketQuotaUsages() {
		if u.GetNumRequestsAllowed() != 0 || u.GetTimeElapsed().GetSeconds() != 0 {
			t.Errorf("the next report: %v, want its counters zeroed", u)
		}
	}
}

// global_client_impl.cc, onQuotaResponseImpl: answers are matched to
// buckets by bucket_id (the map's order does not matter: MessageUtil::hash
// of the BucketId); an unknown one, or one with no id, is dropped.
func TestEnvoyMatchesAnswersByBucketID(t *testing.T) {
	two := map[string]string{"a": "1", "b": "2"}
	e, s, _ := scriptedEnvoy(t, answerWith(
		tbAction(map[string]string{"tenant": "unknown"}, 1, 1, time.Second, 10*time.Second),
		tbAction(nil, 1, 1, time.Second, 10*time.Second),
		tbAction(map[string]string{"b": "2", "a": "1"}, 7, 3, time.Second, 10*time.Second)), EnvoyOptions{})
	e.Request(two)
	next(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.WaitAnswers(ctx, 1)
	if got := e.Assignment(two); got != "token_bucket max 7, 3 per 1s (3/s), ttl 10s" {
		t.Errorf("%q", got)
	}
	if got := e.Buckets(); len(got) != 1 {
		t.Errorf("an answer for an unknown bucket made one: %v", got)
	}
}

// global_client_impl.cc, protoTokenBucketsEq and shouldReplaceTokenBucket:
// a token bucket the same in max_tokens, tokens_per_fill and
// fill_interval's nanos is kept, tokens and all (an interval differing in
// its seconds alone counts as the same); any other is made anew, full.
func TestEnvoyKeepsATokenBucketComparedWithoutItsIntervalsSeconds(t *testing.T) {
	var next_ *rlqsv3.RateLimitQuotaResponse_BucketAction
	e, s, _ := scriptedEnvoy(t, func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
		return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{next_}}
	}, EnvoyOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	next_ = tbAction(tenant1, 2, 1, 3600*time.Second, 60*time.Second)
	e.Request(tenant1)
	next(t, s)
	e.WaitAnswers(ctx, 1)
	e.Request(tenant1)
	e.Request(tenant1) // the bucket's two tokens spent
	if e.Request(tenant1) {
		t.Fatal("a third request passed a bucket of 2")
	}
	next_ = tbAction(tenant1, 2, 1, time.Second, 60*time.Second) // 1 a second, but the same nanos
	e.Report()
	next(t, s)
	e.WaitAnswers(ctx, 2)
	if e.Request(tenant1) {
		t.Error("an assignment differing in fill_interval's seconds alone made a new, full bucket; Envoy keeps the old one")
	}
	next_ = tbAction(tenant1, 3, 1, time.Second, 60*time.Second)
	e.Report()
	next(t, s)
	e.WaitAnswers(ctx, 3)
	for i := range 3 {
		if !e.Request(tenant1) {
			t.Errorf("request %d of a new bucket of 3, made full, was denied", i)
		}
	}
}

// global_client_impl.cc, createTokenBucketFromAction: the fill rate is
// tokens_per_fill / absl::ToInt64Seconds(fill_interval), so an interval
// under a second divides by zero: an infinite rate, no limit at all; and
// tokens_per_fill is read as its value, 0 when unset, not the documented
// default of 1. The door never sends either (TestAssignmentsAreWhole...).
func TestEnvoyDividesByTheIntervalsWholeSeconds(t *testing.T) {
	sub := newAtomicTokenBucket(&typev3.TokenBucket{MaxTokens: 5, TokensPerFill: wrapperspb.UInt32(1), FillInterval: durationpb.New(500 * time.Millisecond)}, epoch)
	if !math.IsInf(sub.rate, 1) {
		t.Errorf("a 500 ms interval: rate %v, want +Inf", sub.rate)
	}
	for i := range 1000 {
		if !sub.consume(epoch) {
			t.Fatalf("request %d at one instant denied by a bucket of a sub-second interval", i)
		}
	}
	unset := newAtomicTokenBucket(&typev3.TokenBucket{MaxTokens: 1, FillInterval: durationpb.New(time.Second)}, epoch)
	if unset.rate != kMinFillRate {
		t.Errorf("tokens_per_fill unset: rate %v, want Envoy's least (a token a year)", unset.rate)
	}
}

// global_client_impl.cc, onQuotaResponseImpl: requests_per_time_unit is
// logged "not yet supported" and dropped, as is an assignment with no
// strategy (the proto says it allows all); abandon_action erases the
// bucket, whose next request makes it anew with a report at once.
func TestEnvoyDropsWhatItCannotEnforceAndErasesWhatIsAbandoned(t *testing.T) {
	var answer *rlqsv3.RateLimitQuotaResponse_BucketAction
	e, s, _ := scriptedEnvoy(t, func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
		return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{answer}}
	}, EnvoyOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	answer = assignment(&rlqsv3.BucketId{Bucket: tenant1}, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 1, TimeUnit: typev3.RateLimitUnit_SECOND}}}, time.Minute)
	e.Request(tenant1)
	next(t, s)
	e.WaitAnswers(ctx, 1)
	if got := e.Assignment(tenant1); got != "default" {
		t.Errorf("after requests_per_time_unit: %q, want the default still", got)
	}
	answer = assignment(&rlqsv3.BucketId{Bucket: tenant1}, nil, time.Minute)
	e.Report()
	next(t, s)
	e.WaitAnswers(ctx, 2)
	if got := e.Assignment(tenant1); got != "default" {
		t.Errorf("after an assignment with no strategy: %q, want the default still", got)
	}
	answer = &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: tenant1},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}
	e.Report()
	next(t, s)
	e.WaitAnswers(ctx, 3)
	if got := e.Assignment(tenant1); got != "none" {
		t.Errorf("after abandon_action: %q, want the bucket erased", got)
	}
	e.Request(tenant1)
	if u := next(t, s).GetBucketQuotaUsages(); len(u) != 1 || u[0].GetNumRequestsAllowed() != 1 {
		t.Errorf("the abandoned bucket's next request: %v, want a report at once counting 1", u)
	}
}

// global_client_impl.cc, startActionExpirationTimer,
// onActionExpirationTimer, onFallbackExpirationTimer: only the TTL's
// seconds count, an unset TTL expires at once (the proto says never); an
// expired assignment goes to expired_assignment_behavior for its timeout,
// then to no_assignment_behavior.
func TestEnvoyExpiresByTheTTLsSecondsThenFallsBack(t *testing.T) {
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	var answer *rlqsv3.RateLimitQuotaResponse_BucketAction
	e, s, clock := scriptedEnvoy(t, func(*rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
		return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{answer}}
	}, EnvoyOptions{Expired: deny, ExpiredTimeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	answer = tbAction(tenant1, 100, 100, time.Second, 2900*time.Millisecond) // 2 s
	e.Request(tenant1)
	next(t, s)
	e.WaitAnswers(ctx, 1)
	clock.Advance(1999 * time.Millisecond)
	if !e.Request(tenant1) {
		t.Error("denied before the TTL's 2 s")
	}
	clock.Advance(time.Millisecond)
	if e.Request(tenant1) || e.Assignment(tenant1) != "expired" {
		t.Errorf("at 2 s: %q, want the expired_assignment_behavior (DENY_ALL)", e.Assignment(tenant1))
	}
	clock.Advance(10 * time.Second)
	if !e.Request(tenant1) || e.Assignment(tenant1) != "default" {
		t.Errorf("after the fallback's 10 s: %q, want the no_assignment_behavior", e.Assignment(tenant1))
	}
	answer = tbAction(tenant1, 100, 100, time.Second, 0)
	answer.GetQuotaAssignmentAction().AssignmentTimeToLive = nil
	e.Report()
	next(t, s)
	e.WaitAnswers(ctx, 2)
	if got := e.Assignment(tenant1); got != "expired" {
		t.Errorf("an assignment with no TTL: %q, want it expired at once", got)
	}
}
