package memory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
	"github.com/floodgate/floodgate/limiter/storetest"
)

// BenchmarkHotKey: every goroutine decides on one bucket, the worst case for
// lock contention.
func BenchmarkHotKey(b *testing.B) {
	s := storetest.Memory(nil)
	l := limiter.MustLimit(1_000_000, "1000000")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		reqs := []limiter.Request{{Name: "hot", ID: "one", Limit: l, Cost: 1}}
		res := make([]limiter.Result, 1)
		ctx := context.Background()
		for pb.Next() {
			s.Take(ctx, reqs, res)
		}
	})
}

// BenchmarkDistinctKeys: a million callers, each goroutine walking them from
// its own starting point: the map-miss and shard-spreading case.
func BenchmarkDistinctKeys(b *testing.B) {
	const n = 1 << 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "ip:10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	s := memory.New(memory.Options{MaxBuckets: 2 * n, Shards: 256})
	// A bucket stays partly empty for 100 s after a take, longer than a pass
	// over the callers: the steady state of a million active callers.
	l := limiter.MustLimit(100, "1")
	// Measure the steady state: every caller already has a bucket.
	res := make([]limiter.Result, 1)
	for _, id := range ids {
		s.Take(context.Background(), []limiter.Request{{Name: "per-ip", ID: id, Limit: l, Cost: 1}}, res)
	}
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919 * 64
		reqs := []limiter.Request{{Name: "per-ip", Limit: l, Cost: 1}}
		res := make([]limiter.Result, 1)
		ctx := context.Background()
		for pb.Next() {
			reqs[0].ID = ids[i&(n-1)]
			i++
			s.Take(ctx, reqs, res)
		}
	})
}

// BenchmarkTwoBuckets: a request limited per key and per IP at once.
func BenchmarkTwoBuckets(b *testing.B) {
	s := storetest.Memory(nil)
	l := limiter.MustLimit(1_000_000, "1000000")
	var worker atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := strconv.Itoa(int(worker.Add(1)))
		reqs := []limiter.Request{{Name: "per-key", ID: "k" + w, Limit: l, Cost: 1}, {Name: "per-ip", ID: "ip" + w, Limit: l, Cost: 1}}
		res := make([]limiter.Result, 2)
		ctx := context.Background()
		for pb.Next() {
			s.Take(ctx, reqs, res)
		}
	})
}
