package storetest

import (
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
)

// Memory returns an in-memory store for a test, reading clock (nil: the
// system clock), with room for more buckets than a test makes: 1<<20 in
// 256 shards, the sizes Floodgate runs with by default. (Those live in
// internal/config, DefaultMaxBuckets and MemoryShards, which this package
// cannot import: tests of packages config itself imports use it.)
func Memory(clock limiter.Clock) *memory.Store {
	return memory.New(memory.Options{Clock: clock, MaxBuckets: 1 << 20, Shards: 256})
}
