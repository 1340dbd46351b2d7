package extauthz

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
	"github.com/floodgate/floodgate/limiter/storetest"
)

var berlinPlan = PolicySpec{Name: "plan", Key: []string{"header:x-api-key"},
	Quota: &QuotaSpec{Limit: 3, Period: "month", Timezone: "Europe/Berlin", AnchorDay: 15}}

func berlin(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func seconds(from, to time.Time) string {
	return strconv.FormatInt(int64(to.Sub(from)/time.Second), 10)
}

// TestAMonthlyQuotaDeniesUntilThe15thAtMidnightInBerlin is the product's
// worked example through Check: 3 requests a month from the 15th in
// Berlin; the 4th is denied with a Retry-After that lands on the 15th at
// midnight Berlin time, across a leap day, and the next window (which a
// change to summer time shortens by an hour) starts fresh.
func TestAMonthlyQuotaDeniesUntilThe15thAtMidnightInBerlin(t *testing.T) {
	now := berlin(t, "2028-02-20T12:00:00+01:00")
	clock := limiter.NewManualClock(now)
	r := newRig(t, []PolicySpec{berlinPlan}, Options{}, storetest.Memory(clock), ServerOptions{})
	req := fixture(t, "checkrequest-get-apikey.json")
	end := berlin(t, "2028-03-15T00:00:00+01:00")
	for n := 1; n <= 3; n++ {
		resp := r.check(t, req)
		if !allowed(resp) {
			t.Fatalf("request %d denied", n)
		}
		left := strconv.Itoa(3 - n)
		want := map[string]string{
			HeaderLimit: "3", HeaderRemaining: left, HeaderReset: seconds(now, end),
			HeaderPolicy:    `"plan";q=3;w=` + strconv.Itoa(29*24*3600), // the 15th of February to the 15th of March of a leap year
			HeaderRateLimit: `"plan";r=` + left + ";t=" + seconds(now, end),
		}
		for k, v := range want {
			if got := headerOf(resp, k); got != v {
				t.Errorf("request %d: %s = %q, want %q", n, k, got, v)
			}
		}
	}
	for _, at := range []string{"2028-02-20T12:00:00+01:00", "2028-02-29T23:59:59+01:00", "2028-03-14T23:59:59+01:00"} {
		clock.Advance(berlin(t, at).Sub(clock.Now()))
		resp := r.check(t, req)
		if allowed(resp) || resp.GetDeniedResponse().GetStatus().GetCode() != 429 {
			t.Fatalf("at %s: the 4th request of the window passed", at)
		}
		wait := seconds(clock.Now(), end)
		if got := headerOf(resp, HeaderRetryAfter); got != wait {
			t.Errorf("at %s: retry-after %s, want %s (to %v)", at, got, wait, end)
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &body); err != nil || body["policy"] != "plan" || strconv.FormatFloat(body["retry_after"].(float64), 'f', -1, 64) != wait {
			t.Errorf("at %s: body %s", at, resp.GetDeniedResponse().GetBody())
		}
	}
	clock.Advance(end.Sub(clock.Now()))
	resp := r.check(t, req)
	next := berlin(t, "2028-04-15T00:00:00+02:00")
	if !allowed(resp) || headerOf(resp, HeaderRemaining) != "2" || headerOf(resp, HeaderReset) != seconds(end, next) {
		t.Fatalf("at the 15th's midnight: allowed %v, remaining %s, reset %s; want a fresh window to %v", allowed(resp), headerOf(resp, HeaderRemaining), headerOf(resp, HeaderReset), next)
	}
	if got, want := headerOf(resp, HeaderPolicy), `"plan";q=3;w=`+strconv.Itoa(31*24*3600-3600); got != want {
		t.Errorf("policy %s, want %s (31 days less the hour summer time takes)", got, want)
	}
}

// TestAQuotaAndABucketDecideTogether: a request under a quota and a token
// bucket is denied by the spent quota and takes nothing from the bucket;
// the structured header names both, each with its own window.
func TestAQuotaAndABucketDecideTogether(t *testing.T) {
	clock := limiter.NewManualClock(berlin(t, "2028-06-01T10:00:00Z"))
	daily := PolicySpec{Name: "daily", Key: []string{"client_ip"}, Quota: &QuotaSpec{Limit: 1, Period: "day"}}
	burst := PolicySpec{Name: "burst", Key: []string{"client_ip"}, Capacity: 10, RefillPerSecond: "1/60"}
	r := newRig(t, []PolicySpec{daily, burst}, Options{}, storetest.Memory(clock), ServerOptions{})
	req := checkRequest("198.51.100.7", nil)
	if resp := r.check(t, req); !allowed(resp) || headerOf(resp, HeaderRateLimit) != `"daily";r=0;t=50400, "burst";r=9;t=60` {
		t.Fatalf("first: allowed %v, ratelimit %q", allowed(resp), headerOf(resp, HeaderRateLimit))
	}
	resp := r.check(t, req)
	if allowed(resp) {
		t.Fatal("the second request of the day passed")
	}
	if got := headerOf(resp, HeaderPolicy); got != `"daily";q=1;w=86400, "burst";q=10;w=600` {
		t.Errorf("policy %s", got)
	}
	if got := headerOf(resp, HeaderRateLimit); got != `"daily";r=0;t=50400, "burst";r=9;t=60` {
		t.Errorf("ratelimit %s: the denied request took from the bucket", got)
	}
	if got := headerOf(resp, HeaderRetryAfter); got != "50400" {
		t.Errorf("retry-after %s, want 50400 (to UTC midnight)", got)
	}
}

func TestQuotaSettingsAreChecked(t *testing.T) {
	quota := func(q QuotaSpec) PolicySpec {
		return PolicySpec{Name: "p", Key: []string{"client_ip"}, Quota: &q}
	}
	cases := []struct {
		name string
		spec PolicySpec
		path string
		says string
	}{
		{"a limit of 0", quota(QuotaSpec{Limit: 0, Period: "day"}), "policies[0].quota.limit", "from 1"},
		{"no period", quota(QuotaSpec{Limit: 5}), "policies[0].quota.period", "is required"},
		{"an unknown period", quota(QuotaSpec{Limit: 5, Period: "fortnight"}), "policies[0].quota.period", "hour, day, week, month or year"},
		{"an unknown time zone", quota(QuotaSpec{Limit: 5, Period: "day", Timezone: "Mars/Olympus"}), "policies[0].quota.timezone", "IANA"},
		{"the replica's local zone", quota(QuotaSpec{Limit: 5, Period: "day", Timezone: "Local"}), "policies[0].quota.timezone", "IANA"},
		{"an anchor for a day", quota(QuotaSpec{Limit: 5, Period: "day", AnchorDay: 2}), "policies[0].quota.anchor_day", "a day has no anchor day"},
		{"a weekday of 8", quota(QuotaSpec{Limit: 5, Period: "week", AnchorDay: 8}), "policies[0].quota.anchor_day", "1 = Monday"},
		{"a day of the month of 32", quota(QuotaSpec{Limit: 5, Period: "month", AnchorDay: 32}), "policies[0].quota.anchor_day", "1 to 31"},
		{"a capacity beside a quota", func() PolicySpec { s := quota(QuotaSpec{Limit: 5, Period: "day"}); s.Capacity = 5; return s }(), "policies[0].capacity", "no capacity"},
		{"a refill beside a quota", func() PolicySpec { s := quota(QuotaSpec{Limit: 5, Period: "day"}); s.RefillPerSecond = "1"; return s }(), "policies[0].refill_per_second", "no refill"},
		{"a leased quota", func() PolicySpec { s := quota(QuotaSpec{Limit: 5, Period: "day"}); s.Lease = "auto"; return s }(), "policies[0].lease", "cannot be leased"},
		{"a cost above the quota", func() PolicySpec { s := quota(QuotaSpec{Limit: 5, Period: "day"}); s.Cost = 6; return s }(), "policies[0].cost", "exceeds"},
	}
	for _, c := range cases {
		_, err := Compile([]PolicySpec{c.spec}, Options{})
		if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %s: ...%s...", c.name, err, c.path, c.says)
		}
	}
	if _, err := Compile([]PolicySpec{quota(QuotaSpec{Limit: 1 << 48, Period: "year", Timezone: "Pacific/Apia", AnchorDay: 31})}, Options{}); err != nil {
		t.Errorf("the largest quota: %v", err)
	}
}

