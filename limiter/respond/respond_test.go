package respond

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
)

func TestSecondsRoundUpAndRetryAfterIsAtLeastOne(t *testing.T) {
	for _, tc := range []struct {
		d           time.Duration
		secs, retry int64
	}{
		{0, 0, 1},
		{time.Nanosecond, 1, 1},
		{time.Second, 1, 1},
		{time.Second + time.Microsecond, 2, 2},
		{59*time.Second + 999*time.Millisecond, 60, 60},
	} {
		if got := Seconds(tc.d); got != tc.secs {
			t.Errorf("Seconds(%v) = %d, want %d", tc.d, got, tc.secs)
		}
		if got := RetryAfter(tc.d); got != tc.retry {
			t.Errorf("RetryAfter(%v) = %d, want %d", tc.d, got, tc.retry)
		}
	}
}

func TestWindowIsTheTimeToRefillFromEmpty(t *testing.T) {
	for _, tc := range []struct {
		capacity int64
		rate     string
		want     int64
	}{
		{5, "1", 5},
		{20, "100/60", 12},
		{1, "1/60", 60},
		{3, "2", 2}, // 1.5 s, rounded up
	} {
		if got := Window(limiter.MustLimit(tc.capacity, tc.rate)); got != tc.want {
			t.Errorf("Window(%d at %s/s) = %d, want %d", tc.capacity, tc.rate, got, tc.want)
		}
	}
}

func TestMembersAreStructuredFieldStrings(t *testing.T) {
	for _, tc := range []struct{ name, policy, ratelimit string }{
		{"api-per-key", `"api-per-key";q=20;w=12`, `"api-per-key";r=3;t=7`},
		{`a"b\c`, `"a\"b\\c";q=20;w=12`, `"a\"b\\c";r=3;t=7`},
		{"café\n", `"caf???";q=20;w=12`, `"caf???";r=3;t=7`},
	} {
		if got := string(AppendPolicy(nil, tc.name, 20, 12)); got != tc.policy {
			t.Errorf("AppendPolicy(%q) = %s, want %s", tc.name, got, tc.policy)
		}
		if got := string(AppendRateLimit(nil, tc.name, 3, 7)); got != tc.ratelimit {
			t.Errorf("AppendRateLimit(%q) = %s, want %s", tc.name, got, tc.ratelimit)
		}
	}
}

func TestTheBodyIsJSONWhateverTheName(t *testing.T) {
	for _, tc := range []struct {
		body Body
		want string
	}{
		{Body{Limit: "api", RetryAfter: 3}, `{"error":"rate_limited","policy":"api","retry_after":3}`},
		{Body{RetryAfter: 1, Degraded: true}, `{"error":"rate_limited","retry_after":1,"degraded":true}`},
		{Body{Limit: "api", Never: true}, `{"error":"rate_limited","policy":"api","reason":"the request costs more tokens than the policy's capacity: it can never pass"}`},
		{Body{Limit: `edge.key_"x"<é>`, RetryAfter: 2}, `{"error":"rate_limited","policy":"edge.key_\"x\"\u003cé\u003e","retry_after":2}`},
	} {
		got := AppendBody(nil, tc.body)
		if string(got) != tc.want {
			t.Errorf("AppendBody(%+v) = %s, want %s", tc.body, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("AppendBody(%+v) is not JSON: %s", tc.body, got)
		}
	}
}

func TestTightestAndDenying(t *testing.T) {
	res := []limiter.Result{
		{Allowed: false, Remaining: 0, ResetAfter: 4 * time.Second, RetryAfter: time.Second},
		{Allowed: true, Remaining: 0, ResetAfter: 9 * time.Second},
		{Allowed: false, Remaining: 2, ResetAfter: time.Second, RetryAfter: 3 * time.Second},
	}
	if got := Tightest(res); got != 1 {
		t.Errorf("Tightest = %d, want 1: fewest left, then furthest from full", got)
	}
	if got := Denying(res); got != 2 {
		t.Errorf("Denying = %d, want 2: the longest wait", got)
	}
	res[1].ExceedsCapacity = true
	if got := Denying(res); got != 1 {
		t.Errorf("Denying = %d, want 1: a cost that can never fit names the denial", got)
	}
	if got := Denying(res[1:2:2][:0]); got != -1 {
		t.Errorf("Denying(nothing) = %d, want -1", got)
	}
}
