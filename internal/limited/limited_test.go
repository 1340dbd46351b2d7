package limited

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// clock is a settable clock for Options.Now.
type clock struct{ ns atomic.Int64 }

// withDefaults is o with DefaultOptions in the fields it leaves zero: the
// tests set only what they are about.
func withDefaults(o Options) Options {
	d := DefaultOptions()
	if o.Window == 0 {
		o.Window = d.Window
	}
	if o.Intervals == 0 {
		o.Intervals = d.Intervals
	}
	if o.Size == 0 {
		o.Size = d.Size
	}
	if o.Now == nil {
		o.Now = d.Now
	}
	return o
}

// TestNewRefusesNoWindowIntervalOrSize: the recorder takes its sizes as
// given; a zero is the caller's mistake, not a default.
func TestNewRefusesNoWindowIntervalOrSize(t *testing.T) {
	for _, edit := range []func(*Options){
		func(o *Options) { o.Window = 0 },
		func(o *Options) { o.Intervals = 0 },
		func(o *Options) { o.Size = -1 },
	} {
		o := DefaultOptions()
		edit(&o)
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "positive Window, Intervals and Size") {
					t.Errorf("%+v: recovered %v, want a panic naming the sizes", o, r)
				}
			}()
			New(o)
		}()
	}
	if r := New(DefaultOptions()); r.window != time.Minute || r.intervals != 6 || r.size != 64 {
		t.Errorf("DefaultOptions: window %v, %d intervals, size %d; want 1m, 6, 64 as docs/limited.md says", r.window, r.intervals, r.size)
	}
}

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// record counts n decisions of caller id (labelled by id) under p.
func record(p *Tally, id string, n int, denied bool) {
	for range n {
		p.Record(p.r.now(), id, Label{"header:x-api-key", id}, denied)
	}
}

