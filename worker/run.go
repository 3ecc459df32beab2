package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/internal/ticketkey"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/pike"
	"golang.org/x/sys/unix"
)

// ErrNotChild is returned by Run in a process the supervisor did not start.
var ErrNotChild = errors.New("sipvisor worker processes are started by the sipvisor supervisor, not by hand; run sipvisor (see sipvisor -h)")

// Env is what a worker is given by its supervisor.
type Env struct {
	Group string
	// Kind is the group's kind: what work the worker gets.
	Kind   wire.Kind
	ID     int
	Config string
	// Sockets are the supervisor's UDP SIP sockets, to send from; Message.Socket
	// indexes them.
	Sockets     []net.PacketConn
	SocketNames []string
	Logger      *slog.Logger
	// TicketKeys are the TLS session ticket keys the supervisor gave, which
	// every worker of it shares; nil when it gave none.
	TicketKeys *ticketkey.Ratchet

	// Submit runs fn on the worker's loop, counted as busy time like a
	// message. Handlers use it for work that arrives outside the data channel
	// (TCP connections they were handed).
	Submit func(fn func())

	// Call sends a request to the supervisor and waits for its answer (see
	// pool.GroupOptions.OnCall): how workers reach state kept outside them,
	// such as registrations. Safe for concurrent use.
	Call func(req []byte) ([]byte, error)

	// OpenReplySockets binds, for each of Sockets, a UDP socket of this
	// worker's own on the same address and a port the kernel picks, and
	// has the loop read it: datagrams arriving there reach HandleMessage as
	// the supervisor's do, with Socket the index of the socket it stands
	// beside. A handler that names such a socket in the Via of the requests
	// it relays gets their responses without the supervisor's hop. Call it
	// from the handler's constructor, at most once.
	OpenReplySockets func() ([]net.PacketConn, error)

	// Late reports whether a message read at readAt (unix ns) has waited
	// longer than the group's max_queue_wait. The loop applies the bound
	// itself to the datagrams the supervisor hands over; a handler that
	// reads a stream (TCP) applies it to what it reads there, where a
	// request cannot be dropped in silence, as its client will not
	// retransmit it: it is refused (and counted with RefusedLate) or, when
	// it may not be refused, handled late.
	Late func(readAt int64) bool
	// RefusedLate counts a request refused for having waited too long.
	RefusedLate func()

	// Note tells the supervisor something that needs no answer (see
	// pool.GroupOptions.OnNote), without waiting for it. Safe for concurrent
	// use.
	Note func(note []byte) error
	// NoteSoon is Note for what may wait a little: the note is copied and
	// sent with the others of noteDelay at most, in one write, and before
	// any later Note or Call, so that the supervisor reads this worker's
	// notes in order and all of them before it answers its call. Safe for
	// concurrent use.
	NoteSoon func(note []byte)
	// Forward passes a response whose branch the worker with pid made
	// straight to that worker, if the supervisor linked this one to it
	// (wire.FramePeer); false leaves it to a wire.ForwardNote. Runs on
	// the loop.
	Forward func(pid int, from string, msg []byte) bool

	// Banned reports whether a source is banned (package overload/pike),
	// and whether its requests are answered 403 rather than dropped: a
	// handler that reads connections refuses a banned source's requests.
	// CountRequest counts a request read from a connection per source, for
	// the supervisor's table of bans. Both run on the loop.
	Banned       func(src netip.Addr) (banned, reply bool)
	CountRequest func(src netip.Addr)

	// OverloadControl reads the RFC 7339 feedback the supervisor publishes
	// (wire.OffOverloadControl), for the responses to clients that offer
	// oc.
	OverloadControl func() uint64

	// page is the worker's stats page: Admit decides by its gate and quota
	// words, and counts there what it decided alone.
	page *wire.StatsPage
	// refusals paces the log lines of what Admit refused alone, where
	// names the worker in them.
	refusals overload.RefusalLog
	where    string
}

// Message is one SIP datagram handed to a worker. Data is valid only during
// the HandleMessage call.
type Message struct {
	Socket int
	From   netip.AddrPort
	Data   []byte
	// Direct is set when the datagram came to the worker's own reply
	// socket, past the front door and its admission control.
	Direct bool
}

// Handler is the work a worker does. All methods are called from the worker's
// single loop, one at a time, so a handler needs no locks of its own for state
// it touches only there.
type Handler interface {
	HandleMessage(m *Message)
	HandleJob(name string)
	HandleConn(c net.Conn)
	// Tick runs the handler's timers (retransmissions, expiries).
	Tick(now time.Time)
	// Held is the number of sessions or transactions the worker still holds;
	// a draining worker reports drained when it reaches 0.
	Held() int
}

// Drainer is a Handler told when its worker starts to drain: a handler
// that reads connections hands them back (Env.Note, wire.HandOffNote) so that
// scaling down closes none.
type Drainer interface {
	Drain()
}

// A TLSTaker takes a TLS connection another worker handed back with its
// record layer's state (wire.FrameConnTLS): payload is the frame's.
type TLSTaker interface {
	TakeTLS(c net.Conn, payload []byte)
}

