package memory

import "unsafe"

// table is an open-addressing hash table from key to bucket: linear probing,
// 32-byte slots (key and state side by side, two to a cache line) and
// backward-shift deletion, so there are no tombstones and a lookup in a large
// table usually costs one cache miss. Go's map costs two (control word, then
// slot), which is most of a decision's time once a million callers are live.
// Key 0 marks an empty slot; Store.key never returns it.
type table struct {
	slots []slot
	n     int
	held  []int32 // buckets held, by family
}

type slot struct {
	k key
	b bucket
}

const minTable = 16

// slotBytes is the size of a slot.
const slotBytes = int64(unsafe.Sizeof(slot{}))

// MaxTableBytes is the most memory the bucket tables of a Store made with o
// hold: every shard's table at the size it grows to for its share of
// MaxBuckets, and one shard's previous table while it grows. It is what a
// flood of distinct callers costs, however long. It panics on options New
// refuses.
func MaxTableBytes(o Options) int64 {
	shards, shardCap := layout(o)
	slots := minTable
	for crowded(shardCap, slots) { // insert's growth rule at shardCap buckets
		slots *= 2
	}
	return int64(shards)*int64(slots)*slotBytes + int64(slots/2)*slotBytes
}

func newTable() table { return table{slots: make([]slot, minTable)} }

func (t *table) mask() int { return len(t.slots) - 1 }

// find returns the index of k, or of the empty slot where k would go.
func (t *table) find(k key) (int, bool) {
	m := t.mask()
	for i := int(uint64(k)) & m; ; i = (i + 1) & m {
		switch t.slots[i].k {
		case k:
			return i, true
		case 0:
			return i, false
		}
	}
}

// insert puts a new k at the empty slot i (from find), growing the table
// first when it is three-quarters full.
func (t *table) insert(i int, k key, b bucket) {
	if crowded(t.n+1, len(t.slots)) {
		t.grow()
		i, _ = t.find(k)
	}
	t.slots[i] = slot{k, b}
	t.n++
	for int(b.fam) >= len(t.held) {
		t.held = append(t.held, 0)
	}
	t.held[b.fam]++
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, 2*len(old))
	m := t.mask()
	for _, s := range old {
		if s.k == 0 {
			continue
		}
		i := int(uint64(s.k)) & m
		for t.slots[i].k != 0 {
			i = (i + 1) & m
		}
		t.slots[i] = s
	}
}

// remove empties slot i and shifts back the entries of its probe run that
// would otherwise become unreachable (Knuth's algorithm R).
func (t *table) remove(i int) {
	t.held[t.slots[i].b.fam]--
	m := t.mask()
	for j := i; ; {
		j = (j + 1) & m
		if t.slots[j].k == 0 {
			break
		}
		home := int(uint64(t.slots[j].k)) & m
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if (i <= j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

// sweep removes the buckets full at now and returns how many it removed.
func (t *table) sweep(now int64) int {
	removed := 0
	for i := 0; i < len(t.slots); {
		if s := &t.slots[i]; s.k != 0 && s.b.fullMicros() <= now {
			t.remove(i) // a later entry may have moved into i: look again
			removed++
			continue
		}
		i++
	}
	return removed
}

// evictSample is how many of the victim family's buckets evict compares.
const evictSample = 8

// evict makes room for a bucket of family fam. The family holding the most
// buckets gives one up (fam itself when it ties for the most), so one
// policy's flood of callers displaces its own buckets and never those of a
// policy holding fewer. Of that family's first evictSample buckets found
// probing from start, the one full soonest goes: forgetting it hands its
// caller the fewest tokens (a family's buckets share a limit, so soonest full
// is also least missing).
func (t *table) evict(start int, fam uint32) {
	victim := fam
	if int(fam) >= len(t.held) {
		victim = 0
	}
	for f, n := range t.held {
		if n > t.held[victim] {
			victim = uint32(f)
		}
	}
	if t.held[victim] == 0 {
		return
	}
	m := t.mask()
	pick, seen := -1, 0
	for i := start & m; seen < evictSample && seen < int(t.held[victim]); i = (i + 1) & m {
		s := &t.slots[i]
		if s.k == 0 || s.b.fam != victim {
			continue
		}
		seen++
		if pick < 0 || s.b.fullMicros() < t.slots[pick].b.fullMicros() {
			pick = i
		}
	}
	t.remove(pick)
}

// crowded reports whether n entries fill more than three quarters of slots.
func crowded(n, slots int) bool { return 4*n > 3*slots }
