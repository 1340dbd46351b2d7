package resilient

import (
	"testing"
	"time"
)

// BenchmarkBreaker is the breaker's cost on the path every decision takes
// while the store is healthy: Allow, then Success, from GOMAXPROCS
// goroutines at once (-cpu sets how many). docs/performance.md ("Circuit
// breaker: mutex against atomics") compares it with a Redis round trip.
func BenchmarkBreaker(b *testing.B) {
	br := NewBreaker(BreakerOptions{Failures: 5, OpenFor: 500 * time.Millisecond}, nil)
	now := time.Unix(1000, 0)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t, ok := br.Allow(now)
			if !ok {
				b.Error("a closed breaker refused a call")
				return
			}
			br.Success(t)
		}
	})
}

// BenchmarkBreakerWithFailures is the same with one call in 16 failing
// (never enough in a row to open it): the failure count changes under
// contention.
func BenchmarkBreakerWithFailures(b *testing.B) {
	br := NewBreaker(BreakerOptions{Failures: 1 << 20}, nil)
	now := time.Unix(1000, 0)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			t, ok := br.Allow(now)
			if !ok {
				b.Error("the breaker opened")
				return
			}
			if i++; i%16 == 0 {
				br.Failure(t, now)
			} else {
				br.Success(t)
			}
		}
	})
}
