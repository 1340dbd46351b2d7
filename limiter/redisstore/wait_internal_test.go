package redisstore

import (
	"runtime"
	"testing"
	"time"
)

// fill's waiting, without Redis or flushers: calls queue on a coalescer's
// channel and fill is driven directly. No clock is involved: a wait that
// must not end by time is an hour long.
func TestFillWaitsOnlyAfterADeepBatch(t *testing.T) {
	newC := func(wait time.Duration) *coalescer {
		return &coalescer{maxBatch: 16, wait: wait, calls: make(chan *call, 64), quit: make(chan struct{})}
	}
	queue := func(c *coalescer, n int) {
		for range n {
			c.calls <- &call{}
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	first := func() []*call { return []*call{{}} }

	// After a light batch (prev < minWaitBatch) or with waiting off, fill
	// takes what is queued and returns at once.
	for _, tc := range []struct {
		prev int
		wait time.Duration
	}{{0, time.Hour}, {minWaitBatch - 1, time.Hour}, {12, -1}} {
		c := newC(tc.wait)
		queue(c, 2)
		if got := len(c.fill(first(), tc.prev, timer)); got != 3 {
			t.Errorf("prev %d, wait %v: a batch of %d, want the 3 queued", tc.prev, tc.wait, got)
		}
	}

	// After a deep batch, a smaller one waits until it is as deep.
	c := newC(time.Hour)
	queue(c, 2)
	done := make(chan int)
	go func() { done <- len(c.fill(first(), 8, timer)) }()
	for len(c.calls) > 0 { // fill has taken the queued calls: it waits now
		runtime.Gosched()
	}
	queue(c, 4) // 7: not yet
	select {
	case n := <-done:
		t.Fatalf("fill returned a batch of %d before it held the previous batch's 8", n)
	default:
	}
	queue(c, 3)
	if n := <-done; n != 8 {
		t.Errorf("a batch of %d, want 8 (the previous batch's depth; the other 2 stay queued)", n)
	}
	if len(c.calls) != 2 {
		t.Errorf("%d calls left queued, want 2", len(c.calls))
	}

	// Never beyond maxBatch, and what is queued is taken whatever prev was.
	c = newC(time.Hour)
	queue(c, 40)
	if n := len(c.fill(first(), 100, timer)); n != c.maxBatch {
		t.Errorf("a batch of %d, want maxBatch %d", n, c.maxBatch)
	}

	// The wait ends when the coalescer closes, and when the wait is over.
	c = newC(time.Hour)
	go func() { done <- len(c.fill(first(), 8, timer)) }()
	close(c.quit)
	if n := <-done; n != 1 {
		t.Errorf("after close: a batch of %d, want the 1 it held", n)
	}
	c = newC(time.Nanosecond)
	if n := len(c.fill(first(), 8, timer)); n != 1 {
		t.Errorf("after the wait: a batch of %d, want the 1 it held", n)
	}
}
