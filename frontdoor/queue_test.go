package frontdoor

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/pool"
)

// queue is an in-process worker queue: the door's frames wait in it,
// numbered from 1 as pool numbers them, until the test takes them as a
// worker would. The door is what these tests are about; a Target with no
// process behind it lets them hold a frame in the queue as long as they
// like and see exactly what each worker was handed.
type queue struct {
	mu     sync.Mutex
	frames [][]byte
	sent   uint64 // frames queued so far: the last one's number
	taken  uint64 // frames a worker took
	ended  bool
}

var errEnded = errors.New("worker ended")

func (q *queue) SendSeq(frame []byte, now int64) (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		return 0, errEnded
	}
	if len(q.frames) >= pool.QueueCapacity {
		return 0, pool.ErrQueueFull
	}
	q.frames = append(q.frames, append([]byte(nil), frame...))
	q.sent++
	return q.sent, nil
}

func (q *queue) Waiting(seq uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.ended && q.taken < seq
}

// len is how many frames wait.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.frames)
}

// received is how many frames the worker was handed, taken or not.
func (q *queue) received() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sent
}

// take takes every waiting frame, as a worker reading its queue does.
func (q *queue) take() [][]byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.frames
	q.frames = nil
	q.taken = q.sent
	return out
}

// workers are a group's queues.
type workers []*queue

func newWorkers(n int) workers {
	ws := make(workers, n)
	for i := range ws {
		ws[i] = &queue{}
	}
	return ws
}

// pick is the least loaded worker, as pool's Group.Pick picks.
func (ws workers) pick(*sipscan.Msg, bool, int64) Target {
	var best *queue
	for _, q := range ws {
		if !q.isEnded() && (best == nil || q.len() < best.len()) {
			best = q
		}
	}
	if best == nil {
		return nil
	}
	return best
}

func (q *queue) isEnded() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ended
}

// received is how many frames the group was handed.
func (ws workers) received() uint64 {
	var n uint64
	for _, q := range ws {
		n += q.received()
	}
	return n
}

// take empties every queue.
func (ws workers) take() {
	for _, q := range ws {
		q.take()
	}
}

// A worker that ends between the door's pick and its send (a draining one
// that has just drained) costs the message nothing: the door picks again.
// Only when no other worker is left is the message dropped, and counted as
// having had no worker, not as a full queue.
func TestWorkerEndedAtThePick(t *testing.T) {
	t.Parallel()
	ws := newWorkers(2)
	ws[0].ended = true
	picks := 0
	// The first pick still names the ended worker, as a pick made just
	// before the end frame went out does.
	pick := func(m *sipscan.Msg, newSession bool, now int64) Target {
		picks++
		if picks == 1 {
			return ws[0]
		}
		return ws.pick(m, newSession, now)
	}
	d := New(0, pick, nil, nil)
	now := time.Now().UnixNano()
	d.Handle(frame(options("sip:bob@example.com", "t1")), src, now)
	if ws[1].received() != 1 {
		t.Fatalf("want the message on the worker still running, have %d there", ws[1].received())
	}
	if n := d.Stats.DroppedNoWorker.Load() + d.Stats.DroppedQueueFull.Load(); n != 0 {
		t.Fatalf("want nothing dropped, have %d", n)
	}
	ws[1].ended = true
	picks = 0
	d.Handle(frame(options("sip:bob@example.com", "t2")), src, now+1)
	if d.Stats.DroppedNoWorker.Load() != 1 || d.Stats.DroppedQueueFull.Load() != 0 {
		t.Fatalf("want the message dropped for want of a worker, have no_worker=%d queue_full=%d",
			d.Stats.DroppedNoWorker.Load(), d.Stats.DroppedQueueFull.Load())
	}
}
