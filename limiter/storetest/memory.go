package storetest

import (
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/limiter/memory"
)

// Memory returns an in-memory store for a test, reading clock (nil: the
// system clock), with room for more buckets than any test makes (1<<20)
// in a few shards, so that the sharded code runs. A test of the store as
// serve sizes it builds one from the configuration (internal/store).
func Memory(clock limiter.Clock) *memory.Store {
	return memory.New(memory.Options{Clock: clock, MaxBuckets: 1 << 20, Shards: 16})
}
