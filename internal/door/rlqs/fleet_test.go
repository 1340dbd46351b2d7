package rlqs

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// sim drives Envoys on a manual clock: each asks for its demand (requests a
// second, evenly spaced) of one bucket and reports every interval at its
// own phase, answered before the clock moves on.
type sim struct {
	t        *testing.T
	clock    *limiter.ManualClock
	envoys   []*Envoy
	phase    []time.Duration
	interval time.Duration
	bucket   map[string]string
	now      time.Duration // since the start
	owed     []float64
	// rigs are every door the Envoys (all, every one of them, envoys
	// those still asking) talk to: after a report the clock waits for the
	// pushes it caused, and each door reads the fleet once a window.
	rigs []*rig
	all  []*Envoy
	// onWindow, when set, runs after each door's read of the fleet.
	onWindow func()
}

// quiet waits until every door has sent what it was asked to and every
// Envoy has applied what was sent.
func (s *sim) quiet() {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var queued, sent int64
		for _, r := range s.rigs {
			queued += r.door.queued.Load()
			sent += r.door.sent.Load()
		}
		var got int64
		for _, e := range s.all {
			got += int64(e.Stats().Answers)
		}
		if queued == 0 && got >= sent {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the doors did not settle: %d pushes queued, %d sent, %d received", queued, sent, got)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// newSim runs envoys, reporting every ReportInterval, against rigs on the
// first rig's clock.
func newSim(t *testing.T, rigs []*rig, envoys []*Envoy) *sim {
	interval := ReportInterval
	s := &sim{t: t, clock: rigs[0].clock, envoys: envoys, interval: interval, bucket: tenant1, owed: make([]float64, len(envoys)),
		rigs: rigs, all: append([]*Envoy(nil), envoys...)}
	for i := range envoys {
		s.phase = append(s.phase, (time.Duration(i+1) * interval / time.Duration(len(envoys)+1)).Truncate(10*time.Millisecond))
	}
	return s
}

// run runs for d with demand (requests a second per Envoy), returning each
// Envoy's requests and allowed requests per second of d.
func (s *sim) run(d time.Duration, demand []float64) (asked, allowed [][]int) {
	const step = 10 * time.Millisecond
	secs := int(d / time.Second)
	asked, allowed = make([][]int, secs), make([][]int, secs)
	for i := range asked {
		asked[i], allowed[i] = make([]int, len(s.envoys)), make([]int, len(s.envoys))
	}
	for t := time.Duration(0); t < d; t += step {
		s.clock.Advance(step)
		s.now += step
		sec := int(t / time.Second)
		for i, e := range s.envoys {
			s.owed[i] += demand[i] * step.Seconds()
			for s.owed[i] >= 1 {
				s.owed[i]--
				asked[sec][i]++
				if e.Request(s.bucket) {
					allowed[sec][i]++
				}
			}
			if (s.now-s.phase[i])%s.interval == 0 && s.now >= s.phase[i] {
				if e.Report() {
					settleWithin(s.t, e)
				}
				s.quiet()
			}
		}
		// Each replica reads the fleet's settled windows once a window, as
		// Run does, just after one settles.
		if w := s.rigs[0].door.fleet.window; s.now%w == w/5+step {
			for _, r := range s.rigs {
				r.door.refresh(r.clock.Now())
			}
			s.quiet()
			if s.onWindow != nil {
				s.onWindow()
			}
		}
	}
	return asked, allowed
}

func settleWithin(t *testing.T, e *Envoy) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !e.Settle(ctx) {
		t.Fatal("a report was not answered")
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestTwoEnvoysShareTheLimitFairly: one replica, one bucket of 100 a
// second, two Envoys asking 150 and 50 then 150 and 30: the level, 50
// each, then the quiet one what it asks and the loud one the rest; the pair
// admits about the limit either way.
func TestTwoEnvoysShareTheLimitFairly(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	es := []*Envoy{r.envoy(EnvoyOptions{}), r.envoy(EnvoyOptions{})}
	s := newSim(t, []*rig{r}, es)
	for _, c := range []struct{ loud, quiet float64 }{{150, 50}, {150, 30}} {
		s.run(20*time.Second, []float64{c.loud, c.quiet}) // settle in
		_, allowed := s.run(30*time.Second, []float64{c.loud, c.quiet})
		var a [2]int
		for _, sec := range allowed {
			a[0] += sec[0]
			a[1] += sec[1]
		}
		total := float64(a[0]+a[1]) / 30
		if total < 95 || total > 105 {
			t.Errorf("asking %v: the pair admitted %.1f a second of a limit of 100 (%v)", c, total, a)
		}
		if quiet := float64(a[1]) / 30; math.Abs(quiet-math.Min(c.quiet, 50)) > 3 {
			t.Errorf("asking %v: the quiet one admitted %.1f a second, want %v", c, quiet, math.Min(c.quiet, 50))
		}
	}
}

// TestAnEnvoyThatStopsGivesItsShareBack: one of two Envoys closes its
// stream; within a couple of reports the other is assigned the whole limit.
func TestAnEnvoyThatStopsGivesItsShareBack(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	es := []*Envoy{r.envoy(EnvoyOptions{}), r.envoy(EnvoyOptions{})}
	s := newSim(t, []*rig{r}, es)
	s.run(20*time.Second, []float64{100, 100})
	if got := rateOf2(es[0].Assignment(tenant1)); got < 40 || got > 60 {
		t.Errorf("with two Envoys asking alike, one is assigned %v a second, want about 50", got)
	}
	es[1].Close()
	time.Sleep(50 * time.Millisecond) // the stream's end reaches the door
	s.envoys = es[:1]
	s.run(12*time.Second, []float64{100})
	if got := rateOf2(es[0].Assignment(tenant1)); got < 90 {
		t.Errorf("after the other stopped: %v a second (%s), want the whole limit", got, es[0].Assignment(tenant1))
	}
}

// TestAnIdleEnvoysShareFlowsToTheBusyOne: an Envoy that keeps reporting
// but asks nothing keeps only the floor.
func TestAnIdleEnvoysShareFlowsToTheBusyOne(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	es := []*Envoy{r.envoy(EnvoyOptions{}), r.envoy(EnvoyOptions{})}
	s := newSim(t, []*rig{r}, es)
	s.run(20*time.Second, []float64{100, 100})
	s.run(15*time.Second, []float64{200, 0})
	busy, idle := rateOf2(es[0].Assignment(tenant1)), rateOf2(es[1].Assignment(tenant1))
	if busy < 90 || idle > 6 {
		t.Errorf("busy %v, idle %v a second, want about 95 and the floor of 5", busy, idle)
	}
}

// TestANewEnvoyGetsAShareAtItsFirstReport: a second Envoy's first report
// (demand not known yet) is assigned an average Envoy's share, not
// nothing and not the whole limit.
func TestANewEnvoyGetsAShareAtItsFirstReport(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 100), rigOptions{})
	es := []*Envoy{r.envoy(EnvoyOptions{})}
	s := newSim(t, []*rig{r}, es)
	s.run(15*time.Second, []float64{200})
	n := r.envoy(EnvoyOptions{})
	n.Request(tenant1)
	settleWithin(t, n)
	if got := rateOf2(n.Assignment(tenant1)); got < 30 || got > 70 {
		t.Errorf("the new Envoy's first share: %v a second (%s), want about half", got, n.Assignment(tenant1))
	}
}

// TestTheFleetHoldsTheLimitUnderSteadyDemand: eight Envoys, one bucket of
// 1,000 a second, demand twice the limit, one Envoy half of it: once every
// Envoy has reported a few times, every second's admitted total is within
// 0.95–1.05 of the limit, and each Envoy admits the same, an eighth of the
// limit (every one asks more than that).
func TestTheFleetHoldsTheLimitUnderSteadyDemand(t *testing.T) {
	r := newRig(t, perSecond("tenant=t1", 1000), rigOptions{})
	var es []*Envoy
	for range 8 {
		es = append(es, r.envoy(EnvoyOptions{}))
	}
	s := newSim(t, []*rig{r}, es)
	runPhase(t, s, 0)
	runPhase(t, s, 0)
	asked, allowed := s.run(20*time.Second, demandOf(0))
	for i, sec := range allowed {
		if a := sum(sec); a < 950 || a > 1050 {
			t.Errorf("second %d: %d admitted of 1000", i, a)
		}
	}
	for e := range es {
		a, d := 0, 0
		for sec := range allowed {
			a, d = a+allowed[sec][e], d+asked[sec][e]
		}
		if got := float64(a) / 20; got < 120 || got > 130 {
			t.Errorf("Envoy %d admitted %.1f a second of %d asked, want about 125 as every other", e, got, d/20)
		}
	}
}

// TestTheFleetFollowsShiftingDemand: the benchmark's shape
// (docs/performance.md, "Rate limit quotas"), two replicas on one store and
// a manual clock: the heavy Envoy changes every 10 s, two report
// intervals. Under the level no Envoy holds more than the others may use,
// so a shift leaves nothing unused: the fleet admits about the limit every
// second.
func TestTheFleetFollowsShiftingDemand(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of simulated traffic")
	}
	_, s := benchFleet(t)
	var admitted []int
	for phase := range 6 {
		admitted = append(admitted, runPhase(t, s, phase)...)
	}
	total, within := 0, 0
	for i, a := range admitted[10:] {
		total += a
		if a >= 950 && a <= 1050 {
			within++
		}
		if a > 1200 {
			t.Errorf("second %d: %d admitted of 1000", i+10, a)
		}
	}
	avg := float64(total) / float64(len(admitted)-10) / 1000
	t.Logf("from the first shift: %.3f of the limit, %d of %d seconds within 0.95–1.05", avg, within, len(admitted)-10)
	if avg < 0.97 || avg > 1.03 {
		t.Errorf("%.3f of the limit admitted on average, want 0.97–1.03", avg)
	}
	// Every Envoy asks more than the level in every phase, so the one
	// whose demand fell still uses all of its share: no second is lost
	// waiting for its report (50 of 50 when written).
	if within < 48 {
		t.Errorf("%d of %d seconds within 0.95–1.05 of the limit, want 48 or more", within, len(admitted)-10)
	}
	// From the start, but for the first second (every Envoy new, the
	// first given the whole limit, every bucket starting full): each
	// replica sees the other's Envoys as soon as they report.
	early := 0
	for _, a := range admitted[1:10] {
		if a >= 950 && a <= 1050 {
			early++
		}
	}
	if early < 8 {
		t.Errorf("seconds 1 to 9: %d of 9 within 0.95–1.05 of the limit (%v), want 8 or more", early, admitted[:10])
	}
}

