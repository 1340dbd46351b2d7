package redisstore

import (
	"testing"
	"time"
)

// The floor of round trips, fed synthetic instants: the shortest round trip
// of the current window and the one before it, once they hold floorBatches.
func TestTheFloorIsTheShortestRoundTripOfTheLastTwoWindows(t *testing.T) {
	var c coalescer
	us := func(n int64) int64 { return n * int64(time.Microsecond) }
	w := int64(floorWindow)
	t0 := int64(1_000_000_000_000)
	for i := range floorBatches - 1 {
		c.observeFloor(t0+int64(i), us(900))
		if got := c.floor(); got != 0 {
			t.Fatalf("after %d batches: floor %v, want 0 (not known yet)", i+1, got)
		}
	}
	steps := []struct {
		at, rtt int64
		want    time.Duration
		why     string
	}{
		{t0 + w/8, us(1000), 900 * time.Microsecond, "known from the eighth batch"},
		{t0 + w/4, us(1200), 900 * time.Microsecond, "a longer one does not raise it"},
		{t0 + w/2, us(500), 500 * time.Microsecond, "a shorter one lowers it at once"},
		{t0 + w + 1, us(800), 500 * time.Microsecond, "a new window keeps the last one's"},
		{t0 + 2*w + 2, us(700), 0, "the window before last is forgotten, and the last one holds one batch"},
	}
	for _, s := range steps {
		c.observeFloor(s.at, s.rtt)
		if got := c.floor(); got != s.want {
			t.Errorf("%s: floor %v, want %v", s.why, got, s.want)
		}
	}
	for i := range floorBatches - 2 {
		c.observeFloor(t0+2*w+3+int64(i), us(650))
	}
	if got, want := c.floor(), 650*time.Microsecond; got != want {
		t.Errorf("two windows of eight batches: floor %v, want %v, the shortest", got, want)
	}
	// A window lasts floorRounds of the floor when that is longer: with
	// Redis 50 ms away, 150 ms on is the same window.
	var far coalescer
	for i := range floorBatches {
		far.observeFloor(t0+int64(i), us(50_000))
	}
	far.observeFloor(t0+3*w/2, us(80_000))
	if got := far.floorCurN.Load(); got != floorBatches+1 {
		t.Errorf("Redis 50 ms away: the window holds %d batches after 150 ms, want %d", got, floorBatches+1)
	}
	// After a quiet spell, what comes back now: Redis moved nearer.
	for i := range floorBatches {
		c.observeFloor(t0+10*w+int64(i), us(60))
	}
	c.observeFloor(t0+10*w+w/2, us(1000))
	if got, want := c.floor(), 60*time.Microsecond; got != want {
		t.Errorf("Redis moved nearer after a quiet spell: floor %v, want %v", got, want)
	}
}

// Only a small batch's round trip tells how long the wire is: a deep one's
// is mostly Redis' work, and on a Redis near and busy every batch is deep.
func TestADeepBatchDoesNotCountInTheFloor(t *testing.T) {
	var c coalescer
	for range 2 * floorBatches {
		c.observe(time.Now().Add(-time.Millisecond), floorMaxBatch+1)
	}
	if got := c.floor(); got != 0 {
		t.Fatalf("after batches of %d decisions only: floor %v, want 0 (not known)", floorMaxBatch+1, got)
	}
	if c.rtt.Load() < int64(time.Millisecond) {
		t.Fatalf("rtt %v: deep batches count there", time.Duration(c.rtt.Load()))
	}
	for range floorBatches {
		c.observe(time.Now().Add(-time.Millisecond), floorMaxBatch)
	}
	if got := c.floor(); got < time.Millisecond {
		t.Fatalf("after %d batches of %d: floor %v, want at least 1ms", floorBatches, floorMaxBatch, got)
	}
}