// A ConnWriter writes on a connection it reads a message another worker
// made (wire.WriteFrame): a request for a phone whose connection this
// worker holds, which only this process can write (a TLS session lives in
// the process that made it). The message is the handler's only for the
// call.
type ConnWriter interface {
	WriteConn(to netip.AddrPort, flags byte, msg []byte)
}

// Reloader is a Handler that can take a reloaded config without a restart:
// the supervisor asks it of workers it does not renew, whose connections
// a restart would cut.
type Reloader interface {
	// Reload loads the config snapshot at path; on an error the handler
	// keeps the config it has.
	Reload(path string) error
}

// Dispatcher is a Handler that selects destinations by the states the
// supervisor's probes find (wire.FrameDispatch).
type Dispatcher interface {
	DispatchStates(b []byte)
}

// IsWorker reports whether this process was started as a worker.
func IsWorker() bool { return os.Getenv(wire.EnvCookie) != "" }

// noteDelay is the longest a note sent with Env.NoteSoon waits for others
// to share its write. A proxied call over a connection notes its INVITE,
// ACK and BYE, each a write and a wake-up of the supervisor's; so many
// calls' notes share one. The supervisor's count of sessions over
// connections may lag this much behind a worker that does not ask it
// anything meanwhile: less than the door's quotas (steering.Every). At
// 10 ms, two TCP workers relaying 300 TLS calls/s sent 150 batches a
// second, and each woke the supervisor.
const noteDelay = 40 * time.Millisecond

// noteBatchMax is the most notes a batch holds, in bytes, before it is
// sent at once.
const noteBatchMax = 16 << 10

// noteBatch gathers notes that may wait (Env.NoteSoon) into one CtlNotes
// message.
type noteBatch struct {
	mu    sync.Mutex
	ctl   net.Conn
	buf   []byte // CtlNotes and the notes, once one is held
	since time.Time
}

func (b *noteBatch) add(note []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) == 0 {
		b.buf = append(b.buf, wire.CtlNotes)
		b.since = time.Now()
	}
	b.buf = wire.AppendNote(b.buf, note)
	if len(b.buf) >= noteBatchMax {
		b.flushLocked()
	}
}

// due is when the held notes are to be sent, false with none held.
func (b *noteBatch) due() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) == 0 {
		return time.Time{}, false
	}
	return b.since.Add(noteDelay), true
}

func (b *noteBatch) flush() {
	b.mu.Lock()
	b.flushLocked()
	b.mu.Unlock()
}

// flushLocked sends the held notes. One that cannot be written costs the
// supervisor's counts what each note would have, as a Note that fails.
func (b *noteBatch) flushLocked() {
	if len(b.buf) == 0 || b.ctl == nil {
		return
	}
	b.ctl.Write(b.buf)
	b.buf = b.buf[:0]
}

// tickEvery is the finest grain of the handler's timers: SIP's shortest
// timer is T1 (500 ms), so 50 ms is precise enough, and a busy worker moves
// its wake-up at most 20 times a second.
const tickEvery = 50 * time.Millisecond

// catchUp is how long a loop that finds its tick overdue by more than a
// grain puts the tick off, reading what came meanwhile: see catchUpFirst.
const catchUp = 10 * time.Millisecond

// catchUpFirst says whether the loop, its tick due since next, reads what
// is queued before it runs the handler's timers. Overdue by more than a
// grain, the loop was stalled (the machine starved or stopped the
// process): the answers that came meanwhile are older than the timers'
// expiry as the loop sees it, and a timer run first acts as though they
// had never come (an INVITE sent again after its 200 was queued, which a
// peer may take for a new call; a transaction timed out whose answer is
// waiting). The messages are read for catchUp at most, and only once in
// a row, so that the timers still run under a load that never empties the
// queues.
func catchUpFirst(now, next time.Time, caught bool) bool {
	return !caught && now.Sub(next) > tickEvery
}

// idleTick is how often a worker with no timer pending runs its tick: it
// still reports its heap and checks whether it has drained that often.
// The supervisor's echo, every echo_interval (a second by default), runs
// the tick when it comes (echoRunsTick), so that an idle worker wakes
// once for both; the wake-up armed for the tick, idleWait away, is the
// fallback for a worker that hears no echo. Each timer that fires wakes
// the runtime's monitor thread twice besides the loop.
const idleTick = time.Second

// idleWait is how long a worker with no timer pending sleeps.
const idleWait = 3 * idleTick

// echoRunsTick says whether an echo that came at now runs the tick: when
// the last ran at least three quarters of idleTick before (echoes a
// little early, or late, still do). A worker that ticks for its timers
// (every tickEvery under load) is not asked to tick again.
func echoRunsTick(now, last time.Time) bool {
	return now.Sub(last) >= idleTick*3/4
}

// heapEvery is how often the worker's heap and GC CPU time are read into
// its stats page.
const heapEvery = 250 * time.Millisecond

// A Timed handler says when its next timer is due, so that the loop sleeps
// until then rather than ticking: an idle worker that wakes only to find
// nothing due still costs a thread wake-up and a few context switches.
type Timed interface {
	// NextTimer is the earliest timer pending, or false for none. An early
	// answer is harmless (Tick finds nothing due), a late one delays timers.
	NextTimer() (time.Time, bool)
}

