package profile

// History is a fixed-size ring of per-cycle group loads. The cycle loop adds
// one sample per cycle, copies the samples into State.History with Values, and
// rescales the ring after a fork or a drain; none of these allocate.
type History struct {
	buf  []float64
	next int // index the next sample goes to
	n    int // samples held, up to len(buf)
}

// NewHistory returns a ring holding the last size samples (at least one).
func NewHistory(size int) *History {
	return &History{buf: make([]float64, max(size, 1))}
}

// HistoryLen is how many samples a group using p must keep: enough for both
// the up window and the down run, as OpenSIPS sizes its history map.
func (p Profile) HistoryLen() int {
	return max(p.Window, p.UpCycles, p.DownCycles, 1)
}

// Add records the load of the cycle just ended, dropping the oldest sample
// once the ring is full.
func (h *History) Add(load float64) {
	h.buf[h.next] = load
	h.next++
	if h.next == len(h.buf) {
		h.next = 0
	}
	if h.n < len(h.buf) {
		h.n++
	}
}

// Len is the number of samples held.
func (h *History) Len() int { return h.n }

// Values writes the samples, oldest first, into dst's backing array (growing
// it only when too small) and returns it, so one buffer serves every cycle.
func (h *History) Values(dst []float64) []float64 {
	dst = dst[:0]
	start := h.next - h.n
	if start < 0 {
		dst = append(dst, h.buf[start+len(h.buf):]...)
		start = 0
	}
	return append(dst, h.buf[start:h.next]...)
}

// Rescale converts every sample from a group of from workers to one of to
// workers; see the package function Rescale for why both ways.
func (h *History) Rescale(from, to int) {
	Rescale(h.buf[:], from, to)
}

// Reset forgets every sample, as after a reload that changes the profile.
func (h *History) Reset() {
	h.next, h.n = 0, 0
}
