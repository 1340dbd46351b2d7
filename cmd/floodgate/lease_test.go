package main

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate/floodgate/extauthz"
	"github.com/floodgate/floodgate/extauthz/extauthztest"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// TestALeasedPolicyDecidesWithoutARoundTripAndGivesBack: a policy with
// lease: auto, on the store serve builds over a real redis-server, plans
// requests its leases may pay; one caller's 500 requests all pass (the
// bucket holds 1,000) in far fewer script calls than decisions; closing
// the store gives back what the lease did not spend, so the bucket holds
// 1,000 less what was admitted (and what refilled meanwhile, one a
// second). A shadow policy is never leased.
func TestALeasedPolicyDecidesWithoutARoundTripAndGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	yaml := `store:
  backend: redis
  redis: {addresses: [` + srv.Addr + `]}
policies:
  - {name: global, key: [client_ip], capacity: 1000, refill_per_second: 1, lease: auto}
  - {name: watch, key: [client_ip], capacity: 10, refill_per_second: 1, lease: auto, mode: shadow}
`
	cfg, bs, reg := storeFrom(t, "lease.yaml", yaml)
	var v extauthz.View
	v.Reset(extauthztest.CheckRequest("198.51.100.7", map[string]string{":path": "/x"}))
	var plan extauthz.Plan
	cfg.Engine.Plan(&v, &plan)
	if len(plan.Buckets) != 2 || !plan.Buckets[0].Request.Lease || plan.Buckets[1].Request.Lease {
		t.Fatalf("planned %+v: want the enforced policy leased and the shadow one not", plan.Buckets)
	}
	req := plan.Buckets[0].Request
	calls0 := scriptCalls(t, srv, "evalsha") + scriptCalls(t, srv, "eval")
	for i := range 500 {
		res := make([]limiter.Result, 1)
		ok, err := bs.Main.Take(context.Background(), []limiter.Request{req}, res)
		if err != nil || !ok {
			t.Fatalf("request %d: %v %v", i, ok, err)
		}
	}
	calls := scriptCalls(t, srv, "evalsha") + scriptCalls(t, srv, "eval") - calls0
	t.Logf("500 decisions of one caller: %d script calls", calls)
	if calls > 100 {
		t.Errorf("500 decisions took %d script calls, want far fewer with a lease", calls)
	}
	if served := testutil.ToFloat64(counterNamed(t, reg, "floodgate_lease_decisions_total")); served < 400 {
		t.Errorf("floodgate_lease_decisions_total = %v after 500 decisions, want most", served)
	}
	bs.Close()
	look := req
	look.Cost, look.Lease = 0, false
	res := make([]limiter.Result, 1)
	_, other, _ := storeFrom(t, "other.yaml", yaml) // another replica: the shared bucket as Redis holds it
	if _, err := other.Main.Take(context.Background(), []limiter.Request{look}, res); err != nil {
		t.Fatal(err)
	}
	if r := res[0].Remaining; r < 500 || r > 510 {
		t.Errorf("after the store closed the bucket holds %d, want 500 (1,000 less the 500 admitted, a few refilled)", r)
	}
}

// counterNamed is the collector of reg registered as name.
func counterNamed(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name}, func() float64 { return mf.GetMetric()[0].GetCounter().GetValue() })
		}
	}
	t.Fatalf("%s is not registered", name)
	return nil
}
