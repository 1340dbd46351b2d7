package replay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/doors"
)

const quotaConfig = `
store: {backend: memory}
policies:
  - name: plan
    key: [header:x-api-key]
    quota: {limit: 3, period: month, timezone: Europe/Berlin, anchor_day: 15}
`

// TestReplayCountsAQuotaInItsWindows: a log of one caller's requests on
// the log's own clock, across the 15th at midnight in Berlin: the 4th and
// 5th of the first window are denied, the next window starts afresh, and
// capacity_needed is the most asked in one window.
func TestReplayCountsAQuotaInItsWindows(t *testing.T) {
	cfg, err := doors.Parse("quota.yaml", []byte(quotaConfig))
	if err != nil {
		t.Fatal(err)
	}
	at := []string{
		"2028-02-20T10:00:00.000Z", "2028-02-29T10:00:00.000Z", "2028-03-10T10:00:00.000Z",
		"2028-03-14T22:59:59.000Z", // 23:59:59 in Berlin: denied
		"2028-03-14T22:59:59.500Z", // denied
		"2028-03-14T23:00:00.000Z", // midnight of the 15th in Berlin: a new window
		"2028-03-20T10:00:00.000Z",
	}
	var log strings.Builder
	for _, a := range at {
		b, _ := json.Marshal(map[string]any{"start_time": a, "method": "GET", "path": "/x", "authority": "api.example.com",
			"downstream_remote_address": "10.0.0.1:4000", "request_headers": map[string]string{"x-api-key": "k1"}, "response_code": 200})
		log.Write(append(b, '\n'))
	}
	res, err := Run(context.Background(), strings.NewReader(log.String()), Options{Workers: 1, MaxLineBytes: DefaultMaxLineBytes, Engine: cfg.Engine, MaxBuckets: cfg.Store.Memory.MaxBuckets, ReorderWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Report(ReportOptions{Top: 3}).Policies[0]
	if p.Requests != 7 || p.Allowed != 5 || p.Denied != 2 {
		t.Errorf("requests %d, allowed %d, denied %d; want 7, 5, 2", p.Requests, p.Allowed, p.Denied)
	}
	if p.CapacityNeeded.Max != 5 || p.Capacity != 3 || p.Quota != "month from day 15, Europe/Berlin" {
		t.Errorf("capacity needed %d, capacity %d, quota %q; want 5 (the first window's asks), 3, the calendar", p.CapacityNeeded.Max, p.Capacity, p.Quota)
	}
	if got := p.refillColumn(); got != "a month from day 15, Europe/Berlin" {
		t.Errorf("the refill column says %q", got)
	}
}
