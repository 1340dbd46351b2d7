package rlqs

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/floodgate/floodgate/internal/door/rlqs/allot"
	"github.com/floodgate/floodgate/internal/limited"
	"github.com/floodgate/floodgate/limiter"
)

var tenant1 = map[string]string{"tenant": "t1"}

// TestAnEnvoyAloneIsAssignedTheWholeLimit: its first request makes the
// bucket and its report goes at once; the answer is a token bucket of the
// whole limit, whole-second fill, a fifth of a second of it at once (the
// most an Envoy may burst: MaxBurst), a TTL of three report intervals.
func TestAnEnvoyAloneIsAssignedTheWholeLimit(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	e := r.envoy(EnvoyOptions{})
	if !e.Request(tenant1) {
		t.Fatal("the first request, before any assignment, was denied")
	}
	settle(t, e)
	if got, want := e.Assignment(tenant1), "token_bucket max 10, 100 per 1s (100/s), ttl 15s"; got != want {
		t.Errorf("assignment %q, want %q", got, want)
	}
	if n := r.metric("floodgate_rlqs_assignments_total", "strategy", "token_bucket"); n != 1 {
		t.Errorf("%v token buckets counted", n)
	}
}

// TestABucketNoLimitSelectsIsAllowedAll: ALLOW_ALL, with the TTL, and the
// metric says why; so is an unlimited limit. A limit of 0 is DENY_ALL.
func TestABucketNoLimitSelectsIsAllowedAll(t *testing.T) {
	l := perSecond("tenant=zero", 0)
	l.unlimited["tenant=free"] = true
	r := newRig(t, l, rigOptions{})
	e := r.envoy(EnvoyOptions{})
	for _, c := range []struct {
		tenant, want string
	}{{"t9", "allow_all, ttl 15s"}, {"free", "allow_all, ttl 15s"}, {"zero", "deny_all, ttl 15s"}} {
		b := map[string]string{"tenant": c.tenant}
		e.Request(b)
		settle(t, e)
		if got := e.Assignment(b); got != c.want {
			t.Errorf("tenant %s: %q, want %q", c.tenant, got, c.want)
		}
	}
	if r.metric("floodgate_rlqs_allow_all_total", "reason", "no_limit") != 1 || r.metric("floodgate_rlqs_allow_all_total", "reason", "unlimited") != 1 {
		t.Error("the ALLOW_ALL answers are not counted by reason")
	}
	if e.Request(map[string]string{"tenant": "zero"}) {
		t.Error("a request of a DENY_ALL bucket was allowed")
	}
}

// TestAnUnknownDomainIsAllowedAll: every bucket of a domain with no limits
// is ALLOW_ALL.
func TestAnUnknownDomainIsAllowedAll(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	e := r.envoy(EnvoyOptions{Domain: "other"})
	e.Request(tenant1)
	settle(t, e)
	if got := e.Assignment(tenant1); got != "allow_all, ttl 15s" {
		t.Errorf("%q", got)
	}
}