// A TurnEnder handler holds work that the messages of one turn of the loop
// share until the turn ends (the registrar's writes, done in one
// transaction): the loop calls EndTurn when nothing more waits to be read
// and the held work's idle time has come, when it is due, and before it
// returns. A turn is every message read without waiting for more than the
// idle time, so under load it holds many, and at a trickle one.
type TurnEnder interface {
	// Batched reports whether work is held, when it is due (done even
	// while messages keep coming) and when it may be done if the loop
	// finds nothing to read (idle, never after due): until then the loop
	// waits for more messages.
	Batched() (held bool, due, idle time.Time)
	EndTurn()
}

// Run is the whole life of a worker process: it rebuilds what the
// supervisor passed, makes the handler, says ready, and handles frames in
// order until the end frame (returns nil: exit 0) or an error.
func Run(ctx context.Context, logger *slog.Logger, newHandler func(env *Env) (Handler, error)) error {
	if os.Getenv(wire.EnvCookie) != wire.Cookie {
		return ErrNotChild
	}
	id, _ := strconv.Atoi(os.Getenv(wire.EnvWorkerID))
	env := &Env{Group: os.Getenv(wire.EnvGroup), Kind: wire.Kind(os.Getenv(wire.EnvKind)), ID: id, Config: os.Getenv(wire.EnvConfig)}
	if logger == nil {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	env.Logger = logger.With("group", env.Group, "worker", id, "pid", os.Getpid())

	fc, err := net.FileConn(os.NewFile(wire.FDControl, "control"))
	if err != nil {
		return fmt.Errorf("control channel: %w", err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("control channel: a %T, not a unix socket", fc)
	}
	ctl, err := wire.NewControlConn(uc)
	if err != nil {
		return fmt.Errorf("control channel: %w", err)
	}
	statsFile := os.NewFile(wire.FDStats, "stats")
	stats, err := wire.MapStats(statsFile)
	statsFile.Close()
	if err != nil {
		return err
	}
	var tickets ticketkey.Ratchet
	if tickets.UnmarshalBinary(stats.ReadAt(wire.OffTicketKeys, wire.TicketKeysLen)) == nil {
		env.TicketKeys = &tickets
		// Kept in this process's memory only from now on.
		stats.WriteAt(wire.OffTicketKeys, make([]byte, wire.TicketKeysLen))
	}
	if s := os.Getenv(wire.EnvSockets); s != "" {
		env.SocketNames = strings.Split(s, ",")
	}
	for i, name := range env.SocketNames {
		fd := wire.FDSockets + i
		unix.CloseOnExec(fd)
		s, err := newSendSocket(fd)
		if err != nil {
			return fmt.Errorf("import %s: %w", name, err)
		}
		env.Sockets = append(env.Sockets, s)
	}
	// The data channel stays a raw descriptor: frames may carry descriptors
	// (TCP connections), which need recvmsg.
	dataFD := wire.FDData
	unix.CloseOnExec(dataFD)

	w := &workerLoop{env: env, ctl: ctl, stats: stats, dataFD: dataFD, submit: make(chan func(), 64)}
	env.OverloadControl = func() uint64 { return stats.Load(wire.OffOverloadControl) }
	env.page = stats
	if s := os.Getenv(wire.EnvDirect); s != "" {
		if env.Kind != wire.KindUDP {
			return fmt.Errorf("%s is for UDP groups, not %q", wire.EnvDirect, env.Kind)
		}
		sock, slot, err := parseDirect(s, len(env.SocketNames))
		if err != nil {
			return fmt.Errorf("%s=%q: %w", wire.EnvDirect, s, err)
		}
		fd := wire.FDSockets + len(env.SocketNames)
		v6, err := openDirect(fd)
		if err != nil {
			return fmt.Errorf("%s: the socket to read: %w", wire.EnvDirect, err)
		}
		w.direct = newDirect(w, fd, v6, sock, slot)
		// Everything this worker sends from the port leaves from its own
		// socket of it, same address and port: a send from the
		// supervisor's socket would wake the supervisor's poller when its
		// buffer frees, at every datagram.
		own, err := newSendSocket(fd)
		if err != nil {
			return fmt.Errorf("%s: the socket to read: %w", wire.EnvDirect, err)
		}
		// The responses of a wake-up leave together (sendSocket.batch).
		var lostLog overload.Pacer
		own.batchSends(func(to netip.AddrPort, err error) {
			if ok, n := lostLog.Line(); ok {
				env.Logger.Warn("send failed", "to", to.String(), "error", err, "failed_since_last_line", n)
			}
		})
		w.out = own
		env.Sockets[sock] = own
	}
	env.Submit = w.submitFn
	env.Banned = w.banned
	env.CountRequest = w.countRequest
	env.OpenReplySockets = w.openReplySockets
	env.Late = w.waitedTooLong
	var late overload.Pacer
	env.RefusedLate = func() {
		w.stats.Add(wire.OffStaleRefused, 1)
		if ok, n := late.Line(); ok && env.Logger != nil {
			env.Logger.Warn("request refused: it waited longer than max_queue_wait", "event", "refused", "reason", "max_queue_wait",
				"where", "worker", "refused_since_last_line", n)
		}
	}
	calls := newCaller(ctl)
	w.notes.ctl = ctl
	env.Call = func(req []byte) ([]byte, error) {
		w.notes.flush()
		w.out.flush()
		return calls.call(req)
	}
	env.Note = func(note []byte) error {
		if len(note) > wire.MaxCall {
			return errors.New("note too large")
		}
		w.notes.mu.Lock()
		defer w.notes.mu.Unlock()
		w.notes.flushLocked()
		_, err := ctl.Write(append([]byte{wire.CtlNote}, note...))
		return err
	}
	env.NoteSoon = w.notes.add
	env.Forward = w.forward
	h, err := newHandler(env)
	if err != nil {
		return fmt.Errorf("start handler: %w", err)
	}
	w.h = h
	w.timed = tickTimed{}
	if t, ok := h.(Timed); ok {
		w.timed = t
	}
	w.mem[0].Name = "/memory/classes/heap/objects:bytes"
	w.mem[1].Name = "/cpu/classes/gc/total:cpu-seconds"
	w.mem[2].Name = "/cpu/classes/total:cpu-seconds"
	w.mem[3].Name = "/cpu/classes/idle:cpu-seconds"

	// The supervisor gone, the data channel reads end of file and the loop
	// returns: nothing would route to this worker any more.
	if _, err := ctl.Write([]byte{wire.CtlReady}); err != nil {
		return fmt.Errorf("ready: %w", err)
	}
	err = w.run(ctx)
	w.notes.flush()
	// A handler that holds files closes them, so that a SQLite store's
	// -wal and -shm go with the last process that had it open.
	if c, ok := h.(io.Closer); ok {
		if cerr := c.Close(); cerr != nil {
			env.Logger.Warn("closing the handler", "error", cerr)
		}
	}
	return err
}

type workerLoop struct {
	env      *Env
	data     atomic.Pointer[os.File] // the data channel, once run has started
	h        Handler
	ctl      net.Conn
	stats    *wire.StatsPage
	dataFD   int
	submit   chan func()
	notes    noteBatch
	draining bool
	drained  bool
	timed    Timed
	mem      [4]metrics.Sample // heap in use, GC CPU seconds, CPU seconds available and idle
	rd       *sourceReader
	out      *sendSocket // the direct socket, which holds responses; nil without
	heapDue  time.Time
	closer   fileCloser  // the files of handed connections that ended
	peers    map[int]int // by worker pid, its data channel (wire.FramePeer)
	peerBuf  []byte
	replies  []*sendSocket // the worker's own reply sockets, if opened
	direct   *direct       // the socket read directly, with wire.EnvDirect

	// The bans in force and how to count requests, as the supervisor's last
	// FrameBans said (package overload/pike).
	bans pike.List
	pike pike.Counter
}

// setBans takes a FrameBans.
func (w *workerLoop) setBans(b []byte) {
	reply, window, step, exempt, bans, err := wire.ParseBansFrame(b)
	if err != nil {
		w.env.Logger.Warn("bans", "error", err)
		return
	}
	w.bans.Set(bans)
	w.bans.SetReply(reply)
	w.pike.Set(pike.Policy{Window: time.Duration(window), Exempt: exempt})
	w.pike.SetStep(step)
}

// notePike reports a source whose requests grew by n to the supervisor.
func (w *workerLoop) notePike(src netip.Addr, n uint32) {
	if w.env.Note != nil {
		w.env.Note(wire.PikeNote(src, n))
	}
}

// banned reports whether src is banned now, and whether its requests are
// answered 403 rather than dropped.
func (w *workerLoop) banned(src netip.Addr) (bool, bool) {
	if w.bans.Len() == 0 {
		return false, false
	}
	return w.bans.Banned(src, time.Now().UnixNano()), w.bans.Reply()
}

// countRequest counts a request read from a connection.
func (w *workerLoop) countRequest(src netip.Addr) {
	if n := w.pike.Hit(src, time.Now().UnixNano()); n > 0 {
		w.notePike(src.Unmap(), n)
	}
}

type frame struct {
	buf []byte
	fd  int // a passed descriptor, or -1
}

// run is the worker's one loop: it handles frames, submitted work and the
// handler's timers, and counts the time it spends on them as busy.
func (w *workerLoop) run(ctx context.Context) error {
	// The loop reads the data channel itself, through the network poller:
	// a reader goroutine blocked in recvmsg made every frame cost a
	// blocking-syscall handoff and a goroutine wake-up, most of a worker's
	// CPU per message at moderate rates. Timer ticks and submitted work
	// wake the read through its deadline.
	if err := unix.SetNonblock(w.dataFD, true); err != nil {
		return fmt.Errorf("data channel: %w", err)
	}
	// With reply sockets or a socket of its own there are several
	// descriptors to wait for, and one goroutine: the loop waits on an
	// epoll set of them all, in the set itself (rawWait) or through the
	// network poller, which can wait on the set as on any descriptor.
	var wait *os.File
	switch {
	case len(w.replies) > 0 || w.direct != nil:
		set, err := w.pollSet()
		if err != nil {
			return err
		}
		defer unix.Close(w.dataFD)
		wait = set
	default:
		wait = os.NewFile(uintptr(w.dataFD), "data")
	}
	defer wait.Close()
	rc, err := wait.SyscallConn()
	if err != nil {
		return fmt.Errorf("data channel: %w", err)
	}
	w.data.Store(wait)
	var setFD uintptr
	rc.Control(func(fd uintptr) { setFD = fd })
	ender, _ := w.h.(TurnEnder)
	defer func() {
		if ender != nil {
			if held, _, _ := ender.Batched(); held {
				w.busy(ender.EndTurn)
			}
		}
		// The held work's answers too.
		w.out.flush()
	}()
	rd := newSourceReader(w.dataFD, w.replies, w.direct)
	rd.out = w.out
	w.rd = rd
	recv, recvPolled := rd.recv, rd.recvPolled
	raw := rawWait{on: rd.sources > 1, base: runtime.NumGoroutine()}
	// armed is the read deadline in force. It is set again only when the
	// wake-up comes sooner, or once it has passed: every change of a timer
	// that may be the earliest wakes another thread of the runtime, which
	// a deadline set per frame paid each time; and a timer put off stays
	// where it was in the runtime's heap, whose thread wakes then anyway
	// (an echo that runs the idle tick puts the next off every second).
	var armed time.Time
	now := time.Now()
	w.reportHeap(now)
	next, ticked := w.nextTick(now), now
	caught := false
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.runSubmitted()
		if now := time.Now(); !now.Before(next) && catchUpFirst(now, next, caught) {
			next, caught = now.Add(catchUp), true
		} else if !now.Before(next) {
			caught = false
			w.h.Tick(now)
			if w.direct != nil {
				w.direct.tick(now.UnixNano())
			}
			w.checkDrained()
			w.closer.flush(now)
			if !now.Before(w.heapDue) {
				w.reportHeap(now)
			}
			next, ticked = w.nextTick(now), now
		}
		// Held work whose idle time is before the tick moves the wake-up
		// to it.
		var (
			held      bool
			due, idle time.Time
		)
		if ender != nil {
			held, due, idle = ender.Batched()
		}
		wake := next
		if held && idle.Before(wake) {
			wake = idle
		}
		if due, ok := w.notes.due(); ok {
			if !time.Now().Before(due) {
				w.notes.flush()
			} else if due.Before(wake) {
				wake = due
			}
		}
		read := false
		if held {
			if now := time.Now(); !now.Before(due) {
				// The answers held so far leave before the turn's
				// writes to the store, which may take milliseconds.
				w.out.flush()
				w.busy(ender.EndTurn)
				continue
			} else if !now.Before(idle) {
				// A read that finds nothing ends the turn: the held work
				// is done now, not after the wait for the next message.
				if !recv(setFD) {
					w.busy(ender.EndTurn)
					continue
				}
				read = true
			}
			// Before its idle time, the loop waits for more messages,
			// or for the deadline at idle.
		}
		if !read {
			if d, ok := raw.wait(time.Now(), wake); ok {
				if len(w.submit) > 0 {
					continue
				}
				rd.wait = int64(d)
				if !recv(setFD) {
					continue
				}
				raw.fresh = true
				read = true
			}
		}
		if !read {
			if armed.IsZero() || wake.Before(armed) {
				wait.SetReadDeadline(wake)
				armed = wake
			}
			// Work submitted after runSubmitted set its own deadline to
			// now after ours, so it cannot wait for the tick.
			if len(w.submit) > 0 {
				armed = time.Time{}
				continue
			}
			rd.polled = false
			if err := rc.Read(recvPolled); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					armed = time.Time{}
					continue
				}
				return fmt.Errorf("data channel: %w", err)
			}
			// An echo alone, which an idle worker hears every second,
			// is no sign of traffic to wait in the set for.
			raw.fresh = !rd.echo()
		}
		if rd.src >= len(w.replies) {
			if rd.rerr == nil {
				w.direct.behind, w.direct.emptied = rd.bn-rd.bi, rd.bn < rd.batch.Len()
				w.direct.read(rd.dframe, rd.from, rd.doob)
				w.checkDrained()
				// The wait the datagram showed falls at a tick.
				if t := w.direct.due(); t != 0 && t < next.UnixNano() {
					next = time.Unix(0, t)
				}
				next = w.sooner(next)
			} else {
				w.env.Logger.Warn("read direct socket", "error", rd.rerr)
			}
			continue
		}
		if rd.src >= 0 {
			if rd.rerr == nil {
				w.handleReply(rd.src, rd.from, rd.buf[wire.MsgHeaderLen:wire.MsgHeaderLen+rd.n])
				next = w.sooner(next)
			} else {
				w.env.Logger.Warn("read reply socket", "socket", w.replies[rd.src].local.String(), "error", rd.rerr)
			}
			continue
		}
		if rd.rerr != nil {
			return fmt.Errorf("data channel: %w", rd.rerr)
		}
		if rd.n == 0 {
			return errors.New("supervisor closed the data channel")
		}
		fd := -1
		if rd.oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(rd.oob[:rd.oobn]); err == nil && len(msgs) > 0 {
				if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) > 0 {
					fd = fds[0]
				}
			}
		}
		echo := rd.echo()
		if w.handle(frame{buf: rd.buf[:rd.n], fd: fd}) {
			return nil
		}
		if now := time.Now(); echo && echoRunsTick(now, ticked) {
			next = now
		}
		next = w.sooner(next)
	}
}

