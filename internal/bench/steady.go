package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"
)

// Steadiness. Every server and the load generator share the machine with
// whatever else runs on it, and on a shared virtual machine that load comes
// and goes unseen (no steal time is reported). Before each round the bench
// times one fixed piece of CPU work while its servers idle: on a steady
// machine the times agree; a wide spread says the machine's speed changed
// during the run, so its ratios are worth less than a steady run's.

// probeWork is the fixed task: hashing 2 MiB, about a millisecond.
func probeWork() time.Duration {
	var buf [4096]byte
	start := time.Now()
	for i := 0; i < 512; i++ {
		buf[0] = byte(i)
		sum := sha256.Sum256(buf[:])
		buf[1] = sum[0]
	}
	return time.Since(start)
}

// probe times probeWork five times and keeps the median: one preemption
// must not count as a slow machine, but a machine slow most of the time
// must.
func probe() time.Duration {
	var d [5]time.Duration
	for i := range d {
		d[i] = probeWork()
	}
	slices.Sort(d[:])
	return d[len(d)/2]
}

// settleAndProbe lets the servers finish what the last round left them
// (garbage collection, Redis expiring keys) and probes.
func settleAndProbe(ctx context.Context) time.Duration {
	select {
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
	}
	return probe()
}

// steadiness describes the probes of one run.
type steadiness []time.Duration

// bounds returns the fastest and the slowest probe.
func (s steadiness) bounds() (lo, hi time.Duration) {
	lo, hi = s[0], s[0]
	for _, d := range s[1:] {
		lo, hi = min(lo, d), max(hi, d)
	}
	return lo, hi
}

// spread is (slowest − fastest) / fastest, 0 with fewer than two probes.
func (s steadiness) spread() float64 {
	if len(s) < 2 {
		return 0
	}
	lo, hi := s.bounds()
	if lo <= 0 {
		return 0
	}
	return float64(hi-lo) / float64(lo)
}

func (s steadiness) String() string {
	if len(s) == 0 {
		return "not measured"
	}
	lo, hi := s.bounds()
	return fmt.Sprintf("a fixed CPU task (hashing 2 MiB) took %v–%v before each of the %d rounds, a spread of %.0f%% (under 10%% on a steady machine; more means other load came and went, and the ratios carry some of it)",
		lo.Round(time.Microsecond), hi.Round(time.Microsecond), len(s), 100*s.spread())
}
