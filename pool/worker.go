package pool

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/wire"
	"golang.org/x/sys/unix"
)

// Errors of Worker.Send.
var (
	// ErrQueueFull: the worker's queue (its data channel) has no room. The
	// frame is not delivered; UDP senders retransmit.
	ErrQueueFull = wire.ErrQueueFull
	// ErrEnded: the worker has been told its work is over.
	ErrEnded = errors.New("worker ended")
)

// Exit reasons, as metric labels.
const (
	ExitClean        = "clean"
	ExitCrash        = "crash"
	ExitKilled       = "killed"
	ExitReadyTimeout = "ready_timeout"
)

// Worker is the supervisor's handle on one worker process.
type Worker struct {
	ID      int
	Pid     int
	Started time.Time

	g     *Group
	p     *spawned
	state atomic.Int32 // State; written under g.mu

	// sendMu orders Send against End: a frame that passed the ended check is
	// written before the end frame, so nothing is written after it.
	sendMu  sync.RWMutex
	ended   bool
	sent    atomic.Uint64
	dropped atomic.Uint64

	// Written under g.mu.
	stale       bool    // Renew is replacing it: the first to drain
	renewedBy   *Worker // its replacement, once stale
	readyAt     time.Time
	killReason  string
	exitReason  string
	lastBusy    int64
	lastAt      int64
	load        float64
	lastHandled uint64
	lastEchoes  uint64
	lastDone    int64 // busy ns of finished frames at the last sample
	gcWin       gcWindow

	// gcShare is GCShare's percent plus 1, as float64 bits: 0 is none yet.
	gcShare atomic.Uint64

	// frameNs is what one queued frame cost the worker, busy time per frame
	// handled, over the last sample: with the queue's length, how long a
	// frame handed to it now will wait.
	frameNs atomic.Int64

	// Echo bookkeeping, per worker: sequence numbers of the last echo sent
	// and answered, and the send times of the last few.
	echoSent, echoDone atomic.Uint64
	echoTimes          [8]atomic.Int64

	// sentAt holds when each of the last QueueCapacity frames was handed
	// over, by sequence number (sent count) modulo its size: the oldest
	// frame still queued, and so how long the queue makes a frame wait,
	// whatever each frame costs.
	sentAt [QueueCapacity]atomic.Int64

	// cpuProfiling is set while a CPU profile of the worker is being taken
	// (see Profile).
	cpuProfiling atomic.Bool

	done chan struct{}
}

// EchoAge is how long the oldest unanswered echo has waited, 0 when every
// echo was answered: a worker stuck on one message answers nothing, and its
// round trip must still grow.
func (w *Worker) EchoAge(now time.Time) time.Duration {
	sent, done := w.echoSent.Load(), w.echoDone.Load()
	if done >= sent {
		return 0
	}
	oldest := done + 1
	if sent-oldest >= uint64(len(w.echoTimes)) {
		oldest = sent - uint64(len(w.echoTimes)) + 1
	}
	t := w.echoTimes[oldest%uint64(len(w.echoTimes))].Load()
	if t == 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, t)))
}

// Group is the group the worker belongs to.
func (w *Worker) Group() *Group { return w.g }

// State is the worker's current state.
func (w *Worker) State() State { return State(w.state.Load()) }

// QueueCapacity is how many frames a worker may have waiting. A bounded
// queue keeps the wait behind it bounded (at 1 ms per message, 4 s), and
// gives queue usage a meaning in percent.
const QueueCapacity = 4096

// Send hands the worker one frame. It never blocks.
func (w *Worker) Send(frame []byte) error {
	_, err := w.send(frame, true, time.Now().UnixNano())
	return err
}

// SendSeq is Send for a caller that knows the time (unix ns) and wants the
// frame's sequence number: the frame is still queued while Handled is below
// it. Concurrent senders may see their numbers swapped, which is harmless
// to what they are used for: a queued frame's age and whether a request is
// still waiting.
func (w *Worker) SendSeq(frame []byte, now int64) (uint64, error) {
	return w.send(frame, true, now)
}

// SendOwn hands the worker a frame of the supervisor's own (a steering
// table), which only the channel's room bounds, not the queue's capacity.
func (w *Worker) SendOwn(frame []byte) error { return w.sendOwn(frame) }

