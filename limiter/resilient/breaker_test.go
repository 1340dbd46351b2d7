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
	for i := 0; i < 2; i++ {
		if !b.Allow(t0) {
			t.Fatal("a closed breaker refused a call")
		}
		b.Failure(t0)
	}
	b.Success() // a success in between resets the count
	for i := 0; i < 2; i++ {
		b.Failure(t0)
	}
	if b.State() != Closed {
		t.Fatalf("two failures after a success opened it: %v", b.State())
	}
	b.Failure(t0)
	if b.State() != Open || b.Allow(t0.Add(999*time.Millisecond)) {
		t.Fatalf("three consecutive failures: state %v", b.State())
	}
	// After OpenFor, exactly one probe goes through.
	if !b.Allow(t0.Add(time.Second)) || b.State() != HalfOpen {
		t.Fatalf("no probe after OpenFor: %v", b.State())
	}
	if b.Allow(t0.Add(time.Second)) {
		t.Fatal("a second caller probed while the first probe was out")
	}
	b.Failure(t0.Add(1100 * time.Millisecond)) // the probe failed: open again, timed from now
	if b.State() != Open || b.Allow(t0.Add(2000*time.Millisecond)) {
		t.Fatalf("after a failed probe: %v", b.State())
	}
	if !b.Allow(t0.Add(2100 * time.Millisecond)) {
		t.Fatal("no second probe")
	}
	b.Success()
	if b.State() != Closed || !b.Allow(t0.Add(2100*time.Millisecond)) {
		t.Fatalf("a successful probe did not close it: %v", b.State())
	}
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
	b.Failure(t0)
	if !b.Allow(t0.Add(time.Second)) {
		t.Fatal("no probe")
	}
	b.Release()
	if !b.Allow(t0.Add(time.Second)) {
		t.Fatal("a released probe still blocks the next one")
	}
}
