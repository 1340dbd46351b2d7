package resilient

import (
	"testing"
	"time"
)

func TestBreakerOpensHalfOpensAndCloses(t *testing.T) {
	var transitions []string
	b := NewBreaker(BreakerOptions{Failures: 3, OpenFor: time.Second}, func(from, to State) {
		transitions = append(transitions, from.String()+">"+to.String())
	})
	t0 := time.Unix(1000, 0)
	allow := func(at time.Time) Ticket {
		t.Helper()
		tk, ok := b.Allow(at)
		if !ok {
			t.Fatalf("refused at %v in state %v", at.Sub(t0), b.State())
		}
		return tk
	}
	for i := 0; i < 2; i++ {
		b.Failure(allow(t0), t0)
	}
	b.Success(allow(t0)) // a success in between resets the count
	for i := 0; i < 2; i++ {
		b.Failure(allow(t0), t0)
	}
	if b.State() != Closed {
		t.Fatalf("two failures after a success opened it: %v", b.State())
	}
	b.Failure(allow(t0), t0)
	if _, ok := b.Allow(t0.Add(999 * time.Millisecond)); b.State() != Open || ok {
		t.Fatalf("three consecutive failures: state %v", b.State())
	}
	// After OpenFor, exactly one probe goes through.
	probe := allow(t0.Add(time.Second))
	if b.State() != HalfOpen {
		t.Fatalf("no probe after OpenFor: %v", b.State())
	}
	if _, ok := b.Allow(t0.Add(time.Second)); ok {
		t.Fatal("a second caller probed while the first probe was out")
	}
	b.Failure(probe, t0.Add(1100*time.Millisecond)) // the probe failed: open again, timed from now
	if _, ok := b.Allow(t0.Add(2000 * time.Millisecond)); b.State() != Open || ok {
		t.Fatalf("after a failed probe: %v", b.State())
	}
	b.Success(allow(t0.Add(2100 * time.Millisecond)))
	if b.State() != Closed {
		t.Fatalf("a successful probe did not close it: %v", b.State())
	}
	allow(t0.Add(2100 * time.Millisecond))
	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
	if len(transitions) != len(want) {
		t.Fatalf("transitions %v, want %v", transitions, want)
	}
	for i := range want {
		if transitions[i] != want[i] {
			t.Errorf("transition %d = %s, want %s", i, transitions[i], want[i])
		}
	}
}

func TestAReleasedProbeLetsAnotherCallerProbe(t *testing.T) {
	b := NewBreaker(BreakerOptions{Failures: 1, OpenFor: time.Millisecond}, nil)
	t0 := time.Unix(1000, 0)
	tk, _ := b.Allow(t0)
	b.Failure(tk, t0)
	probe, ok := b.Allow(t0.Add(time.Second))
	if !ok {
		t.Fatal("no probe")
	}
	b.Release(probe)
	if _, ok := b.Allow(t0.Add(time.Second)); !ok {
		t.Fatal("a released probe still blocks the next one")
	}
}

// TestResultsFromAnEarlierGenerationAreIgnored: every transition starts a
// generation; a ticket from an earlier one neither counts nor closes.
func TestResultsFromAnEarlierGenerationAreIgnored(t *testing.T) {
	b := NewBreaker(BreakerOptions{Failures: 2, OpenFor: time.Second}, nil)
	t0 := time.Unix(1000, 0)
	early, _ := b.Allow(t0)
	late, _ := b.Allow(t0)
	a, _ := b.Allow(t0)
	b.Failure(a, t0)
	c, _ := b.Allow(t0)
	b.Failure(c, t0)
	if b.State() != Open {
		t.Fatalf("after two failures: %v", b.State())
	}
	b.Success(early) // admitted while closed
	if b.State() != Open {
		t.Fatalf("a success from before the opening moved it to %v", b.State())
	}
	probe, _ := b.Allow(t0.Add(time.Second))
	b.Release(late) // a closed-era caller gives up: not the probe
	if _, ok := b.Allow(t0.Add(time.Second)); ok {
		t.Fatal("an old ticket's Release freed the probe slot")
	}
	b.Success(probe)
	if b.State() != Closed {
		t.Fatalf("the probe's success: %v", b.State())
	}
	b.Failure(late, t0.Add(2*time.Second)) // from two generations ago: not counted
	x, _ := b.Allow(t0.Add(2 * time.Second))
	b.Failure(x, t0.Add(2*time.Second))
	if b.State() != Closed {
		t.Fatalf("one failure of this generation and one stale one opened it: %v", b.State())
	}
}

// TestAFailedProbeInTheClosedStateOpensAtOnce: Probe is the start-up (or
// background) check; its failure alone opens the breaker.
func TestAFailedProbeInTheClosedStateOpensAtOnce(t *testing.T) {
	b := NewBreaker(BreakerOptions{Failures: 5, OpenFor: time.Second}, nil)
	t0 := time.Unix(1000, 0)
	p, ok := b.Probe(t0)
	if !ok {
		t.Fatal("no probe while closed")
	}
	b.Failure(p, t0)
	if b.State() != Open {
		t.Fatalf("a failed probe left it %v", b.State())
	}
}