// TestTheHTTPDoorAnswersAQuotaAsCheckDoes: the worked example's quota over
// the http_service protocol, its 429 carrying the Retry-After to the 15th
// at midnight in Berlin.
func TestTheHTTPDoorAnswersAQuotaAsCheckDoes(t *testing.T) {
	clock := limiter.NewManualClock(berlin(t, "2028-03-14T23:00:00+01:00"))
	r := newHTTPRig(t, []PolicySpec{berlinPlan}, Options{}, 0, ServerOptions{}, HTTPOptions{}, storetest.Memory(clock))
	for n := 1; n <= 3; n++ {
		if a := r.ask(t, "GET", "/v1/things", "api.example.com", "x-api-key", "k1"); a.status != 200 || a.header.Get("RateLimit-Reset") != "3600" {
			t.Fatalf("request %d: %d, reset %q", n, a.status, a.header.Get("RateLimit-Reset"))
		}
	}
	a := r.ask(t, "GET", "/v1/things", "api.example.com", "x-api-key", "k1")
	if a.status != 429 || a.header.Get("Retry-After") != "3600" || a.header.Get("RateLimit-Policy") != `"plan";q=3;w=2505600` {
		t.Fatalf("4th: %d, retry-after %q, policy %q; want 429, 3600 (midnight in Berlin), w of 29 days", a.status, a.header.Get("Retry-After"), a.header.Get("RateLimit-Policy"))
	}
	clock.Advance(time.Hour)
	if a := r.ask(t, "GET", "/v1/things", "api.example.com", "x-api-key", "k1"); a.status != 200 || a.header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("at midnight: %d, remaining %q", a.status, a.header.Get("RateLimit-Remaining"))
	}
}