func TestCountsAreExactWhileTheCallersFitTheSketch(t *testing.T) {
	c := newClock()
	r := New(withDefaults(Options{Size: 4, Now: c.Now}))
	p := r.tally("per-key", false)
	record(p, "a", 3, false)
	record(p, "a", 7, true)
	record(p, "b", 2, true)
	record(p, "c", 5, false) // allowed only: followed, not listed
	c.Advance(25 * time.Second)
	record(p, "b", 4, true)
	record(p, "a", 1, false)
	r.tally("quiet", false).Record(c.Now(), "z", Label{"client_ip", "192.0.2.1"}, false)
	r.tally("trial", true).Record(c.Now(), "q", Label{"client_ip", "192.0.2.9"}, true)

	got := r.Snapshot(0)
	want := Report{WindowSeconds: 60,
		Policies: []PolicyReport{
			{Name: "per-key", Denied: 13, Top: []Caller{
				{Caller: "a", Key: "header:x-api-key", Denied: 7, Allowed: 4},
				{Caller: "b", Key: "header:x-api-key", Denied: 6, Allowed: 0},
			}},
			{Name: "quiet", Denied: 0, Top: []Caller{}},
		},
		Shadow: []PolicyReport{{Name: "trial", Denied: 1, Top: []Caller{{Caller: "192.0.2.9", Key: "client_ip", Denied: 1}}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if one := r.Snapshot(1); len(one.Policies[0].Top) != 1 || one.Policies[0].Top[0].Caller != "a" {
		t.Errorf("Snapshot(1) kept %+v, want only the most denied caller, a", one.Policies[0].Top)
	}
}

func TestTheWindowSlidesIntervalByInterval(t *testing.T) {
	c := newClock()
	r := New(withDefaults(Options{Window: 60 * time.Second, Intervals: 6, Now: c.Now}))
	p := r.tally("p", false)
	c.ns.Store(c.ns.Load() / int64(10*time.Second) * int64(10*time.Second)) // the start of an interval
	record(p, "old", 5, true)
	c.Advance(30 * time.Second)
	record(p, "new", 2, true)
	denied := func() map[string]int64 {
		m := map[string]int64{}
		for _, pr := range r.Snapshot(0).Policies {
			for _, c := range pr.Top {
				m[c.Caller] = c.Denied
			}
		}
		return m
	}
	if got := denied(); got["old"] != 5 || got["new"] != 2 {
		t.Fatalf("within the window: %v", got)
	}
	c.Advance(29*time.Second + 999*time.Millisecond) // "old"'s interval is still the oldest of six
	if got := denied(); got["old"] != 5 {
		t.Fatalf("59.999 s after: %v, want old still counted", got)
	}
	c.Advance(time.Millisecond) // 60 s: its interval left the window
	if got := denied(); got["old"] != 0 || got["new"] != 2 {
		t.Fatalf("60 s after: %v, want only new", got)
	}
	c.Advance(30 * time.Second)
	if rep := r.Snapshot(0); len(rep.Policies) != 0 {
		t.Fatalf("after a whole idle window: %+v, want no policy listed", rep)
	}
	if p.ring != nil {
		t.Error("an idle policy kept its sketches' memory")
	}
	record(p, "back", 1, true) // and the handle still records afterwards
	if got := denied(); got["back"] != 1 {
		t.Fatalf("after the idle window: %v", got)
	}
}

// TestHeavyHittersSurviveAFloodOfDistinctCallers: space-saving keeps every
// caller denied more than total/Size times, with a count no lower than the
// truth and no higher than the truth plus its stated overcount.
func TestHeavyHittersSurviveAFloodOfDistinctCallers(t *testing.T) {
	c := newClock()
	r := New(withDefaults(Options{Size: 32, Now: c.Now})) // total/Size = 813, below every heavy caller's count
	p := r.tally("p", false)
	heavy := map[string]int64{"h1": 3000, "h2": 2000, "h3": 1000}
	rng := rand.New(rand.NewPCG(1, 2))
	var stream []string
	for id, n := range heavy {
		for range n {
			stream = append(stream, id)
		}
	}
	for i := range 20_000 {
		stream = append(stream, "flood-"+strconv.Itoa(i))
	}
	rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	for _, id := range stream {
		p.Record(c.Now(), id, Label{"client_ip", id}, true)
	}
	rep := r.Snapshot(3)
	pr := rep.Policies[0]
	if pr.Denied != int64(len(stream)) {
		t.Errorf("policy denied %d, want every denial, %d", pr.Denied, len(stream))
	}
	for i, want := range []string{"h1", "h2", "h3"} {
		got := pr.Top[i]
		if got.Caller != want {
			t.Fatalf("top %d is %q, want %s: %+v", i, got.Caller, want, pr.Top)
		}
		if truth := heavy[want]; got.Denied < truth || got.Denied-got.Overcount > truth {
			t.Errorf("%s: denied %d (overcount %d), truth %d", want, got.Denied, got.Overcount, truth)
		}
	}
}

func TestAllowedCallersNeverDisplaceDeniedOnes(t *testing.T) {
	r := New(withDefaults(Options{Size: 2, Now: newClock().Now}))
	p := r.tally("p", false)
	record(p, "d1", 1, true)
	record(p, "d2", 1, true)
	for i := range 100 {
		record(p, "ok-"+strconv.Itoa(i), 1, false)
	}
	top := r.Snapshot(0).Policies[0].Top
	if len(top) != 2 || top[0].Overcount != 0 || top[1].Overcount != 0 {
		t.Fatalf("allowed callers displaced denied ones: %+v", top)
	}
	// A denied newcomer displaces the least denied, inheriting its count.
	record(p, "d1", 1, true)
	record(p, "d3", 1, true)
	top = r.Snapshot(0).Policies[0].Top
	want := []Caller{{Caller: "d1", Key: "header:x-api-key", Denied: 2}, {Caller: "d3", Key: "header:x-api-key", Denied: 2, Overcount: 1}}
	if !reflect.DeepEqual(top, want) {
		t.Fatalf("got %+v, want %+v", top, want)
	}
}

// TestTheIndexFindsEveryEntryThroughChurn checks the open-addressing index
// against the entries after many displacements in a small, crowded table.
func TestTheIndexFindsEveryEntryThroughChurn(t *testing.T) {
	s := newSketch(5)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 50_000 {
		id := strconv.Itoa(rng.IntN(40))
		s.add(uint64(rng.IntN(3))<<60|uint64(len(id)), id, Label{"k", id}, rng.IntN(4) > 0) // few distinct hashes: long probe runs
		if i%97 != 0 {
			continue
		}
		used := 0
		for _, e := range s.index {
			if e != 0 {
				used++
			}
		}
		if used != s.n {
			t.Fatalf("step %d: %d index slots in use for %d entries", i, used, s.n)
		}
		for j := range s.entries[:s.n] {
			en := &s.entries[j]
			if slot, ok := s.find(en.hash, en.id); !ok || int(s.index[slot]) != j+1 {
				t.Fatalf("step %d: entry %d (%s) not found through the index", i, j, en.id)
			}
		}
	}
}

func TestMergeAddsReplicasCounts(t *testing.T) {
	a := Report{WindowSeconds: 60, Policies: []PolicyReport{
		{Name: "keys", Denied: 5, Top: []Caller{{Caller: "x", Key: "header:x-api-key", Denied: 5, Allowed: 1}}},
	}, Shadow: []PolicyReport{}}
	b := Report{WindowSeconds: 60, Policies: []PolicyReport{
		{Name: "ips", Denied: 9, Top: []Caller{{Caller: "192.0.2.1", Key: "client_ip", Denied: 9}}},
		{Name: "keys", Denied: 7, Top: []Caller{
			{Caller: "y", Key: "header:x-api-key", Denied: 4, Allowed: 2},
			{Caller: "x", Key: "header:x-api-key", Denied: 3, Allowed: 3, Overcount: 1},
		}},
	}, Shadow: []PolicyReport{{Name: "trial", Denied: 2, Top: []Caller{}}}}
	a.Merge(b)
	want := Report{WindowSeconds: 60, Policies: []PolicyReport{
		{Name: "keys", Denied: 12, Top: []Caller{
			{Caller: "x", Key: "header:x-api-key", Denied: 8, Allowed: 4, Overcount: 1},
			{Caller: "y", Key: "header:x-api-key", Denied: 4, Allowed: 2},
		}},
		{Name: "ips", Denied: 9, Top: []Caller{{Caller: "192.0.2.1", Key: "client_ip", Denied: 9}}},
	}, Shadow: []PolicyReport{{Name: "trial", Denied: 2, Top: []Caller{}}}}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("got  %+v\nwant %+v", a, want)
	}
}

func TestConcurrentRecordsLoseNothing(t *testing.T) {
	r := New(withDefaults(Options{Now: newClock().Now}))
	p := r.tally("p", false)
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "w" + strconv.Itoa(w)
			for i := range each {
				p.Record(r.now(), id, Label{"k", id}, i%2 == 0)
			}
		}()
	}
	wg.Wait()
	pr := r.Snapshot(0).Policies[0]
	if pr.Denied != workers*each/2 || len(pr.Top) != workers {
		t.Fatalf("%+v", pr)
	}
	for _, c := range pr.Top {
		if c.Denied != each/2 || c.Allowed != each/2 {
			t.Errorf("%+v, want %d each", c, each/2)
		}
	}
}

