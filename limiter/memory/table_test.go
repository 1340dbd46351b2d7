package memory

import (
	"math/rand/v2"
	"testing"
)

// TestTableAgreesWithAMap drives the open-addressing table and a Go map
// through the same random inserts, updates, removals and sweeps, with keys
// chosen to collide in the low bits so probe runs are long and wrap around.
func TestTableAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tb := newTable()
	ref := map[key]bucket{}
	randKey := func() key { return key(1 + rng.Uint64N(64)<<20 | rng.Uint64N(4)) }
	for step := 0; step < 200_000; step++ {
		k := randKey()
		switch op := rng.IntN(10); {
		case op < 6:
			b := bucket{missing: rng.Int64N(100), full: int64(step) + rng.Int64N(1000)}
			if i, ok := tb.find(k); ok {
				tb.slots[i].b = b
			} else {
				tb.insert(i, k, b)
			}
			ref[k] = b
		case op < 9:
			if i, ok := tb.find(k); ok {
				tb.remove(i)
			}
			delete(ref, k)
		default:
			got := tb.sweep(int64(step))
			want := 0
			for rk, b := range ref {
				if b.full <= int64(step) {
					delete(ref, rk)
					want++
				}
			}
			if got != want {
				t.Fatalf("step %d: sweep removed %d, want %d", step, got, want)
			}
		}
		if tb.n != len(ref) {
			t.Fatalf("step %d: table holds %d, map %d", step, tb.n, len(ref))
		}
	}
	for k, b := range ref {
		if i, ok := tb.find(k); !ok || tb.slots[i].b != b {
			t.Fatalf("key %x: table has %v (found %v), map %v", k, tb.slots[i].b, ok, b)
		}
	}
}

func TestEvictionKeepsEachShardUnderItsCap(t *testing.T) {
	s := New(Options{MaxBuckets: 64, Shards: 4})
	sh := &s.shards[0]
	for i := 0; i < 1000; i++ {
		s.insert(sh, key(i+1), bucket{full: int64(1_000_000 + i)}, 0)
		if sh.t.n > s.shardCap {
			t.Fatalf("after %d inserts the shard holds %d, cap %d", i+1, sh.t.n, s.shardCap)
		}
	}
	if sh.t.n != s.shardCap {
		t.Errorf("shard holds %d, want it full at %d", sh.t.n, s.shardCap)
	}
}

// TestMaxTableBytesBoundsAFlood: however many distinct callers arrive, the
// tables never hold more than MaxTableBytes, and a flood fills them to the
// size it predicts (it is the bound, not a guess).
func TestMaxTableBytesBoundsAFlood(t *testing.T) {
	for _, o := range []Options{{MaxBuckets: 1000, Shards: 16}, {MaxBuckets: 1 << 12, Shards: 8}, {MaxBuckets: 3000, Shards: 4}} {
		s := New(o)
		bound, peak := MaxTableBytes(o), int64(0)
		for i := range 20 * o.MaxBuckets {
			k := s.key("flood", string(rune('a'+i%26))+string(rune(i)))
			sh := &s.shards[s.shard(k)]
			if _, ok := sh.t.find(k); ok {
				continue
			}
			s.insert(sh, k, bucket{full: 1 << 40}, 0) // never full: nothing is reclaimed
			held := int64(0)
			for j := range s.shards {
				held += int64(len(s.shards[j].t.slots)) * slotBytes
			}
			peak = max(peak, held)
		}
		if peak > bound {
			t.Errorf("%+v: tables reached %d bytes, above MaxTableBytes %d", o, peak, bound)
		}
		if grow := bound - int64(len(s.shards[0].t.slots))/2*slotBytes; peak != grow {
			t.Errorf("%+v: a flood filled the tables to %d bytes; MaxTableBytes %d predicts %d", o, peak, bound, grow)
		}
	}
}

// TestEvictionTakesFromTheFamilyHoldingTheMost: a shard at its cap holds 8
// buckets of family 0 and 4 of family 1. Newcomers of either family displace
// family 0's buckets, soonest full first, until the two hold equal shares;
// from then on a newcomer displaces its own family's.
func TestEvictionTakesFromTheFamilyHoldingTheMost(t *testing.T) {
	s := New(Options{MaxBuckets: 12, Shards: 1})
	sh := &s.shards[0]
	next := key(1)
	add := func(fam uint32, full int64) key {
		k := next
		next++
		s.insert(sh, k, bucket{full: full, fam: fam}, 0)
		return k
	}
	zero := make([]key, 8)
	for i := range zero {
		zero[i] = add(0, int64(1000-i)) // the last added is full soonest
	}
	for i := 0; i < 4; i++ {
		add(1, 5) // fuller than any of family 0's: not what decides
	}
	held := func(k key) bool { _, ok := sh.t.find(k); return ok }
	add(1, 2000)
	if held(zero[7]) || !held(zero[6]) {
		t.Fatalf("a newcomer of family 1 did not displace family 0's soonest-full bucket: held %v", sh.t.held)
	}
	add(0, 2000)
	if held(zero[6]) || !held(zero[5]) {
		t.Fatalf("a newcomer of family 0 did not displace family 0's soonest-full bucket: held %v", sh.t.held)
	}
	add(1, 2000)
	if sh.t.held[0] != 6 || sh.t.held[1] != 6 {
		t.Fatalf("families hold %v, want 6 and 6", sh.t.held)
	}
	for i := 0; i < 100; i++ {
		add(1, 2000) // a tie: the newcomer's own family gives up one
	}
	if sh.t.held[0] != 6 || sh.t.held[1] != 6 {
		t.Errorf("after 100 more of family 1, families hold %v: family 1's flood took family 0's room", sh.t.held)
	}
	if sh.t.n != s.shardCap {
		t.Errorf("shard holds %d, want %d", sh.t.n, s.shardCap)
	}
}

func TestSlotsStay32Bytes(t *testing.T) {
	if slotBytes != 32 {
		t.Errorf("a table slot is %d bytes, want 32 (two to a cache line)", slotBytes)
	}
}