// TestAQuotaInRedisFollowsRedisClock: the worked example through Check on
// a real redis-server whose clock (libfaketime) reads the 29th of February
// 2028 in Berlin while this process reads today: the window and the
// Retry-After are Redis' clock's, landing on the 15th of March at midnight.
func TestAQuotaInRedisFollowsRedisClock(t *testing.T) {
	clock := redistest.NewFakeClock(t)
	srv := redistest.StartWith(t, redistest.Config{FakeClock: clock})
	now := berlin(t, "2028-02-29T12:00:00+01:00")
	clock.Set(t, now)
	r := newRig(t, []PolicySpec{berlinPlan}, Options{}, redisstore.New(srv.Client(), "fg:"), ServerOptions{})
	req := fixture(t, "checkrequest-get-apikey.json")
	for n := 1; n <= 3; n++ {
		if resp := r.check(t, req); !allowed(resp) {
			t.Fatalf("request %d denied: %v", n, resp.GetStatus())
		}
	}
	resp := r.check(t, req)
	if allowed(resp) {
		t.Fatal("the 4th request of the window passed")
	}
	end := berlin(t, "2028-03-15T00:00:00+01:00")
	got, err := strconv.ParseInt(headerOf(resp, HeaderRetryAfter), 10, 64)
	if want := int64(end.Sub(now) / time.Second); err != nil || got > want || got < want-2 {
		t.Errorf("retry-after %s, want about %d (to %v)", headerOf(resp, HeaderRetryAfter), want, end)
	}
	clock.Set(t, end)
	if resp := r.check(t, req); !allowed(resp) || headerOf(resp, HeaderRemaining) != "2" {
		t.Errorf("at the 15th's midnight by Redis' clock: allowed %v, remaining %s", allowed(resp), headerOf(resp, HeaderRemaining))
	}
}

// TestAShadowQuotaCountsButNeverDenies: a shadow quota past its limit lets
// the request through, and an enforced bucket beside it still counts.
func TestAShadowQuotaCountsButNeverDenies(t *testing.T) {
	clock := limiter.NewManualClock(berlin(t, "2028-06-01T10:00:00Z"))
	trial := PolicySpec{Name: "trial", Key: []string{"client_ip"}, Mode: "shadow", Quota: &QuotaSpec{Limit: 1, Period: "day"}}
	burst := PolicySpec{Name: "burst", Key: []string{"client_ip"}, Capacity: 10, RefillPerSecond: "1/60"}
	r := newRig(t, []PolicySpec{trial, burst}, Options{}, storetest.Memory(clock), ServerOptions{})
	req := checkRequest("198.51.100.8", nil)
	for n := 1; n <= 3; n++ {
		if resp := r.check(t, req); !allowed(resp) {
			t.Fatalf("request %d denied by a shadow quota", n)
		}
	}
	if got := headerOf(r.check(t, req), HeaderRateLimit); got != `"burst";r=6;t=240` {
		t.Errorf("ratelimit %s, want the enforced bucket's only", got)
	}
	if n := testutil.ToFloat64(r.server.Metrics().Decisions.WithLabelValues("trial", "shadow_denied")); n != 3 {
		t.Errorf("shadow_denied = %v, want 3 (one a day)", n)
	}
}