func TestLongLabelsAreCut(t *testing.T) {
	r := New(withDefaults(Options{Now: newClock().Now}))
	long := "é" + string(make([]byte, 300))
	r.tally("p", false).Record(r.now(), "id", Label{"context:tenant", long}, true)
	got := r.Snapshot(0).Policies[0].Top[0].Caller
	if len(got) > MaxLabelBytes || got[len(got)-len("…"):] != "…" {
		t.Fatalf("label of %d bytes kept as %d bytes: %q", len(long), len(got), got)
	}
}

// TestMemoryStaysFixedUnderAFloodOfDistinctCallers: a million distinct
// callers, denied and allowed, across the window's intervals, leave the
// recorder holding no more live heap than MemoryBytes states, and no more
// after the flood than halfway through it.
func TestMemoryStaysFixedUnderAFloodOfDistinctCallers(t *testing.T) {
	if unsafe.Sizeof(sketch{}) != sketchBytes || unsafe.Sizeof(entry{}) != entryBytes || unsafe.Sizeof(Tally{}) != policyBytes {
		t.Fatalf("sizes changed: sketch %d, entry %d, Tally %d: update MemoryBytes' constants and docs/limited.md",
			unsafe.Sizeof(sketch{}), unsafe.Sizeof(entry{}), unsafe.Sizeof(Tally{}))
	}
	const policies = 4
	c := newClock()
	o := withDefaults(Options{Now: c.Now})
	live := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := live()
	r := New(o)
	ps := make([]*Tally, policies)
	for i := range ps {
		ps[i] = r.tally("p"+strconv.Itoa(i), i%2 == 1)
	}
	flood := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("caller-%022d", i) // as long as a bucket identity
			ps[i%policies].Record(c.Now(), id, Label{"header:x-api-key", id}, i%3 != 0)
			if i%50_000 == 0 {
				c.Advance(7 * time.Second) // through every interval of the window, and around it
			}
		}
	}
	flood(0, 500_000)
	half := live() - before
	flood(500_000, 1_000_000)
	full := live() - before
	bound := policies * MemoryBytes(o)
	t.Logf("recorder's live heap: %d KiB halfway, %d KiB after 1,000,000 callers; bound %d KiB (%d KiB a policy)",
		half>>10, full>>10, bound>>10, MemoryBytes(o)>>10)
	if full > bound {
		t.Errorf("live heap %d bytes after the flood, above the stated bound %d", full, bound)
	}
	if full > half+half/4 {
		t.Errorf("live heap grew from %d to %d bytes over the flood's second half", half, full)
	}
	runtime.KeepAlive(r)
}

// BenchmarkRecord is one denial recorded, from every CPU at once (run with
// -cpu=2 to contend on the policy's lock): the same caller each time (an
// over-limit flood), 64 callers (as many as a sketch follows) and 4096
// (every record displaces the least-denied caller).
func BenchmarkRecord(b *testing.B) {
	for _, callers := range []int{1, 64, 4096} {
		b.Run(strconv.Itoa(callers)+"-callers", func(b *testing.B) {
			p := New(withDefaults(Options{})).tally("p", false)
			ids := make([]string, callers)
			labels := make([]Label, callers)
			for i := range ids {
				ids[i] = fmt.Sprintf("%022d", i)
				labels[i] = Label{"header:x-api-key", ids[i]}
			}
			now := time.Now()
			var worker atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(worker.Add(1)) * 101
				for pb.Next() {
					p.Record(now, ids[i%len(ids)], &labels[i%len(ids)], true)
					i++
				}
			})
		})
	}
}
