package txn

import (
	"math/rand/v2"
	"testing"
)

// The index against a map, over puts and removals whose keys share few
// hashes and homes, so that clusters form, wrap around the table's end and
// close their gaps: every key is found with its latest id, and nothing
// else is.
func TestIndexAgainstMap(t *testing.T) {
	for _, hashes := range []int{3, 40, 5000} {
		rng := rand.New(rand.NewPCG(1, uint64(hashes)))
		var ix index
		keyOf := map[uint32]int{}  // id → key
		latest := map[int]uint32{} // key → id, what the index must give
		hashOf := func(key int) uint64 {
			// Few distinct high halves: the tags and homes collide.
			return uint64(key%hashes)<<32 | uint64(key)
		}
		var live []uint32            // ids in the order they came, as records end
		next := uint32(1<<32 - 1000) // ids wrap past 2^32
		for step := range 20000 {
			if len(live) > 0 && (rng.IntN(2) == 0 || len(live) > 3000) {
				id := live[0]
				live = live[1:]
				key := keyOf[id]
				ix.remove(hashOf(key), id)
				delete(keyOf, id)
				if latest[key] == id {
					delete(latest, key)
				}
			} else {
				key := rng.IntN(4000)
				id := next
				next++
				keyOf[id] = key
				ix.put(hashOf(key), id, func(other uint32) bool { return keyOf[other] == key })
				latest[key] = id
				live = append(live, id)
			}
			if step%97 != 0 {
				continue
			}
			if ix.n != len(latest) {
				t.Fatalf("hashes %d, step %d: %d entries, want %d", hashes, step, ix.n, len(latest))
			}
			for key := range 4000 {
				id, ok := ix.find(hashOf(key), func(id uint32) bool { return keyOf[id] == key })
				want, wantOK := latest[key]
				if ok != wantOK || id != want {
					t.Fatalf("hashes %d, step %d: key %d found %d, %v; want %d, %v", hashes, step, key, id, ok, want, wantOK)
				}
			}
		}
	}
}

// An entry another took the place of is not removed by the removal of its
// id, which finds nothing: the later entry stays.
func TestIndexRemoveReplaced(t *testing.T) {
	var ix index
	h := uint64(7) << 32
	same := func(uint32) bool { return true }
	ix.put(h, 1, same)
	ix.put(h, 2, same)
	ix.remove(h, 1)
	if id, ok := ix.find(h, same); !ok || id != 2 || ix.n != 1 {
		t.Errorf("find = %d, %v with %d entries; want 2, true with 1", id, ok, ix.n)
	}
	ix.remove(h, 2)
	if _, ok := ix.find(h, same); ok || ix.n != 0 {
		t.Errorf("found an entry after its removal (%d entries)", ix.n)
	}
}