// acquire with a batch on the wire, without Redis or flushers: where the
// next batch goes, by how far Redis is. Nothing here waits on a clock: a
// batch that must wait for the wire is released by the test taking the
// wire's token back, and shows where it went.
func TestAcrossAHopABatchLeavesBesideTheOneOnTheWire(t *testing.T) {
	const rtt = time.Hour // the batch on the wire left well within two of them
	newC := func(floor time.Duration, extras int) *coalescer {
		c := &coalescer{
			wire:  make(chan struct{}, 1),
			extra: make(chan struct{}, extras),
			hop:   make(chan struct{}, hopExtras),
			quit:  make(chan struct{}),
		}
		c.rtt.Store(int64(rtt))
		c.floorCur.Store(int64(floor))
		c.floorCurN.Store(floorBatches)
		c.wireAt.Store(time.Now().UnixNano())
		c.wire <- struct{}{} // a batch on the wire
		return c
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	noDeadline := &call{}
	type got struct {
		s  slot
		ok bool
	}
	// start runs acquire on a goroutine of its own: where the batch went
	// arrives on the channel.
	start := func(c *coalescer, cl *call) <-chan got {
		res := make(chan got, 1)
		go func() {
			s, ok := c.acquire(cl, timer)
			res <- got{s, ok}
		}()
		return res
	}
	// waitsForTheWire asserts that acquire does not return before the
	// batch on the wire is back, and then takes the wire.
	waitsForTheWire := func(t *testing.T, c *coalescer, cl *call) {
		t.Helper()
		res := start(c, cl)
		select {
		case r := <-res:
			t.Fatalf("acquire returned %v (ok %v) with the wire taken: it should have waited for it", r.s, r.ok)
		default:
		}
		<-c.wire // the batch on the wire is back
		if r := <-res; r.s != onWire || !r.ok {
			t.Fatalf("acquire returned %v (ok %v) once the wire was free, want onWire", r.s, r.ok)
		}
	}
	// acquireNow asserts that acquire returns at once (within a generous
	// bound, rather than hanging the test) and where the batch went.
	acquireNow := func(t *testing.T, c *coalescer, cl *call) slot {
		t.Helper()
		select {
		case r := <-start(c, cl):
			if !r.ok {
				t.Fatal("acquire: not ok on an open coalescer")
			}
			return r.s
		case <-time.After(10 * time.Second):
			t.Fatal("acquire waited for the wire")
		}
		return onWire
	}

	t.Run("near", func(t *testing.T) {
		// A Redis near (60 µs): the batch waits and grows.
		waitsForTheWire(t, newC(60*time.Microsecond, 8), noDeadline)
	})
	t.Run("hop", func(t *testing.T) {
		c := newC(time.Millisecond, 8)
		for i := range hopExtras {
			if s := acquireNow(t, c, noDeadline); s != besideHop {
				t.Fatalf("batch %d across a 1 ms hop: acquire returned %v, want besideHop", i+1, s)
			}
		}
		// With hopExtras beside it, the next waits for whichever is back
		// first: here one of them.
		res := start(c, noDeadline)
		<-c.hop
		if r := <-res; r.s != besideHop || !r.ok {
			t.Fatalf("once a batch beside the wire was back: acquire returned %v (ok %v), want besideHop", r.s, r.ok)
		}
		if len(c.extra) != hopExtras+1 || len(c.hop) != hopExtras {
			t.Fatalf("%d extra and %d hop tokens out, want %d and %d: every batch beside the wire holds one of each", len(c.extra), len(c.hop), hopExtras+1, hopExtras)
		}
	})
	t.Run("hop, a long deadline", func(t *testing.T) {
		c := newC(time.Millisecond, 8)
		c.rtt.Store(int64(time.Millisecond))
		cl := &call{deadline: time.Now().Add(time.Hour)}
		if s := acquireNow(t, c, cl); s != besideHop {
			t.Fatalf("across a 1 ms hop with an hour left: acquire returned %v, want besideHop", s)
		}
	})
	t.Run("hop, the pool's connections out", func(t *testing.T) {
		c := newC(time.Millisecond, 2)
		c.extra <- struct{}{}
		c.extra <- struct{}{}
		waitsForTheWire(t, c, noDeadline)
		if len(c.hop) != 0 {
			t.Fatalf("%d hop tokens kept by a batch that went on the wire", len(c.hop))
		}
	})
	t.Run("hop, extra batches late", func(t *testing.T) {
		// Extra batches stopped coming back in time (a link short of
		// bandwidth): the batch waits for the wire.
		c := newC(time.Millisecond, 8)
		c.extraMisses.Store(1024)
		c.extraAt.Store(time.Now().UnixNano())
		waitsForTheWire(t, c, noDeadline)
	})
	t.Run("hop, Redis stopped answering", func(t *testing.T) {
		c := newC(time.Millisecond, 8)
		c.rtt.Store(int64(time.Millisecond))
		c.wireAt.Store(time.Now().Add(-time.Minute).UnixNano())
		waitsForTheWire(t, c, noDeadline)
	})
}

// slow: whether the flusher sends a batch from a goroutine of its own.
func TestTheFlusherDoesNotWaitOnABatchAcrossAHop(t *testing.T) {
	c := &coalescer{extra: make(chan struct{}, 8)}
	c.floorCurN.Store(floorBatches)
	c.rtt.Store(int64(100 * time.Microsecond))
	cl := &call{deadline: time.Now().Add(time.Hour)}
	c.floorCur.Store(int64(60 * time.Microsecond))
	if c.slow(cl) {
		t.Error("slow with Redis 60 µs away and an hour to go")
	}
	c.floorCur.Store(int64(time.Millisecond))
	if !c.slow(cl) {
		t.Error("not slow across a 1 ms hop: the flusher would wait the wire out")
	}
	c.floorCur.Store(int64(60 * time.Microsecond))
	c.rtt.Store(int64(time.Hour))
	if !c.slow(cl) {
		t.Error("not slow with round trips as long as the deadline")
	}
}