// sooner is next, or the handler's earliest timer if the message just
// handled started one due before it: a wake-up armed for the idle tick
// would otherwise fire a new transaction's first retransmission up to
// idleTick late.
func (w *workerLoop) sooner(next time.Time) time.Time {
	if t, ok := w.timed.NextTimer(); ok && t.Before(next) {
		if t = later(t, time.Now().Add(tickEvery)); t.Before(next) {
			return t
		}
	}
	return next
}

// rawWait decides, before each wait, whether the loop waits in its poll set
// itself (rawio.EpollWait), holding its P, or through the network poller.
//
// Through the poller, a wake-up costs the scheduler's park, a poll of the
// network poller without waiting before it sleeps, its wait, and the
// wake-up; in the set, one system call. Profiled at 1,000 proxied calls a
// second, the park and the two polls were a quarter of a worker's samples,
// and a worker sleeps about twice a call. Measured since (docs/PERFORMANCE.md):
// 14.3 system calls a call at 400/s against 16.4, no change of CPU a call
// that shows at 3,000/s, and at 200/s a context switch about every second
// call, the monitor thread's ticks while the P is held. Holding the P is
// safe only while nothing else in the process needs it, and cheap only
// while the wait is short: see rawWaitFor. (The same wait through Go's hooked system call,
// which gives the P up, measured far worse: the runtime's monitor polls
// and takes the P back from the call; with two Ps, 28.6 system calls and
// 20 context switches per proxied call against 15 and 5 through the
// poller, and with one the worker fell behind its socket.)
type rawWait struct {
	on bool // the loop has a poll set to wait in
	// fresh says a message was read since the last wait; since is when
	// the loop began to wait with nothing read after.
	fresh   bool
	since   time.Time
	yielded time.Time
	// base is the process's goroutines as the loop began: the loop's own,
	// and those the handler started, which wait on channels the loop
	// feeds (database/sql's opener of connections).
	base int
}