// TestMalformedReportsEndTheStreamSayingWhy: no domain on the first
// report, an empty bucket_id, another domain later on the same stream.
func TestMalformedReportsEndTheStreamSayingWhy(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	client := rlqsv3.NewRateLimitQuotaServiceClient(r.conn)
	usage := func(b map[string]string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: b}, NumRequestsAllowed: 1}
	}
	for _, c := range []struct {
		name    string
		reports []*rlqsv3.RateLimitQuotaUsageReports
		want    string
	}{
		{"no domain", []*rlqsv3.RateLimitQuotaUsageReports{{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(tenant1)}}},
			"the first report of a stream must name its domain"},
		{"empty bucket_id", []*rlqsv3.RateLimitQuotaUsageReports{{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(nil)}}},
			"bucket_quota_usages[0] has no bucket_id pairs"},
		{"another domain", []*rlqsv3.RateLimitQuotaUsageReports{
			{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(tenant1)}},
			{Domain: "other", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(tenant1)}}},
			`a report for domain "other" on a stream of domain "edge"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := client.StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range c.reports {
				s.Send(m)
			}
			for {
				_, err = s.Recv()
				if err != nil {
					break
				}
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want InvalidArgument with %q", err, c.want)
			}
		})
	}
	if r.metric("floodgate_rlqs_malformed_reports_total", "reason", "no_domain") != 1 {
		t.Error("no_domain not counted")
	}
}

// TestLaterReportsMayLeaveTheDomainOut: the proto says only the first
// report must carry it (Envoy sets it on every one).
func TestLaterReportsMayLeaveTheDomainOut(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	client := rlqsv3.NewRateLimitQuotaServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, _ := client.StreamRateLimitQuotas(ctx)
	u := []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: &rlqsv3.BucketId{Bucket: tenant1}, NumRequestsAllowed: 1}}
	s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: u})
	s.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: u})
	for i := range 2 {
		resp, err := s.Recv()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
			t.Errorf("answer %d: %v", i, resp)
		}
	}
}

// TestAReloadPushesNewAssignmentsAtOnce: a new limit reaches the Envoy
// without waiting for its next report; a limit that disappears abandons
// the bucket, which the Envoy erases and makes anew, ALLOW_ALL.
func TestAReloadPushesNewAssignmentsAtOnce(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	e := r.envoy(EnvoyOptions{})
	e.Request(tenant1)
	settle(t, e)
	answers := e.Stats().Answers
	r.board.Publish(perSecond("tenant=t1", 40))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !e.WaitAnswers(ctx, answers+1) {
		t.Fatal("no assignment pushed after the limit changed")
	}
	if got := e.Assignment(tenant1); got != "token_bucket max 4, 40 per 1s (40/s), ttl 15s" {
		t.Errorf("after the reload: %q", got)
	}
	r.board.Publish(perSecond())
	if !e.WaitAnswers(ctx, answers+2) {
		t.Fatal("no action pushed after the limit disappeared")
	}
	if got := e.Assignment(tenant1); got != "none" {
		t.Errorf("the bucket whose limit disappeared: %q, want it abandoned", got)
	}
	if r.metric("floodgate_rlqs_assignments_total", "strategy", "abandon") != 1 {
		t.Error("the abandon is not counted")
	}
	e.Request(tenant1)
	settle(t, e)
	if got := e.Assignment(tenant1); got != "allow_all, ttl 15s" {
		t.Errorf("the bucket made anew: %q", got)
	}
	// A reload that changes nothing sends nothing.
	n := e.Stats().Answers
	r.board.Publish(perSecond())
	time.Sleep(50 * time.Millisecond)
	if e.Stats().Answers != n {
		t.Error("a reload that changed no assignment sent one")
	}
}

// TestShadowLimitsAllowAndCount: a shadow-mode limit (or rls.shadow_mode)
// is ALLOW_ALL; what the share would have denied is counted.
func TestShadowLimitsAllowAndCount(t *testing.T) {
	l := perSecond("tenant=t1", 10)
	l.shadow["tenant=t1"] = true
	r := newRig(t, l, rigOptions{})
	e := r.envoy(EnvoyOptions{})
	e.Request(tenant1)
	settle(t, e)
	for range 3 {
		got := burst(r.clock, []*Envoy{e}, []int{100}, tenant1, 5*time.Second)
		if got[0] != 100 {
			t.Fatalf("a shadow limit denied: %d of 100 allowed", got[0])
		}
		e.Report()
		settle(t, e)
	}
	if got := e.Assignment(tenant1); got != "allow_all, ttl 15s" {
		t.Errorf("%q", got)
	}
	// 20 a second asked of 10 a second: about half would have been denied.
	would := r.metric("floodgate_rlqs_requests_total", "outcome", "shadow_denied")
	if would < 80 || would > 160 {
		t.Errorf("%v would-be denials of 200 over the limit, want about 100 (%v allowed)", would, r.metric("floodgate_rlqs_requests_total", "outcome", "shadow_allowed"))
	}
	if r.metric("floodgate_rlqs_allow_all_total", "reason", "shadow") < 1 {
		t.Error("the shadow ALLOW_ALL is not counted")
	}
}

// TestAssignmentsAreWholeSecondsAndAlwaysSetWhatEnvoyReads: every token
// bucket's fill interval is at least a second, tokens_per_fill set, and
// the TTL set in whole seconds (Envoy divides by the interval's whole
// seconds, reads tokens_per_fill().value() and the TTL's seconds alone).
func TestAssignmentsAreWholeSecondsAndAlwaysSetWhatEnvoyReads(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 3), rigOptions{})
	d := r.door
	for _, share := range []float64{0.001, 0.3, 0.97, 1, 1.4, 2.5, 3, 1000.3} {
		a := tokenBucket(&rlqsv3.BucketId{Bucket: tenant1}, allot.Bucket(share, 1, allot.TokenBucket{}, allot.Hysteresis), d.ttl())
		qa := a.GetQuotaAssignmentAction()
		tb := qa.GetRateLimitStrategy().GetTokenBucket()
		if tb.GetFillInterval().AsDuration() < time.Second || tb.GetFillInterval().GetNanos() != 0 || tb.GetTokensPerFill() == nil || tb.GetTokensPerFill().GetValue() == 0 {
			t.Errorf("share %v: %v", share, tb)
		}
		if qa.GetAssignmentTimeToLive() == nil || qa.GetAssignmentTimeToLive().GetNanos() != 0 || qa.GetAssignmentTimeToLive().GetSeconds() < 1 {
			t.Errorf("share %v: ttl %v", share, qa.GetAssignmentTimeToLive())
		}
		if qa.GetRateLimitStrategy().GetStrategy() == nil {
			t.Error("no strategy")
		}
	}
}

// TestTheQuotaBucketsAreReportedAsLimited: /debug/limited (and floodgate
// top, which reads it) lists a limit's buckets under rlqs:DOMAIN/LIMIT,
// each caller a bucket via the Envoy that reported it, with Envoy's
// counts; /debug/rlqs lists the bucket with its Envoy's demand and share.
func TestTheQuotaBucketsAreReportedAsLimited(t *testing.T) {
	clock := limiter.NewManualClock(epoch)
	o := limited.DefaultOptions()
	o.Now = clock.Now
	rec := limited.New(o)
	r := newRig(t, perSecond("tenant=t1", 10), rigOptions{recorder: rec, clock: clock})
	e := r.envoy(EnvoyOptions{})
	e.Request(tenant1)
	settle(t, e)
	burst(r.clock, []*Envoy{e}, []int{100}, tenant1, 5*time.Second)
	e.Report()
	settle(t, e)
	rep := rec.Snapshot(10)
	if len(rep.Policies) != 1 || rep.Policies[0].Name != "rlqs:edge/tenant=t1" || rep.Policies[0].Denied < 40 {
		t.Fatalf("/debug/limited: %+v", rep)
	}
	c := rep.Policies[0].Top[0]
	if c.Key != "tenant=t1" || !strings.HasPrefix(c.Caller, "- via 127.0.0.1:") || c.Denied < 40 || c.Allowed < 40 {
		t.Errorf("the caller: %+v", c)
	}
	rw := httptest.NewRecorder()
	r.door.Pages()["/debug/rlqs"].ServeHTTP(rw, httptest.NewRequest(http.MethodGet, "/debug/rlqs", nil))
	var page Page
	if err := json.Unmarshal(rw.Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Buckets) != 1 || page.Buckets[0].Limit != "tenant=t1" || len(page.Buckets[0].Envoys) != 1 ||
		page.Buckets[0].Envoys[0].Demand < 19 || page.Buckets[0].Envoys[0].Share != 10 {
		t.Errorf("/debug/rlqs: %s", rw.Body)
	}
	if got := r.metric("floodgate_rlqs_share", "limit", "tenant=t1"); got != 10 {
		t.Errorf("floodgate_rlqs_share %v", got)
	}
}