// TestTheFleetFollowsUnevenShiftingDemand: the benchmark's other shape,
// demand 1.5 × the limit with one Envoy asking three quarters of it (1,125
// a second, the others 54 each), the heavy one changing every 10 s. Unlike
// the even shape, the Envoy whose demand falls leaves most of its share
// unused until it reports, and the one whose demand rises is held to its
// share until it reports: each shift costs a second or two. But once both
// have reported, the riser is taken to ask what the others leave (not its
// demand over the interval, which mixes 54 and 1,125), and the fleet admits
// the limit at once, on both replicas.
func TestTheFleetFollowsUnevenShiftingDemand(t *testing.T) {
	rs, s := benchFleet(t)
	// The debug page says which Envoy is taken to ask what the others
	// leave, between its report of the rise and its next.
	var phase int
	rose := map[int]bool{} // by phase
	s.onWindow = func() {
		for _, r := range rs {
			for _, b := range r.door.Snapshot().Buckets {
				for _, e := range b.Envoys {
					rose[phase] = rose[phase] || e.Rose
				}
			}
		}
	}
	for phase = range 4 {
		demand := make([]float64, 8)
		for i := range demand {
			demand[i] = 375.0 / 7
		}
		demand[phase] = 1125
		_, allowed := s.run(10*time.Second, demand)
		var out []int
		for _, sec := range allowed {
			out = append(out, sum(sec))
		}
		t.Logf("phase %d: admitted a second %v", phase, out)
		if phase == 0 {
			continue // every Envoy new
		}
		// The faller (Envoy phase-1) and the riser (Envoy phase) report
		// phase·5/9 s and (phase+1)·5/9 s into the phase: both by its third
		// second. The riser's next report, 5 s on, gives it a new bucket,
		// full: a second up to 6% over.
		total := 0
		for sec, a := range out {
			if a > 1100 || (sec >= 3 && (a < 930 || a > 1070)) {
				t.Errorf("phase %d, second %d: %d admitted of 1000", phase, sec, a)
			}
			if sec >= 3 {
				total += a
			}
		}
		if avg := float64(total) / 7000; avg < 0.98 || avg > 1.02 {
			t.Errorf("phase %d, seconds 3 to 9: %.3f of the limit admitted on average, want 0.98–1.02", phase, avg)
		}
	}
	for phase := 1; phase < 4; phase++ {
		if !rose[phase] {
			t.Errorf("phase %d: /debug/rlqs never showed the riser as risen", phase)
		}
	}
}