// sendOwn writes one of the supervisor's own frames (echo, job), which
// only the channel's room bounds.
func (w *Worker) sendOwn(frame []byte) error {
	_, err := w.send(frame, false, time.Now().UnixNano())
	return err
}

// send writes a frame; capped frames (work) respect QueueCapacity, the
// supervisor's own (drain, echo) only the channel's room.
func (w *Worker) send(frame []byte, capped bool, now int64) (uint64, error) {
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	if w.ended {
		return 0, ErrEnded
	}
	if capped && w.Queue() >= QueueCapacity {
		w.dropped.Add(1)
		return 0, ErrQueueFull
	}
	for {
		_, e := rawio.Write(w.p.dataFD, frame)
		switch e {
		case 0:
			return w.count(now), nil
		case rawio.EINTR:
			continue
		case rawio.EAGAIN:
			w.dropped.Add(1)
			return 0, ErrQueueFull
		default:
			w.dropped.Add(1)
			return 0, e
		}
	}
}

// SendConn hands the worker a connection the supervisor accepted (by
// descriptor), which the supervisor keeps its copy of.
func (w *Worker) SendConn(c syscall.Conn) error {
	return w.sendFile([]byte{wire.FrameConn}, c)
}

// SendPeer gives the worker a copy of the supervisor's end of peer's data
// channel, with peer's pid (wire.FramePeer): a UDP worker then passes the
// responses whose branch peer made straight to it.
func (w *Worker) SendPeer(peer *Worker) error {
	frame := []byte{wire.FramePeer, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(frame[1:], uint32(peer.Pid))
	// The file, not its number: a peer that ends meanwhile closes it
	// only once this send is done with it.
	return w.sendFile(frame, peer.p.data)
}

// SendConnFile hands the worker a connection the supervisor holds a copy
// of, with the bytes another worker read from it past its last message.
func (w *Worker) SendConnFile(f syscall.Conn, prefix []byte) error {
	if len(prefix)+1 > wire.MaxFrame {
		return errors.New("hand-off prefix too large")
	}
	return w.sendFile(append([]byte{wire.FrameHandOff}, prefix...), f)
}

// SendTLSConnFile hands the worker a TLS connection the supervisor holds a
// copy of, with the state another worker's record layer had
// (wire.HandOffTLSNote).
func (w *Worker) SendTLSConnFile(f syscall.Conn, payload []byte) error {
	if len(payload)+1 > wire.MaxFrame {
		return errors.New("hand-off state too large")
	}
	return w.sendFile(append([]byte{wire.FrameConnTLS}, payload...), f)
}

// end sends the end-of-work frame; after it the worker gets nothing more.
func (w *Worker) end() {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	if w.ended {
		return
	}
	w.ended = true
	// The end frame must get through even behind a full queue: retry until
	// the worker has room or is gone.
	for i := 0; i < 1000; i++ {
		_, err := unix.Write(w.p.dataFD, []byte{wire.FrameEnd})
		if err != unix.EAGAIN && err != unix.EINTR {
			if err == nil {
				w.count(time.Now().UnixNano())
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Queue is how many frames the worker has been handed and not yet handled.
func (w *Worker) Queue() int {
	q := int64(w.sent.Load()) - int64(w.p.stats.Load(wire.OffHandled))
	if q < 0 {
		return 0
	}
	return int(q)
}

// QueueDelay is how long a frame handed to the worker now would wait: the
// longer of the time the oldest frame still queued has waited, and its
// queue times what a frame cost it over the last sample (Group.Sample).
// The first is measured, not estimated: when initial INVITEs cost the
// worker a hundred times what the ACKs, BYEs and responses around them
// do, a queue of INVITEs waits far longer than its length times the mean.
// The second sees a queue that has just grown, before its oldest frame has
// waited.
func (w *Worker) QueueDelay() time.Duration {
	return max(w.QueueAge(time.Now().UnixNano()), time.Duration(int64(w.Queue())*w.frameNs.Load()))
}

// Ended reports whether the worker has been sent its end frame: Send fails
// from then on, though the process may still be finishing what it had.
func (w *Worker) Ended() bool {
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	return w.ended
}

// Waiting reports whether the frame with sequence number seq (SendSeq) is
// still in the worker's queue. A worker that has ended has nothing queued.
func (w *Worker) Waiting(seq uint64) bool {
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	return !w.ended && w.p.stats.Load(wire.OffHandled) < seq
}

// count counts a frame written at now and returns its sequence number.
// Every frame written counts here, as the worker counts every frame it
// handles: the difference is the queue.
func (w *Worker) count(now int64) uint64 {
	seq := w.sent.Add(1)
	w.sentAt[seq%QueueCapacity].Store(now)
	return seq
}

// QueueAge is how long the oldest frame still queued has waited at now
// (unix ns); 0 for an empty queue.
func (w *Worker) QueueAge(now int64) time.Duration {
	handled, sent := w.p.stats.Load(wire.OffHandled), w.sent.Load()
	if handled >= sent {
		return 0
	}
	oldest := handled + 1
	if sent-oldest >= QueueCapacity {
		oldest = sent - QueueCapacity + 1
	}
	at := w.sentAt[oldest%QueueCapacity].Load()
	if at == 0 || now <= at {
		return 0
	}
	return time.Duration(now - at)
}

// Stale is how many requests the worker dropped (datagrams) and refused
// (requests read from a connection) for having waited longer than its
// group's MaxQueueWait.
func (w *Worker) Stale() (dropped, refused uint64) {
	return w.p.stats.Load(wire.OffStale), w.p.stats.Load(wire.OffStaleRefused)
}

func (w *Worker) setMaxWait(d time.Duration) { w.p.stats.Store(wire.OffMaxWait, uint64(max(d, 0))) }

// Page is the worker's stats page, for the words direct reads add (see
// package wire); the page outlives the worker as long as the Worker does.
func (w *Worker) Page() *wire.StatsPage { return w.p.stats }

// Handled is how many frames the worker has handled.
func (w *Worker) Handled() uint64 { return w.p.stats.Load(wire.OffHandled) }

// Dropped is how many frames could not be handed to the worker.
func (w *Worker) Dropped() uint64 { return w.dropped.Load() }

// Sessions is how many sessions or transactions the worker holds.
func (w *Worker) Sessions() int { return int(w.p.stats.Load(wire.OffSessions)) }

// HeapBytes is the worker's Go heap in use (heap objects), 0 until the
// worker has first reported it.
func (w *Worker) HeapBytes() uint64 { return w.p.stats.Load(wire.OffHeap) }

// GCCPUSeconds is the CPU time the worker's garbage collector has taken,
// the runtime's estimate (/cpu/classes/gc/total:cpu-seconds), as of its
// last report.
func (w *Worker) GCCPUSeconds() float64 { return math.Float64frombits(w.p.stats.Load(wire.OffGCCPU)) }

// CPUSeconds is the CPU time the worker's Go runtime counts as busy, its
// estimate (/cpu/classes/total less /cpu/classes/idle), as of its last
// report: the base of GCShare.
func (w *Worker) CPUSeconds() float64 { return math.Float64frombits(w.p.stats.Load(wire.OffCPU)) }

// GCShare is the percent of the worker's CPU its garbage collector took
// over the last 10 to 20 seconds (since it started, while younger), as of
// the group's last sample; ok is false until the worker has used any CPU.
func (w *Worker) GCShare() (pct float64, ok bool) {
	v := w.gcShare.Load()
	if v == 0 {
		return 0, false
	}
	return math.Float64frombits(v) - 1, true
}

// Done is closed when the process has exited and been reaped.
func (w *Worker) Done() <-chan struct{} { return w.done }

// ExitReason is set once Done is closed.
func (w *Worker) ExitReason() string {
	w.g.mu.Lock()
	defer w.g.mu.Unlock()
	return w.exitReason
}

func (w *Worker) kill(reason string) {
	if w.killReason == "" {
		w.killReason = reason
	}
	w.p.proc.Signal(os.Kill)
}

// Signal sends a signal to the worker process (used by operators and tests).
func (w *Worker) Signal(sig os.Signal) error { return w.p.proc.Signal(sig) }