// rawSpan is how long the loop may go on waiting in its set with nothing
// read: a worker quiet for longer waits through the network poller, as an
// idle process should. While a P is held the runtime's monitor thread
// wakes every 10 ms and signals a goroutine it has seen run that long
// (the loop in its wait, to the runtime), which ends the wait early: a
// span under 10 ms is not signalled. At 200 refusals a second, 20 ms read
// 2.9 context switches a refusal and 9 ms 2.6; at 200 proxied calls a
// second 15.6 system calls and 7.4 switches a call against 15.0 and 7.2,
// at 1,000 the same (bench/refusal-perf.sh, bench/ctxsw.sh).
const rawSpan = 9 * time.Millisecond

// yieldEvery is how often, at most, the loop yields its P to the scheduler
// before waiting in its set: the scheduler runs the runtime's timers and
// the collector's background work only when asked, and the monitor thread
// preempts a goroutine that has not yielded for 10 ms.
const yieldEvery = time.Millisecond

// rawWaitFor says whether the loop waits in its set, and how long: until
// wake, and no later than rawSpan after since, when the loop began waiting
// with nothing read. started is how many goroutines the process has
// started since the loop began and still runs (a connection's reader, a
// profile being taken): any of them may wait for the network poller,
// which nothing polls while the loop holds the P but the monitor thread,
// every 10 ms.
func rawWaitFor(now, wake, since time.Time, started int) (time.Duration, bool) {
	if started > 0 {
		return 0, false
	}
	until := since.Add(rawSpan)
	if wake.Before(until) {
		until = wake
	}
	d := until.Sub(now)
	return d, d > 0
}

