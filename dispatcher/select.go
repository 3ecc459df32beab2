package dispatcher

import (
	"fmt"
	"sort"
)

// Alg is a selection algorithm, numbered as Kamailio's ds_select_dst
// numbers it.
type Alg int

// The algorithms there are.
const (
	AlgCallID     Alg = 0 // hash over the Call-ID: a call's requests all go to one destination
	AlgFrom       Alg = 1 // hash over the From URI (user@host): a caller sticks to one destination
	AlgTo         Alg = 2 // hash over the To URI (user@host): a callee sticks to one destination
	AlgRURI       Alg = 3 // hash over the Request-URI (user@host)
	AlgRoundRobin Alg = 4 // each destination in turn
	AlgRandom     Alg = 6 // a random destination
	AlgFirst      Alg = 8 // the first destination by priority; the others in turn as failover
	AlgWeight     Alg = 9 // in proportion to each destination's weight=N
)

var algNames = map[Alg]string{
	AlgCallID: "hash over Call-ID", AlgFrom: "hash over From URI", AlgTo: "hash over To URI",
	AlgRURI: "hash over Request-URI", AlgRoundRobin: "round-robin", AlgRandom: "random",
	AlgFirst: "first by priority", AlgWeight: "weight",
}

func (a Alg) String() string {
	if n, ok := algNames[a]; ok {
		return n
	}
	return fmt.Sprintf("algorithm %d", int(a))
}

// ParseAlg checks an algorithm's number.
func ParseAlg(n int64) (Alg, error) {
	if _, ok := algNames[Alg(n)]; ok {
		return Alg(n), nil
	}
	return 0, fmt.Errorf("ds_select_dst: no algorithm %d; want 0 (Call-ID hash), 1 (From URI hash), 2 (To URI hash), 3 (Request-URI hash), 4 (round-robin), 6 (random), 8 (first by priority) or 9 (weight)", n)
}

// Hashed reports whether the algorithm picks by a hash of the request, so
// that the caller must pass the key it hashes.
func (a Alg) Hashed() bool { return a <= AlgRURI }

// Table is the destination sets of one list.
type Table struct {
	Dests []Dest
	// sets holds each set's members (indices into Dests), highest
	// priority first, ties in list order.
	sets  map[int][]int
	byKey map[string]int
}

// NewTable indexes a list.
func NewTable(ds []Dest) *Table {
	t := &Table{Dests: ds, sets: map[int][]int{}, byKey: make(map[string]int, len(ds))}
	for i := range ds {
		t.sets[ds[i].Set] = append(t.sets[ds[i].Set], i)
		t.byKey[ds[i].Key()] = i
	}
	for _, m := range t.sets {
		sort.SliceStable(m, func(a, b int) bool { return ds[m[a]].Priority > ds[m[b]].Priority })
	}
	return t
}

// Members lists a set's destinations (indices into Dests) in the set's
// order; nil for a set the list lacks.
func (t *Table) Members(set int) []int { return t.sets[set] }

// Index finds a destination by its key (Dest.Key).
func (t *Table) Index(key string) (int, bool) {
	i, ok := t.byKey[key]
	return i, ok
}

// Selector chooses destinations over a Table. It keeps the round-robin and
// weight counters of one process; it is not safe for concurrent use.
type Selector struct {
	t    *Table
	rr   map[int]int
	cur  map[int][]int // smooth weighted round-robin: each member's current weight
	rand func(n int) int
}

// NewSelector makes a Selector; rand(n) draws from [0, n) for AlgRandom.
func NewSelector(t *Table, rand func(n int) int) *Selector {
	return &Selector{t: t, rr: map[int]int{}, cur: map[int][]int{}, rand: rand}
}

// Table is the table the Selector chooses over.
func (s *Selector) Table() *Table { return s.t }

// Select returns the usable destinations of set in the order to try them
// (indices into the table's Dests): the chosen one first, then the others
// in the set's order after it, as Kamailio fails over. key is what a
// hashed algorithm hashes. A hashed pick that is not usable moves to the
// next usable one, so a destination that goes down moves only its own
// share of the keys. Empty when no destination of the set is usable.
func (s *Selector) Select(set int, alg Alg, key string, usable func(i int) bool) []int {
	m := s.t.sets[set]
	n := len(m)
	if n == 0 {
		return nil
	}
	var p int
	switch alg {
	case AlgRoundRobin:
		p = s.rr[set] % n
		s.rr[set] = (p + 1) % n
	case AlgRandom:
		p = s.rand(n)
	case AlgWeight:
		p = s.weighted(set, m, usable)
	case AlgFirst:
		p = 0
	default:
		p = int(Hash(key) % uint32(n))
	}
	out := make([]int, 0, n)
	for k := 0; k < n; k++ {
		if i := m[(p+k)%n]; usable(i) {
			out = append(out, i)
		}
	}
	return out
}

// weighted is nginx's smooth weighted round-robin over the usable members
// with a weight: each gets its weight's share, interleaved rather than in
// runs. 0 when none has a weight.
func (s *Selector) weighted(set int, m []int, usable func(int) bool) int {
	cur := s.cur[set]
	if len(cur) != len(m) {
		cur = make([]int, len(m))
		s.cur[set] = cur
	}
	best, total := -1, 0
	for k, i := range m {
		w := s.t.Dests[i].Weight
		if w <= 0 || !usable(i) {
			continue
		}
		cur[k] += w
		total += w
		if best < 0 || cur[k] > cur[best] {
			best = k
		}
	}
	if best < 0 {
		return 0
	}
	cur[best] -= total
	return best
}

// Hash is the hash of the hashed algorithms (FNV-1a, 32 bits): stable
// across processes and restarts, so every worker sends a key to the same
// destination.
func Hash(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h
}
