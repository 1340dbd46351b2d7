package rlqs

import (
	"math"
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

// holdTheLimit runs Envoys asking demand (alternately on two replicas
// through Redis) at a bucket of limit a second for 20 s, then 20 s more,
// in which every second's admitted total must be within 5% of the limit;
// it returns the replicas, and each Envoy's requests allowed and asked
// over those 20 s.
func holdTheLimit(t *testing.T, limit int, demand []float64) (rs [2]*rig, allowed, asked []int) {
	t.Helper()
	rs, es, _ := twoReplicas(t, perSecond("tenant=t1", limit), len(demand)/2)
	s := newSim(t, rs[:], es)
	s.run(20*time.Second, demand)
	askedBy, allowedBy := s.run(20*time.Second, demand)
	allowed, asked = make([]int, len(demand)), make([]int, len(demand))
	for sec := range allowedBy {
		for e := range demand {
			allowed[e] += allowedBy[sec][e]
			asked[e] += askedBy[sec][e]
		}
		if got := sum(allowedBy[sec]); math.Abs(float64(got-limit)) > 0.05*float64(limit) {
			t.Errorf("second %d: the fleet admitted %d of %d", sec, got, limit)
		}
	}
	return rs, allowed, asked
}

// TestTwoReplicasDivideOneLimitThroughRedis: four Envoys, two on each
// replica, asking 300, 100, 100 and 100 a second of a bucket of 300: each
// replica knows only its own Envoys, and through Redis each Envoy is
// assigned the level, 75 (every one asks more), the fleet admitting about
// the limit.
func TestTwoReplicasDivideOneLimitThroughRedis(t *testing.T) {
	rs, a, d := holdTheLimit(t, 300, []float64{300, 100, 100, 100})
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

// TestEveryReplicaSeesEveryEnvoyOnce: whatever the phase of an Envoy's
// report timer against the replicas' epochs, every read of the shared
// store counts each Envoy once, at the demand of its latest report (the
// registers hold each Envoy's rates in the current epoch and the next two).
// An Envoy whose stream ends is out of the other replica's count at its
// next read; one that stops reporting, its stream open, within three
// intervals.
func TestEveryReplicaSeesEveryEnvoyOnce(t *testing.T) {
	rs, es, _ := twoReplicas(t, perSecond("tenant=t1", 300), 2)
	s := newSim(t, rs[:], es)
	demand := []float64{300, 100, 100, 100}
	s.run(12*time.Second, demand)
	view := func(r *rig) BucketPage {
		p := r.door.Snapshot()
		if len(p.Buckets) != 1 {
			t.Fatalf("buckets %+v", p.Buckets)
		}
		return p.Buckets[0]
	}
	reads := 0
	s.onWindow = func() {
		reads++
		for i, r := range rs {
			if b := view(r); math.Abs(b.FleetEnvoys-4) > 0.01 || math.Abs(b.FleetDemand-600) > 6 {
				t.Errorf("read %d, replica %d: %.3f Envoys asking %.1f a second, want 4 asking 600", reads, i, b.FleetEnvoys, b.FleetDemand)
			}
		}
	}
	s.run(20*time.Second, demand)
	if reads < 35 {
		t.Fatalf("%d reads in 20 s, want one a window", reads)
	}

	// Envoy 3 (replica 1) ends its stream: the replica takes its rates
	// out of the store as the stream ends.
	s.onWindow = nil
	es[3].Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(view(rs[1]).Envoys) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("replica 1 still holds %d Envoys after one closed", len(view(rs[1]).Envoys))
		}
		time.Sleep(time.Millisecond) // the stream's end is the server's, on its goroutine; polled
	}
	rs[0].door.refresh(rs[0].clock.Now())
	if b := view(rs[0]); math.Abs(b.FleetEnvoys-3) > 0.01 {
		t.Errorf("replica 0's next read after a stream ended: %.3f Envoys, want 3", b.FleetEnvoys)
	}

	// Envoy 2 (replica 0) stops reporting, its stream open: replica 1
	// counts it until the registers it set pass, three intervals at most.
	s.envoys, s.phase, s.owed = es[:2], s.phase[:2], s.owed[:2]
	var counted []float64
	s.onWindow = func() { counted = append(counted, view(rs[1]).FleetEnvoys) }
	s.run(16*time.Second, demand[:2])
	if math.Abs(counted[0]-3) > 0.01 || math.Abs(counted[len(counted)-1]-2) > 0.01 {
		t.Errorf("replica 1's count of Envoys after one stopped reporting: %v, want 3 then 2", counted)
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

// TestAReplicaSeesTheOthersThrottledAndNot: a bucket of 1,000 a second,
// replica 0's Envoys asking 1,000 and 20, replica 1's 600 and 600. Max-min
// gives the quiet one its 20 and the three others 327 each. Replica 1 sees
// replica 0's Envoys only through the shared counters: taken as two asking
// 510 each, they would put the level at 250, and the fleet would admit
// 847. The counters also say which of them are throttled (assigned less
// than they ask), so the quiet one is divided for as asking 20.
func TestAReplicaSeesTheOthersThrottledAndNot(t *testing.T) {
	demand := []float64{1000, 600, 20, 600}
	_, a, _ := holdTheLimit(t, 1000, demand)
	for e, want := range []float64{327, 327, 20, 327} {
		if got := float64(a[e]) / 20; math.Abs(got-want) > want*0.05+1 {
			t.Errorf("Envoy %d (replica %d, asking %v) admitted %.1f a second, want %v", e, e%2, demand[e], got, want)
		}
	}
}
