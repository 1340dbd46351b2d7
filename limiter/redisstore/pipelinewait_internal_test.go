package redisstore

import (
	"testing"
	"time"
)

// TestPipelineWaitIsTakenAsGiven: store.redis.pipeline_wait: 0s means
// never hold a batch, and the coalescer takes 0 as that, not as "the
// default" (which once made serve spell 0s as -1).
func TestPipelineWaitIsTakenAsGiven(t *testing.T) {
	for _, wait := range []time.Duration{0, 100 * time.Microsecond, 2 * time.Millisecond} {
		c := newCoalescer(&Store{}, PipelineOptions{MaxBatch: 128, Flushers: 1, Wait: wait})
		got := c.wait
		c.close()
		if got != wait {
			t.Errorf("Wait %v: the coalescer waits %v", wait, got)
		}
	}
}
