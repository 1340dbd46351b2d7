package rlqs

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/redisstore"
	"github.com/floodgate/floodgate/limiter/redistest"
)

// twoReplicas are two quota doors, each its own board and registry, on
// one real redis-server and one manual clock (Redis keeps the counts; the
// windows are the doors' clock's), with envoysEach Envoys on each.
func twoReplicas(t *testing.T, src limits, envoysEach int) (rs [2]*rig, es []*Envoy, srv *redistest.Server) {
	t.Helper()
	srv = redistest.Start(t)
	clock := limiter.NewManualClock(epoch)
	for i := range rs {
		c := srv.Client()
		t.Cleanup(func() { c.Close() })
		rs[i] = newRig(t, src, rigOptions{clock: clock, store: redisstore.New(c, "")})
	}
	for i := range 2 * envoysEach {
		es = append(es, rs[i%2].envoy(EnvoyOptions{}))
	}
	return rs, es, srv
}

// TestTwoReplicasDivideOneLimitThroughRedis: four Envoys, two on each
// replica, asking 300, 100, 100 and 100 a second of a bucket of 300: each
// replica knows only its own Envoys, and through Redis each Envoy is
// assigned the level, 75 (every one asks more), the fleet admitting about
// the limit.
func TestTwoReplicasDivideOneLimitThroughRedis(t *testing.T) {
	rs, es, _ := twoReplicas(t, perSecond("tenant=t1", 300), 2)
	s := newSim(t, rs[:], es)
	demand := []float64{300, 100, 100, 100}
	s.run(20*time.Second, demand)
	asked, allowed := s.run(20*time.Second, demand)
	var a, d [4]int
	for sec := range allowed {
		for e := range 4 {
			a[e] += allowed[sec][e]
			d[e] += asked[sec][e]
		}
		if got := sum(allowed[sec]); got < 285 || got > 315 {
			t.Errorf("second %d: the fleet admitted %d of 300", sec, got)
		}
	}
	for e := range 4 {
		if got := float64(a[e]) / 20; got < 70 || got > 80 {
			t.Errorf("Envoy %d (replica %d) admitted %.1f a second of %d asked, want about 75 as every other", e, e%2, got, d[e]/20)
		}
	}
	for i, r := range rs {
		p := r.door.Snapshot()
		if len(p.Buckets) != 1 || p.Buckets[0].FleetEnvoys < 3.5 || p.Buckets[0].FleetDemand < 550 {
			t.Errorf("replica %d's view of the fleet: %+v", i, p.Buckets)
		}
	}
}

// TestAnEnvoyLeavingOneReplicaGivesItsShareToTheOther: the busiest Envoy,
// on replica 0, stops; within a few reports the Envoys on replica 1 are
// assigned what it had.
func TestAnEnvoyLeavingOneReplicaGivesItsShareToTheOther(t *testing.T) {
	rs, es, _ := twoReplicas(t, perSecond("tenant=t1", 300), 1)
	s := newSim(t, rs[:], es)
	s.run(20*time.Second, []float64{300, 300})
	if got := rateOf2(es[1].Assignment(tenant1)); got < 140 || got > 160 {
		t.Errorf("with the other asking alike: %v a second, want about 150", got)
	}
	es[0].Close()
	time.Sleep(50 * time.Millisecond)
	s.envoys = es[1:]
	s.phase = s.phase[1:]
	s.owed = s.owed[1:]
	s.run(20*time.Second, []float64{300})
	if got := rateOf2(es[1].Assignment(tenant1)); got < 280 {
		t.Errorf("after the other Envoy left: %v a second (%s), want the whole limit", got, es[1].Assignment(tenant1))
	}
}

// TestRedisDownKeepsTheLastFleet: with Redis gone, each replica divides by
// the last fleet it read: assignments keep coming (their TTL refreshed),
// the same shares, and the store errors are counted; when Redis is back
// the fleet is counted again.
func TestRedisDownKeepsTheLastFleet(t *testing.T) {
	rs, es, srv := twoReplicas(t, perSecond("tenant=t1", 300), 1)
	s := newSim(t, rs[:], es)
	demand := []float64{300, 100}
	s.run(20*time.Second, demand)
	before := []float64{rateOf2(es[0].Assignment(tenant1)), rateOf2(es[1].Assignment(tenant1))}
	srv.Kill()
	_, allowed := s.run(20*time.Second, demand)
	after := []float64{rateOf2(es[0].Assignment(tenant1)), rateOf2(es[1].Assignment(tenant1))}
	for i := range before {
		if after[i] < before[i]*0.9 || after[i] > before[i]*1.1 {
			t.Errorf("Envoy %d: %v a second before Redis went, %v after: want the same share", i, before[i], after[i])
		}
	}
	total := 0
	for _, sec := range allowed[5:] {
		total += sum(sec)
	}
	if avg := float64(total) / float64(len(allowed)-5); avg < 270 || avg > 330 {
		t.Errorf("with Redis down the fleet admitted %.0f a second of 300", avg)
	}
	if rs[0].metric("floodgate_rlqs_store_errors_total") == 0 {
		t.Error("the store errors are not counted")
	}
	errs := rs[0].metric("floodgate_rlqs_store_errors_total")
	srv.Restart()
	s.run(20*time.Second, demand)
	if rs[0].metric("floodgate_rlqs_store_errors_total") > errs+4 {
		t.Error("with Redis back the store still errs")
	}
	if p := rs[1].door.Snapshot(); len(p.Buckets) != 1 || p.Buckets[0].FleetEnvoys < 1.5 || p.Buckets[0].FleetDemand < 350 {
		t.Errorf("with Redis back, replica 1's view of the fleet: %+v", p.Buckets)
	}
}