func (r *rawWait) wait(now, wake time.Time) (time.Duration, bool) {
	if !r.on {
		return 0, false
	}
	if r.fresh {
		r.fresh, r.since = false, now
	}
	if now.Sub(r.yielded) >= yieldEvery {
		runtime.Gosched()
		r.yielded = now
	}
	return rawWaitFor(now, wake, r.since, runtime.NumGoroutine()-r.base)
}

// directBatch is how many datagrams of the direct socket one read takes
// at most: a batch spares the reads of a burst, and a larger one would hold
// back the data channel's frames behind it.
const directBatch = 8

// handleReply handles a datagram from reply socket i. It is no frame: the
// supervisor's count of frames handed and handled, which is the worker's
// queue, leaves it out; its time counts as busy.
func (w *workerLoop) handleReply(i int, from netip.AddrPort, b []byte) {
	m := Message{Socket: i, From: from, Data: b, Direct: true}
	w.busy(func() { w.h.HandleMessage(&m) })
	w.checkDrained()
}

// pollSet is an epoll set of the data channel and the sockets read, as a
// file the network poller waits on. Level-triggered: the set stays readable
// while any of them has something to read.
func (w *workerLoop) pollSet() (*os.File, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("poll set: %w", err)
	}
	fds := []int{w.dataFD}
	for _, r := range w.replies {
		fds = append(fds, r.fd)
	}
	if w.direct != nil {
		fds = append(fds, w.direct.fd)
	}
	for _, fd := range fds {
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			unix.Close(ep)
			return nil, fmt.Errorf("poll set: %w", err)
		}
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("poll set: %w", err)
	}
	return os.NewFile(uintptr(ep), "poll set"), nil
}

