package steering

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/pool"
)

// StreamOptions is what a Stream is made of.
type StreamOptions struct {
	// Workers are the group's workers (pool.Group.Workers).
	Workers   func() []*pool.Worker
	Admission *overload.Admission
	Gate      *overload.Gate
	// RetryAfter and RetryAfterDrawn are Options'.
	RetryAfter      func() int
	RetryAfterDrawn func() bool
	// HandedOver reports whether the supervisor has handed the node to
	// the next generation (Inputs.HandedOver); nil for never.
	HandedOver func() bool
	// Admitted, Refused and ProbesRefused are the group's counts of what
	// its workers decided about the new sessions they read, asked or not:
	// a refresh adds to them what the workers decided by themselves since
	// the last (OffDoorAdmitted, OffDoorRefused, DoorProbesRefused).
	Admitted      *atomic.Uint64
	Refused       *[overload.NumRefusals]atomic.Uint64
	ProbesRefused *atomic.Uint64
}

// Stream is the gate and quotas of a group whose workers read connections:
// admission in the worker that reads the request, without a round trip to
// the supervisor while the gate is open and the quota lasts (PlanStream).
type Stream struct {
	o StreamOptions

	mu    sync.Mutex
	state State
	// seen is, by worker ID, its page's counters as last added to the
	// group's counts, in streamWords order.
	seen map[int][]uint64
	// exited is when each worker that exited was last counted: a refresh
	// that read the workers before it exited must not count it anew.
	exited map[int]time.Time

	pacer
}

// streamWords are the words of a worker's page a refresh adds to the
// group's counts: admitted by kind, refused by reason, probes refused.
var streamWords = func() []int {
	var w []int
	for k := range Kinds {
		w = append(w, wire.OffDoorAdmitted+8*k)
	}
	for r := range int(overload.NumRefusals) {
		w = append(w, wire.OffDoorRefused+8*r)
	}
	return append(w, wire.OffDoorCounters+8*wire.DoorProbesRefused)
}()

// NewStream makes a group's stream admission. Until its first refresh
// the workers' gates are closed (a zero word), so they ask.
func NewStream(o StreamOptions) *Stream {
	s := &Stream{o: o, seen: map[int][]uint64{}, exited: map[int]time.Time{}}
	s.pacer.init()
	return s
}

// Refresh writes every worker's gate and quotas, and adds what the
// workers decided by themselves to the group's counts.
func (s *Stream) Refresh(now time.Time) {
	ws := s.o.Workers()
	in := Inputs{Now: now}
	ReadAdmission(&in, s.o.Admission, s.o.Gate, s.o.RetryAfter, s.o.RetryAfterDrawn)
	in.HandedOver = s.o.HandedOver != nil && s.o.HandedOver()
	s.found(in.Closed)

	s.mu.Lock()
	defer s.mu.Unlock()
	in.Workers = make([]Worker, len(ws))
	for i, w := range ws {
		in.Workers[i].ID = w.ID
		for k := range Kinds {
			in.Workers[i].Admitted[k] = w.Page().Load(wire.OffDoorAdmitted + 8*k)
		}
		s.count(w)
	}
	for id, at := range s.exited {
		if now.Sub(at) > time.Minute {
			delete(s.exited, id)
		}
	}
	in.Last = s.state
	a := PlanStream(in)
	for i, w := range ws {
		pg := w.Page()
		pg.Store(wire.OffQueueDelayLimit, a.QueueDelay)
		for k, q := range a.Quotas[i] {
			pg.Store(wire.OffQuota+8*k, q)
		}
		// The gate last: a worker that sees it open sees its quota.
		pg.Store(wire.OffGate, a.Gate)
	}
	s.state = a.Next
	s.pace.Store(int64(a.Pace))
}

// count adds to the group's counts what w decided since the last count,
// under s.mu.
func (s *Stream) count(w *pool.Worker) {
	if _, gone := s.exited[w.ID]; gone {
		return
	}
	seen := s.seen[w.ID]
	if seen == nil {
		seen = make([]uint64, len(streamWords))
		s.seen[w.ID] = seen
	}
	for i, off := range streamWords {
		v := w.Page().Load(off)
		d := v - seen[i]
		if d == 0 || v < seen[i] {
			continue
		}
		seen[i] = v
		switch {
		case i < Kinds:
			s.o.Admitted.Add(d)
		case i < Kinds+int(overload.NumRefusals):
			s.o.Refused[i-Kinds].Add(d)
		default:
			s.o.ProbesRefused.Add(d)
		}
	}
}

// Exited adds what an exited worker decided since the last refresh to the
// group's counts, and forgets it.
func (s *Stream) Exited(w *pool.Worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count(w)
	delete(s.seen, w.ID)
	s.exited[w.ID] = time.Now()
}

// Collect adds to the group's counts what the workers decided by
// themselves since the last refresh, for a reader of the counts who should
// not wait for the next.
func (s *Stream) Collect() {
	ws := s.o.Workers()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range ws {
		s.count(w)
	}
}
