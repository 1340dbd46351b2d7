package adminapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/adminapi"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/calendar"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/resilient"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// quotaPolicies adds a monthly quota to the policies above.
const quotaPolicies = policies + `
  - name: monthly
    match: {path_prefix: /v1/}
    key: [header:x-api-key]
    quota: {limit: 2, period: month, timezone: Europe/Berlin, anchor_day: 15}
`

// driftPolicies adds an hourly quota to the policies above, for the
// tests comparing explain with the doors: its windows end within them.
const driftPolicies = policies + `
  - name: hourly
    match: {path_prefix: /v1/}
    key: [header:x-api-key]
    quota: {limit: 6, period: hour}
`

// TestAnOperatorGivesAQuotaCallerMoreThisMonth: a caller denied by a
// monthly quota on a real Redis; the admin API reads the quota's window
// (not a token bucket's key), an add of 500 gives 500 more requests this
// month whatever the limit, and the next Check passes.
func TestAnOperatorGivesAQuotaCallerMoreThisMonth(t *testing.T) {
	srv := redistest.Start(t)
	rc, _ := redisstore.Dial(redisstore.Options{Addresses: []string{srv.Addr}, Timeout: 50 * time.Millisecond, DialTimeout: 250 * time.Millisecond})
	defer rc.Close()
	rs, err := resilient.New(redisstore.New(rc, ""), resilient.Options{Timeout: 50 * time.Millisecond, OverLimitEntries: 100,
		Breaker: resilient.BreakerOptions{Failures: 5, OpenFor: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, rs, quotaPolicies, false)
	// keys allows 3 (a token bucket); monthly allows 2.
	req := checkReq(t, "/v1/a", "10.0.0.1", "x-api-key: k_live_9")
	if got := decisions(t, f.check, req, 3); got != "allow allow deny" {
		t.Fatalf("three requests on a monthly quota of 2: %s", got)
	}
	loc, _ := time.LoadLocation("Europe/Berlin")
	cal, _ := calendar.New(calendar.Month, loc, 15)
	start, end := cal.Window(time.Now())
	ctx := context.Background()
	got, err := f.client.Bucket(ctx, "monthly", "", "k_live_9", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	q := got.Quota
	if q == nil || got.Remaining != 0 || got.Limit != 2 || got.Debt != 0 || got.Scope != "shared" ||
		q.Period != "month" || q.Timezone != "Europe/Berlin" ||
		q.Start != start.In(loc).Format(time.RFC3339) || q.End != end.In(loc).Format(time.RFC3339) {
		t.Fatalf("read: %+v (quota %+v), want 0 of 2 left in the month %v to %v", got, q, start.In(loc), end.In(loc))
	}
	if left := time.Until(end); got.Reset < int64(left/time.Second)-2 || got.Reset > int64(left/time.Second)+1 {
		t.Errorf("reset %ds, want about %v", got.Reset, left)
	}
	if n, err := srv.Client().Exists(ctx, "monthly:quota:{"+got.Identity+"}", "monthly:{"+got.Identity+"}").Result(); n != 1 || err != nil {
		t.Fatalf("keys held: %d, %v; want the quota's only", n, err)
	}
	n := int64(500)
	if got, err = f.client.Bucket(ctx, "monthly", "", "k_live_9", "", &adminapi.Change{Add: &n}); err != nil || got.Remaining != 500 || got.Quota == nil || got.Op != "add" {
		t.Fatalf("add 500: %+v, %v", got, err)
	}
	if logged := f.logs.FilterMessage("admin API: bucket adjusted").All(); len(logged) != 1 || logged[0].ContextMap()["window_end"] != q.End {
		t.Errorf("logged %v, want the window's end %s", logged, q.End)
	}
	// keys has no tokens left of its 3: reset it, so that the quota decides.
	if _, err := f.client.Bucket(ctx, "keys", "", "k_live_9", "", &adminapi.Change{Reset: true}); err != nil {
		t.Fatal(err)
	}
	if !allowed(t, f.check, req) {
		t.Fatal("the request after the add was denied")
	}
	if got, _ = f.client.Bucket(ctx, "monthly", "", "k_live_9", "", nil); got.Remaining != 499 {
		t.Fatalf("after one request: %+v, want 499 left", got)
	}
	// Named by its identity, as explain prints it: the same window.
	if byID, err := f.client.Bucket(ctx, "monthly", "", "", got.Identity, nil); err != nil || byID.Remaining != 499 || byID.Quota == nil || byID.Quota.End != q.End {
		t.Fatalf("by identity: %+v, %v", byID, err)
	}
	if got, err = f.client.Bucket(ctx, "monthly", "", "k_live_9", "", &adminapi.Change{Reset: true}); err != nil || got.Remaining != 2 {
		t.Fatalf("reset: %+v, %v", got, err)
	}
	// A set's bounds are the quota's: a debt of at most the limit.
	if code, body := f.call(t, "POST", "/v1/buckets/monthly?key=k_live_9", aliceToken, `{"set": -3}`); code != http.StatusBadRequest || !strings.Contains(body, "outside [-2, ") {
		t.Errorf("set -3: %d %s", code, body)
	}
}

// TestExplainSaysAQuotasWindowAndThatItDenies: explain reads a quota's
// count in the window the store's clock is in (the memory store's: this
// replica's count), says it denies until the window's end, and after an
// add that it pays.
func TestExplainSaysAQuotasWindowAndThatItDenies(t *testing.T) {
	clock := limiter.NewManualClock(time.Date(2028, 2, 20, 11, 0, 0, 0, time.UTC))
	f := newFixture(t, storetest.Memory(clock), quotaPolicies, false)
	req := checkReq(t, "/v1/a", "10.0.0.1", "x-api-key: k_live_9")
	if got := decisions(t, f.check, req, 3); got != "allow allow deny" {
		t.Fatalf("three requests on a monthly quota of 2: %s", got)
	}
	clock.Advance(time.Hour) // 12:00 UTC, 13:00 in Berlin: 23 days and 11 hours to the 15th's midnight
	ask := adminapi.ExplainRequest{Path: "/v1/a", Source: "10.0.0.1", Headers: []string{"x-api-key: k_live_9"}}
	e, err := f.client.Explain(context.Background(), ask)
	if err != nil {
		t.Fatal(err)
	}
	var p *adminapi.PolicyExplained
	for i := range e.Policies {
		if e.Policies[i].Policy == "monthly" {
			p = &e.Policies[i]
		}
	}
	left := int64((23*24 + 11) * 3600)
	if e.Decision != "deny" || !contains(e.DeniedBy, "monthly") || p == nil || p.Verdict != "denies" || p.RetryAfter != left ||
		p.Bucket == nil || p.Bucket.Quota == nil || p.Bucket.Remaining != 0 || p.Bucket.Limit != 2 || p.Bucket.Reset != left || p.Bucket.Scope != "replica" ||
		p.Bucket.Quota.End != "2028-03-15T00:00:00+01:00" || p.Bucket.Quota.Start != "2028-02-15T00:00:00+01:00" {
		t.Fatalf("explain: %+v, monthly %+v\n%s", e, p, e.Text())
	}
	if !strings.Contains(e.Text(), "monthly (enforce): key header:x-api-key, identity "+p.Identity+", cost 1: quota: 0 of 2 left this month, window 2028-02-15T00:00:00+01:00 to 2028-03-15T00:00:00+01:00 (Europe/Berlin), ends in 2026800s: denies, retry after 2026800s") {
		t.Errorf("explain's text:\n%s", e.Text())
	}
	n := int64(1)
	if _, err := f.client.Bucket(context.Background(), "monthly", "", "k_live_9", "", &adminapi.Change{Add: &n}); err != nil {
		t.Fatal(err)
	}
	if e, err = f.client.Explain(context.Background(), ask); err != nil || e.Decision != "allow" {
		t.Fatalf("after add 1: %+v, %v\n%s", e, err, e.Text())
	}
	if !allowed(t, f.check, req) || allowed(t, f.check, req) {
		t.Fatal("the one request added did not pay exactly one Check")
	}
}