// openReplySockets binds a reply socket beside each of the supervisor's.
func (w *workerLoop) openReplySockets() ([]net.PacketConn, error) {
	if w.replies != nil {
		return nil, errors.New("reply sockets are open already")
	}
	var out []net.PacketConn
	for _, s := range w.env.Sockets {
		ss, ok := s.(*sendSocket)
		if !ok {
			return nil, fmt.Errorf("socket %v: not one of the supervisor's", s.LocalAddr())
		}
		r, err := bindReplySocket(ss.local.IP)
		if err != nil {
			for _, r := range w.replies {
				r.Close()
			}
			w.replies = nil
			return nil, fmt.Errorf("reply socket beside %v: %w", ss.local, err)
		}
		w.replies = append(w.replies, r)
		out = append(out, r)
	}
	return out, nil
}

// nextTick is when the loop must next run the handler's timers: at its
// earliest timer, but no sooner than tickEvery from now and no later than
// idleWait.
func (w *workerLoop) nextTick(now time.Time) time.Time {
	idle := now.Add(idleWait)
	if w.direct != nil {
		idle = w.direct.wake(idle, now.UnixNano(), w.draining && !w.drained)
	}
	if t, ok := w.timed.NextTimer(); ok && t.Before(idle) {
		return later(t, now.Add(tickEvery))
	}
	return idle
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// tickTimed stands in for a handler that does not say when its timers are
// due: a timer always overdue has it ticked every tickEvery.
type tickTimed struct{}

func (tickTimed) NextTimer() (time.Time, bool) { return time.Time{}, true }

// runSubmitted runs the work submitted so far.
func (w *workerLoop) runSubmitted() {
	for {
		select {
		case fn := <-w.submit:
			w.busy(fn)
		default:
			return
		}
	}
}

// submit queues fn for the loop and wakes its read.
func (w *workerLoop) submitFn(fn func()) {
	w.submit <- fn
	if d := w.data.Load(); d != nil {
		d.SetReadDeadline(time.Now())
	}
}

// handle handles one frame; it reports true for the end frame.
func (w *workerLoop) handle(f frame) bool {
	b := f.buf
	if b[0] != wire.FramePeerMessage {
		defer w.stats.Add(wire.OffHandled, 1)
	}
	// Only connection, peer and profile frames bring a descriptor; one on
	// any other frame would stay open for the worker's life.
	if f.fd >= 0 && b[0] != wire.FrameConn && b[0] != wire.FrameConnTLS && b[0] != wire.FrameHandOff && b[0] != wire.FrameProfile && b[0] != wire.FramePeer {
		unix.Close(f.fd)
		f.fd = -1
	}
	switch b[0] {
	case wire.FramePeerMessage:
		if len(b) < wire.MsgHeaderLen {
			return false
		}
		sock, from, _ := wire.ParseMsgHeader(b)
		m := Message{Socket: sock, From: from, Data: b[wire.MsgHeaderLen:]}
		w.stats.Add(wire.OffPeerPassed, 1)
		w.busy(func() { w.h.HandleMessage(&m) })
	case wire.FramePeer:
		if f.fd < 0 {
			return false
		}
		if len(b) < 5 {
			unix.Close(f.fd)
			return false
		}
		w.setPeer(int(binary.BigEndian.Uint32(b[1:5])), f.fd)
	case wire.FrameMessage:
		if len(b) < wire.MsgHeaderLen {
			return false
		}
		if w.direct != nil {
			w.direct.handed(b)
			break
		}
		sock, from, at := wire.ParseMsgHeader(b)
		m := Message{Socket: sock, From: from, Data: b[wire.MsgHeaderLen:]}
		if w.stale(m.Data, at) {
			w.stats.Add(wire.OffStale, 1)
			break
		}
		w.busy(func() { w.h.HandleMessage(&m) })
	case wire.FrameWrite:
		flags, to, msg, ok := wire.ParseWriteFrame(b)
		if cw, is := w.h.(ConnWriter); ok && is {
			w.busy(func() { cw.WriteConn(to, flags, msg) })
		}
	case wire.FrameJob:
		name := string(b[1:])
		w.busy(func() { w.h.HandleJob(name) })
	case wire.FrameConn, wire.FrameHandOff:
		if f.fd < 0 {
			return false
		}
		c, err := handedConn(f.fd, &w.closer)
		if err != nil {
			w.env.Logger.Warn("take tcp connection", "error", err)
			return false
		}
		// A connection handed over from a draining worker comes with the
		// bytes that worker had read past its last message.
		if b[0] == wire.FrameHandOff {
			c = &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(append([]byte(nil), b[1:]...)), c)}
		}
		w.busy(func() { w.h.HandleConn(c) })
	case wire.FrameConnTLS:
		if f.fd < 0 {
			return false
		}
		c, err := handedConn(f.fd, &w.closer)
		if err != nil {
			w.env.Logger.Warn("take tls connection", "error", err)
			return false
		}
		payload := append([]byte(nil), b[1:]...)
		if tt, ok := w.h.(TLSTaker); ok {
			w.busy(func() { tt.TakeTLS(c, payload) })
		} else {
			c.Close()
		}
	case wire.FrameEcho:
		// Answered at once: the round trip is the time the echo waited in the
		// queue behind real work.
		var ans [wire.EchoLen]byte
		copy(ans[:], b)
		ans[0] = wire.CtlEcho
		w.ctl.Write(ans[:])
	case wire.FrameProfile:
		// Not busy time: the profile is taken beside the loop, not on it.
		if f.fd >= 0 {
			handleProfile(b, f.fd)
		}
	case wire.FrameSteer:
		if w.direct != nil {
			w.direct.setSteer(b)
		}
	case wire.FrameBans:
		w.setBans(b)
	case wire.FrameDispatch:
		if d, ok := w.h.(Dispatcher); ok {
			w.busy(func() { d.DispatchStates(b[1:]) })
		}
	case wire.FrameDrain:
		w.draining = true
		if w.direct != nil {
			w.direct.drainAt = time.Now().UnixNano()
		}
		w.env.Logger.Debug("worker draining")
		if d, ok := w.h.(Drainer); ok {
			w.busy(d.Drain)
		}
	case wire.FrameReload:
		if r, ok := w.h.(Reloader); ok {
			path := string(b[1:])
			w.busy(func() {
				if err := r.Reload(path); err != nil {
					w.env.Logger.Error("reload in place failed, keeping the config", "error", err)
				}
			})
		}
	case wire.FrameEnd:
		return true
	}
	w.checkDrained()
	return false
}

