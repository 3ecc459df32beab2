package txn

// index finds a settled record by a hash of one of its keys: an open-
// addressing table of 8-byte slots, probed linearly from the slot the hash
// names, each slot the hash's high half (its tag) and the low half of the
// record's sequence number. A lookup costs the hash, mostly one cache line
// of slots and the record it names, whose key the caller checks: Go's
// maps, three a table, took 4.1 % of a worker's samples under perf at 3,000
// calls a second (commit a794bd3; 2.7 % with this index, c669e59), their
// lookups, their writes, and the deletes of each key as its record ended.
//
// A slot's tag gives back where the slot belongs, so that the table grows
// and a removal closes its gap (backward shift) without hashing any key
// again. The tag's top bit is always set: a slot of 0 is empty.
type index struct {
	slots []uint64
	n     int
}

const tagBit = 1 << 31

func tagOf(h uint64) uint32 { return uint32(h>>32) | tagBit }

func slotOf(h uint64, id uint32) uint64 { return uint64(tagOf(h))<<32 | uint64(id) }

// home is where slot v belongs in a table of mask+1 slots, at most 2^31.
func home(v uint64, mask uint32) uint32 { return uint32(v>>32) & mask }

// find is the id of the entry of hash h that match accepts.
func (ix *index) find(h uint64, match func(id uint32) bool) (uint32, bool) {
	if ix.n == 0 {
		return 0, false
	}
	mask := uint32(len(ix.slots) - 1)
	tag := tagOf(h)
	for i := tag & mask; ; i = (i + 1) & mask {
		v := ix.slots[i]
		if v == 0 {
			return 0, false
		}
		if uint32(v>>32) == tag && match(uint32(v)) {
			return uint32(v), true
		}
	}
}

// put enters id under hash h, in place of the entry match accepts if any.
func (ix *index) put(h uint64, id uint32, match func(id uint32) bool) {
	if 2*(ix.n+1) > len(ix.slots) {
		ix.grow()
	}
	mask := uint32(len(ix.slots) - 1)
	tag := tagOf(h)
	for i := tag & mask; ; i = (i + 1) & mask {
		v := ix.slots[i]
		if v == 0 {
			ix.slots[i] = slotOf(h, id)
			ix.n++
			return
		}
		if uint32(v>>32) == tag && match(uint32(v)) {
			ix.slots[i] = slotOf(h, id)
			return
		}
	}
}

// remove takes out the entry of hash h and id, if it is there: a later
// entry of the same key may have taken its place.
func (ix *index) remove(h uint64, id uint32) {
	if ix.n == 0 {
		return
	}
	mask := uint32(len(ix.slots) - 1)
	want := slotOf(h, id)
	i := tagOf(h) & mask
	for ; ix.slots[i] != want; i = (i + 1) & mask {
		if ix.slots[i] == 0 {
			return
		}
	}
	ix.n--
	// Every slot after the gap, up to the next empty one, is still found
	// from where it belongs: one that belongs at or before the gap moves
	// into it, and leaves a gap of its own.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		v := ix.slots[j]
		if v == 0 {
			break
		}
		if (j-home(v, mask))&mask >= (j-i)&mask {
			ix.slots[i] = v
			i = j
		}
	}
	ix.slots[i] = 0
}

// grow doubles the table.
func (ix *index) grow() {
	old := ix.slots
	ix.slots = make([]uint64, max(2*len(old), 64))
	mask := uint32(len(ix.slots) - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := home(v, mask)
		for ix.slots[i] != 0 {
			i = (i + 1) & mask
		}
		ix.slots[i] = v
	}
}
