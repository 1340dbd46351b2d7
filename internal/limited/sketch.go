package limited

// sketch is one interval's heavy hitters for one policy: at most len(entries)
// callers, chosen by space-saving (Metwally, Agrawal, El Abbadi: "Efficient
// computation of frequent and top-k elements in data streams", 2005) on
// their denials. Its memory is allocated once, when the interval first
// records, and never grows: the callers live in entries, found through an
// open-addressing index of fixed size (a Go map would keep tombstones under
// churn and could grow).
//
// The invariant: a tracked caller's denied count is at least its true count
// in the interval and at most that plus over; a caller never tracked, or
// evicted, was denied at most as often as the least-denied tracked caller.
// While the interval has seen no more distinct callers than it has entries,
// every count is exact (over is 0).
type sketch struct {
	epoch           int64 // the interval's number: time / interval length
	denied, allowed int64 // every decision of the interval, tracked or not
	n               int   // entries in use
	entries         []entry
	index           []int32 // entry position + 1; 0 is an empty slot
	mask            uint64
}

// entry is one tracked caller.
type entry struct {
	hash                  uint64
	id                    string // what the caller is told apart by (a bucket identity)
	key, caller           string // the key source and the label shown
	denied, allowed, over int64
}

func newSketch(size int) *sketch {
	slots := 1
	for slots < 2*size {
		slots <<= 1
	}
	return &sketch{entries: make([]entry, size), index: make([]int32, slots), mask: uint64(slots - 1)}
}

// reset empties s for interval epoch, keeping its memory.
func (s *sketch) reset(epoch int64) {
	clear(s.entries[:s.n])
	clear(s.index)
	s.epoch, s.denied, s.allowed, s.n = epoch, 0, 0, 0
}

// find returns the position in index of id's slot, and whether id is there;
// when it is not, the position is the empty slot where it would go.
func (s *sketch) find(h uint64, id string) (slot uint64, ok bool) {
	for i := h & s.mask; ; i = (i + 1) & s.mask {
		e := s.index[i]
		if e == 0 {
			return i, false
		}
		if en := &s.entries[e-1]; en.hash == h && en.id == id {
			return i, true
		}
	}
}

// add counts one decision for the caller id (hash h). A caller not yet
// tracked takes a free entry; once every entry is in use, a denied caller
// takes the least-denied one's place and inherits its count (space-saving),
// while an allowed caller is not tracked: allowed counts are kept for the
// callers the sketch follows, never at a denied caller's expense.
func (s *sketch) add(h uint64, id string, name Namer, denied bool) {
	if denied {
		s.addN(h, id, name, 0, 1)
	} else {
		s.addN(h, id, name, 1, 0)
	}
}

// addN counts allowed and denied decisions for the caller id at once, as
// add counts one: with any denied, the caller may displace another.
func (s *sketch) addN(h uint64, id string, name Namer, allowed, denied int64) {
	s.denied += denied
	s.allowed += allowed
	slot, ok := s.find(h, id)
	if ok {
		en := &s.entries[s.index[slot]-1]
		en.denied += denied
		en.allowed += allowed
		return
	}
	var at int
	var over int64
	switch {
	case s.n < len(s.entries):
		at = s.n
		s.n++
	case denied == 0:
		return
	default:
		at = s.leastDenied()
		over = s.entries[at].denied
		s.unindex(at)
		slot, _ = s.find(h, id) // the removal may have moved slots
	}
	key, caller := name.Name()
	en := &s.entries[at]
	*en = entry{hash: h, id: id, key: clip(key), caller: clip(caller), over: over, denied: over + denied, allowed: allowed}
	s.index[slot] = int32(at + 1)
}

// leastDenied is the position of the entry with the fewest denials (of
// those, the fewest allowed): the one space-saving replaces. A scan: it
// runs only when a caller not tracked is denied while every entry is in
// use, and the entries are few.
func (s *sketch) leastDenied() int {
	m := 0
	for i := 1; i < s.n; i++ {
		a, b := &s.entries[i], &s.entries[m]
		if a.denied < b.denied || a.denied == b.denied && a.allowed < b.allowed {
			m = i
		}
	}
	return m
}

// unindex removes entry at from the index (its entry is then overwritten),
// shifting back the slots after it so every lookup still finds its entry
// without crossing an empty slot (deletion in linear probing, without
// tombstones).
func (s *sketch) unindex(at int) {
	i, _ := s.find(s.entries[at].hash, s.entries[at].id)
	for j := (i + 1) & s.mask; ; j = (j + 1) & s.mask {
		e := s.index[j]
		if e == 0 {
			break
		}
		home := s.entries[e-1].hash & s.mask
		// The entry at j may move to i if i lies on its probe path, from
		// home to j (cyclically).
		if (j-home)&s.mask >= (j-i)&s.mask {
			s.index[i] = e
			i = j
		}
	}
	s.index[i] = 0
}

// MaxLabelBytes bounds a caller's key and label as kept: a long context
// value or metadata string is cut, so each entry's memory is bounded.
const MaxLabelBytes = 96

// clip cuts s to MaxLabelBytes, at a UTF-8 boundary, marking the cut.
func clip(s string) string {
	if len(s) <= MaxLabelBytes {
		return s
	}
	cut := MaxLabelBytes - len("…")
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