// stale reports whether data is a request that waited longer than the
// supervisor allows. Its client has retransmitted it, or given up, while it
// waited: handling it now would spend the worker on an answer nobody waits
// for, and keep every request behind it waiting as long. Dropped, it is
// answered when its next retransmission arrives to a shorter queue. The
// requests of a transaction this worker holds need no work to absorb, but
// telling them apart would cost a parse: they go too, and come again.
// Responses are always handled, as their senders do not all retransmit.
func (w *workerLoop) stale(data []byte, at int64) bool {
	if len(data) >= 4 && string(data[:4]) == "SIP/" {
		return false
	}
	return w.waitedTooLong(at)
}

func (w *workerLoop) waitedTooLong(at int64) bool {
	max := int64(w.stats.Load(wire.OffMaxWait))
	return max > 0 && at > 0 && time.Now().UnixNano()-at > max
}

func (w *workerLoop) checkDrained() {
	held := w.h.Held()
	w.stats.Store(wire.OffSessions, uint64(held))
	// A worker that reads its own socket has drained when that socket is
	// quiet too: what it had queued must be read, not lost.
	if w.draining && !w.drained && held == 0 && (w.direct == nil || w.direct.quiet(time.Now().UnixNano())) {
		w.drained = true
		w.notes.flush()
		w.ctl.Write([]byte{wire.CtlDrained})
	}
}

// busy runs fn and adds its wall time to the busy counter, which is the load
// OpenSIPS defines: time inside the handler, not CPU time. It returns that
// time (ns), which a caller timing fn too would read the clock twice more
// for.
func (w *workerLoop) busy(fn func()) (took int64) {
	start := time.Now().UnixNano()
	w.stats.Store(wire.OffBusySince, uint64(start))
	fn()
	took = time.Now().UnixNano() - start
	w.stats.Add(wire.OffBusyNs, uint64(took))
	w.stats.Store(wire.OffBusySince, 0)
	return took
}

// reportHeap puts the heap in use, the GC's CPU time and the process's on
// the stats page, where the supervisor's heap monitor and its per-worker
// metrics read them:
// a worker's own /metrics would be one more address per process to scrape.
func (w *workerLoop) reportHeap(now time.Time) {
	metrics.Read(w.mem[:])
	if w.mem[0].Value.Kind() == metrics.KindUint64 {
		w.stats.Store(wire.OffHeap, w.mem[0].Value.Uint64())
	}
	if w.mem[1].Value.Kind() == metrics.KindFloat64 {
		w.stats.Store(wire.OffGCCPU, math.Float64bits(w.mem[1].Value.Float64()))
	}
	// The base of GC's share, from the same estimate as the GC's time:
	// what GOMAXPROCS allowed less the time Ps were idle (a worker waiting
	// on its socket is mostly that). The runtime counts a P's wall time, a
	// stop-the-world pause on every P, whether or not the kernel ran the
	// thread; against the kernel's CPU time the share would grow with the
	// machine's load rather than the collector's work.
	// The loop's waits in its own poll set hold a P, which the runtime
	// counts as busy: they are idle time too.
	if w.mem[2].Value.Kind() == metrics.KindFloat64 && w.mem[3].Value.Kind() == metrics.KindFloat64 {
		idle := w.mem[3].Value.Float64()
		if w.rd != nil {
			idle += w.rd.blocked.Seconds()
		}
		busy := max(0, w.mem[2].Value.Float64()-idle)
		w.stats.Store(wire.OffCPU, math.Float64bits(busy))
	}
	w.heapDue = now.Add(heapEvery)
}

// prefixConn is a connection another worker read before this one: its
// first bytes were read by that process.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// HandedOver tells a Handler that another worker read the connection
// before (HandedOver).
func (c *prefixConn) HandedOver() bool { return true }

// Release closes this process's descriptor only (rawio.Stream's), as a
// hand-off to another worker does.
func (c *prefixConn) Release() error {
	if r, ok := c.Conn.(interface{ Release() error }); ok {
		return r.Release()
	}
	return c.Conn.Close()
}

// HandedOver reports whether c was handed over by a draining worker,
// rather than newly accepted: its handshakes are done.
func HandedOver(c net.Conn) bool {
	h, ok := c.(interface{ HandedOver() bool })
	return ok && h.HandedOver()
}
