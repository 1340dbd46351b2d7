package rls

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/decide"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// callStore counts the decisions it is handed and the buckets in them.
type callStore struct {
	limiter.Store
	calls, buckets int
}

func (s *callStore) Take(ctx context.Context, reqs []limiter.Request, res []limiter.Result) (bool, error) {
	s.calls++
	s.buckets += len(reqs)
	return s.Store.Take(ctx, reqs, res)
}

func manyDescriptors(n int, distinct bool) []*rlcommon.RateLimitDescriptor {
	ds := make([]*rlcommon.RateLimitDescriptor, n)
	for i := range ds {
		v := "same"
		if distinct {
			v = strconv.Itoa(i)
		}
		ds[i] = desc("remote_address", v)
	}
	return ds
}

// TestManyDescriptorsArePlannedOnce: 10,000 and 20,000 descriptors (every
// one its own bucket, or all the same one) are planned in one pass and
// decided in one store Take (which the Redis store cuts into script calls
// of redisstore.MaxScriptBuckets), each answered. The time they take is
// measured, not asserted (go test -v prints it).
func TestManyDescriptorsArePlannedOnce(t *testing.T) {
	cfg := mustConfig(t, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 100000}\n")
	for _, n := range []int{10_000, 20_000} {
		for _, distinct := range []bool{true, false} {
			store := &callStore{Store: storetest.Memory(limiter.NewManualClock(time.Unix(1_000_000, 0)))}
			s := NewService(cfg, ServiceOptions{Hash: plainHash, Store: store})
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: manyDescriptors(n, distinct)}
			start := time.Now()
			plan, err := cfg.Plan(req, plainHash)
			if err != nil {
				t.Fatal(err)
			}
			planned := time.Since(start)
			start = time.Now()
			resp, err := s.ShouldRateLimit(context.Background(), req)
			answered := time.Since(start)
			wantBuckets := n
			if !distinct {
				wantBuckets = 1
			}
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != n || len(plan.Buckets) != wantBuckets ||
				store.calls != 1 || store.buckets != wantBuckets {
				t.Fatalf("%d descriptors (distinct %v): %d statuses, %v, %v; %d buckets planned, %d store calls of %d buckets; want %d statuses in one call of %d",
					n, distinct, len(resp.GetStatuses()), resp.GetOverallCode(), err, len(plan.Buckets), store.calls, store.buckets, n, wantBuckets)
			}
			if !distinct && resp.Statuses[n-1].LimitRemaining != uint32(100_000-n) {
				t.Errorf("%d times the same descriptor: %d left, want %d (each counts)", n, resp.Statuses[n-1].LimitRemaining, 100_000-n)
			}
			t.Logf("%d descriptors (distinct %v): planned in %v, answered in %v", n, distinct, planned, answered)
		}
	}
}

// TestAnOversizedRequestIsAnsweredByTheFailureModeAtOnce: past
// MaxDescriptors descriptors, or MaxEntries entries in all, a request is
// not planned: the failure mode answers it without a store call, a
// counter and a warning say so.
func TestAnOversizedRequestIsAnsweredByTheFailureModeAtOnce(t *testing.T) {
	wide := &rlcommon.RateLimitDescriptor{}
	for i := 0; i <= MaxEntries; i++ {
		wide.Entries = append(wide.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	for _, c := range []struct {
		what   string
		ds     []*rlcommon.RateLimitDescriptor
		reason string
	}{
		{"too many descriptors", manyDescriptors(MaxDescriptors+1, true), "descriptors"},
		{"too many entries", []*rlcommon.RateLimitDescriptor{wide}, "entries"},
	} {
		store := &callStore{Store: storetest.Memory(nil)}
		core, logs := observer.New(zap.WarnLevel)
		reg := prometheus.NewRegistry()
		s := NewService(mustConfig(t, testConfig), ServiceOptions{Hash: plainHash, Store: store, OnFailure: decide.Deny, Logger: zap.New(core), Registerer: reg})
		resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: c.ds})
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headerValue(resp, "x-ratelimit-degraded") != "true" || store.calls != 0 {
			t.Errorf("%s: %v %v after %d store calls, want the failure mode's denial at once", c.what, resp.GetOverallCode(), err, store.calls)
		}
		if got := testutil.ToFloat64(s.metrics.unplanned.WithLabelValues(c.reason)); got != 1 {
			t.Errorf("%s: floodgate_rls_unplanned_requests_total{reason=%q} = %v, want 1", c.what, c.reason, got)
		}
		if logs.FilterMessageSnippet("too large").Len() != 1 {
			t.Errorf("%s: logged %v, want one warning", c.what, logs.All())
		}
	}
}
