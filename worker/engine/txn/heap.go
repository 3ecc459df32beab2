package txn

import "time"

// Timed is a transaction with at most one pending deadline.
type Timed interface {
	Deadline() *Deadline
}

// Deadline is a transaction's pending deadline and its place in the heap.
// Knowing its place lets a moved deadline be fixed in place and a finished
// transaction's be removed. Left in the heap until due, a replaced deadline
// kept its transaction, request and replies alive: an INVITE answered 180
// then 200 stayed reachable for fr_inv (120 s) after its call had ended,
// about 5 KB a call.
type Deadline struct {
	At  time.Time
	pos int // index in the heap plus one; 0 when not scheduled
}

// Scheduled says whether the deadline is in a heap.
func (d *Deadline) Scheduled() bool { return d.pos > 0 }

// Heap orders pending deadlines: a binary heap of its own rather than
// container/heap's, whose interface boxes an entry per push. A worker has
// one, driven from its loop: no runtime timer per transaction. Each entry
// holds its time, so that a comparison reads the heap's own array rather
// than calling into two transactions spread over the Go heap (the calls
// of Deadline were 2 % of a TLS call's samples,
// bench/results/tls-profile-sipvisor-8684014.txt).
type Heap []entry

type entry struct {
	at time.Time
	d  *Deadline
	t  Timed
}

func (h Heap) less(i, j int) bool { return h[i].at.Before(h[j].at) }

func (h Heap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].d.pos = i + 1
	h[j].d.pos = j + 1
}

func (h Heap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h Heap) down(i int) {
	n := len(h)
	for {
		l, m := 2*i+1, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r := l + 1; r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}

// Set schedules t at at, moving its deadline if it has one.
func (h *Heap) Set(t Timed, at time.Time) {
	d := t.Deadline()
	d.At = at
	if d.pos > 0 {
		i := d.pos - 1
		(*h)[i].at = at
		h.up(i)
		h.down(d.pos - 1)
		return
	}
	*h = append(*h, entry{at: at, d: d, t: t})
	d.pos = len(*h)
	h.up(len(*h) - 1)
}

// Remove takes t's deadline out of the heap, if it has one.
func (h *Heap) Remove(t Timed) {
	d := t.Deadline()
	if d.pos == 0 {
		return
	}
	i, q := d.pos-1, *h
	n := len(q) - 1
	if i != n {
		q.swap(i, n)
	}
	q[n] = entry{} // let the transaction go
	q = q[:n]
	d.pos = 0
	if i < n {
		q.up(i)
		q.down(q[i].d.pos - 1)
	}
	*h = q
}

// Due removes and returns the earliest transaction whose deadline has come.
func (h *Heap) Due(now time.Time) (Timed, bool) {
	if len(*h) == 0 || (*h)[0].at.After(now) {
		return nil, false
	}
	t := (*h)[0].t
	h.Remove(t)
	return t, true
}

// Next is the earliest pending deadline.
func (h Heap) Next() (time.Time, bool) {
	if len(h) == 0 {
		return time.Time{}, false
	}
	return h[0].at, true
}