// benchFleet is the benchmark's fleet on a manual clock: two doors on one
// memory store, a bucket of 1,000 a second, eight Envoys, four on each.
func benchFleet(t *testing.T) ([]*rig, *sim) {
	clock := limiter.NewManualClock(epoch)
	mem := storetest.Memory(clock)
	var rs []*rig
	for range 2 {
		rs = append(rs, newRig(t, perSecond("tenant=t1", 1000), rigOptions{clock: clock, store: mem}))
	}
	var es []*Envoy
	for i := range 8 {
		es = append(es, rs[i%2].envoy(EnvoyOptions{}))
	}
	return rs, newSim(t, rs, es)
}

// demandOf is the benchmark's demand in phase: 2,000 a second, Envoy
// phase%8 asking half of it, the others the rest evenly.
func demandOf(phase int) []float64 {
	demand := make([]float64, 8)
	for i := range demand {
		demand[i] = 1000.0 / 7
	}
	demand[phase%8] = 1000
	return demand
}

// runPhase runs 10 s of the benchmark's demand (demandOf), logging each
// Envoy's share against its demand.
func runPhase(t *testing.T, s *sim, phase int) []int {
	demand := demandOf(phase)
	asked, allowed := s.run(10*time.Second, demand)
	var out []int
	for i := range allowed {
		out = append(out, sum(allowed[i]))
	}
	var line string
	for i := range demand {
		a, d := 0, 0
		for sec := range allowed {
			a += allowed[sec][i]
			d += asked[sec][i]
		}
		line += fmt.Sprintf(" %d/%d", a/10, d/10)
	}
	t.Logf("phase %d: admitted a second %v; per Envoy admitted/asked a second:%s", phase, out, line)
	return out
}

// rateOf2 reads the rate out of a token bucket's description.
func rateOf2(desc string) float64 {
	var m, tpf, secs int
	if _, err := fmt.Sscanf(desc, "token_bucket max %d, %d per %ds", &m, &tpf, &secs); err != nil || secs == 0 {
		return math.NaN()
	}
	return float64(tpf) / float64(secs)
}
