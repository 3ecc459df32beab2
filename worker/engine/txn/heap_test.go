package txn

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

type fakeTimed struct {
	d  Deadline
	id int
}

func (f *fakeTimed) Deadline() *Deadline { return &f.d }

// checkHeap fails unless every entry knows its place and no parent is due
// after its children.
func checkHeap(t *testing.T, h Heap) {
	t.Helper()
	for i, x := range h {
		if x.d.pos != i+1 || x.t.Deadline() != x.d || !x.at.Equal(x.d.At) {
			t.Fatalf("entry %d thinks it is at %d, or is not its transaction's deadline", i, x.d.pos-1)
		}
		if i > 0 && h.less(i, (i-1)/2) {
			t.Fatalf("entry %d is due before its parent", i)
		}
	}
}

// The heap gives back every live deadline once, earliest first, including
// equal deadlines; a moved deadline counts once, at its new time, and a
// removed one not at all, and nothing stays behind.
func TestTimerHeapOrder(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_000_000, 0)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 64, 1000} {
		var h Heap
		var items []*fakeTimed
		want := map[int]time.Duration{}
		for i := 0; i < n; i++ {
			d := time.Duration(r.IntN(50)) * time.Millisecond
			f := &fakeTimed{id: i}
			items = append(items, f)
			h.Set(f, base.Add(d))
			want[i] = d
			if i%5 == 4 { // moved, earlier or later
				d = time.Duration(r.IntN(100)) * time.Millisecond
				h.Set(f, base.Add(d))
				want[i] = d
			}
			checkHeap(t, h)
		}
		for i := 0; i < n; i += 7 { // finished before its time
			h.Remove(items[i])
			h.Remove(items[i]) // twice is harmless
			delete(want, i)
			checkHeap(t, h)
		}
		var wantOrder []time.Duration
		for _, d := range want {
			wantOrder = append(wantOrder, d)
		}
		slices.Sort(wantOrder)
		var have []time.Duration
		for {
			x, ok := h.Due(base.Add(time.Hour))
			if !ok {
				break
			}
			f := x.(*fakeTimed)
			if f.d.Scheduled() {
				t.Fatalf("%d deadlines: a popped entry still thinks it is scheduled", n)
			}
			have = append(have, f.d.At.Sub(base))
			checkHeap(t, h)
		}
		if !slices.Equal(have, wantOrder) {
			t.Fatalf("%d deadlines: want %v, have %v", n, wantOrder, have)
		}
		if len(h) != 0 || cap(h) > 0 && h[:cap(h)][0].t != nil {
			t.Fatalf("%d deadlines: %d entries left", n, len(h))
		}
	}
	// Nothing before its time.
	var h Heap
	h.Set(&fakeTimed{}, base.Add(time.Second))
	if _, ok := h.Due(base); ok {
		t.Fatal("want no deadline due a second early")
	}
}

// Next is the earliest deadline.
func TestHeapNext(t *testing.T) {
	t.Parallel()
	var h Heap
	if _, ok := h.Next(); ok {
		t.Fatal("an empty heap: want no deadline")
	}
	base := time.Unix(1_000_000, 0)
	h.Set(&fakeTimed{}, base.Add(2*time.Second))
	h.Set(&fakeTimed{}, base.Add(time.Second))
	if at, ok := h.Next(); !ok || !at.Equal(base.Add(time.Second)) {
		t.Fatalf("want %v, have %v %v", base.Add(time.Second), at, ok)
	}
}

// txSized is a deadline in an object the size of a transaction, so that
// the deadlines lie as far apart as a worker's do.
type txSized struct {
	d Deadline
	_ [1500]byte
}

func (x *txSized) Deadline() *Deadline { return &x.d }

// BenchmarkHeap is a transaction's deadlines in a worker holding 20,000
// pending ones: scheduled, moved once (a retransmission's next time),
// then removed when it ends.
func BenchmarkHeap(b *testing.B) {
	const pending = 20000
	base := time.Unix(1_000_000, 0)
	r := rand.New(rand.NewPCG(1, 2))
	items := make([]*txSized, pending)
	var h Heap
	for i := range items {
		items[i] = new(txSized)
		h.Set(items[i], base.Add(time.Duration(r.IntN(32_000))*time.Millisecond))
	}
	i := 0
	for b.Loop() {
		f := items[i%pending]
		h.Remove(f)
		h.Set(f, base.Add(time.Duration(r.IntN(32_000))*time.Millisecond))
		h.Set(f, base.Add(time.Duration(r.IntN(32_000))*time.Millisecond))
		i++
	}
}
