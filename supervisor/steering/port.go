// Package steering is the supervisor's side of direct reads
// (udp_direct_reads) for one UDP port: the member sockets its workers read
// in the port's SO_REUSEPORT group, the table of the kernel program
// (listeners/steer) that places each datagram by its Call-ID, and the gate
// and quotas the workers' own doors read from their pages.
//
// A refresh is split in two: Plan, a pure function of admission's state,
// the workers and the last refresh's state, decides the pages' words, the
// buckets, the program and the frames; Port.Refresh reads the inputs and
// applies the plan (pages, program, the door's view, frames). A bucket that
// moves keeps a note of the worker that had it for a pending INVITE's
// lifetime: a call of that worker's still reaches it, through the door.
package steering

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/listeners/steer"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/sessions"
	"github.com/sipvisor/sipvisor/pool"
	"golang.org/x/sys/unix"
)

// Options is what a Port is made of: its group's, its socket's and
// admission's parts, read at each refresh.
type Options struct {
	// Group names the worker group in log lines.
	Group string
	// Socket is the supervisor's socket of the port, member 0 of its
	// group, through which the program is installed; UDPIndex its index
	// among the UDP sockets passed to the workers.
	Socket   *listeners.Socket
	UDPIndex int
	// Workers are the group's workers, Routable those that take new
	// sessions (pool.Group's methods).
	Workers, Routable func() []*pool.Worker
	Admission         *overload.Admission
	Gate              *overload.Gate
	Ramps             *overload.Ramps[*pool.Worker]
	// RetryAfter draws the configured Retry-After, in seconds;
	// RetryAfterDrawn reports whether it is drawn from a range (nil for
	// never).
	RetryAfter      func() int
	RetryAfterDrawn func() bool
	// MaxCallDuration is the group's door's max_call_duration.
	MaxCallDuration func() time.Duration
	// Drain passes what waits in a member socket through the port's door.
	Drain func(fd int)
	// HandedOver reports whether the supervisor has handed the node to
	// the next generation (Inputs.HandedOver); nil for never.
	HandedOver func() bool
	Log        *slog.Logger
}

// Port is one UDP port's direct reads.
type Port struct {
	o Options

	refreshMu sync.Mutex
	mu        sync.Mutex
	slots     []*slot // slot i is member i+1 of the port's group
	state     State
	sent      map[int]int // worker ID → the table generation it was sent
	// retired is the counters of workers that exited, by page offset
	// (counterWords), so that a group's totals never go down.
	retired map[int]uint64

	// fresh is, by bucket, when the door last placed a new session of it
	// on another worker than the bucket's (unix ns): a new session of the
	// bucket read by its worker within a transaction's lifetime of that may
	// be a retransmission, which the worker passes to the door. placed is
	// when the door last placed a message of it on the bucket's worker.
	fresh  [steer.Buckets]atomic.Int64
	placed [steer.Buckets]atomic.Int64

	view atomic.Pointer[view]
	pacer
	// members is how many workers the program places datagrams on.
	members atomic.Int64
}

// slot is one member socket of the port's group, which a worker reads.
// It stays open for the group's life, so that members keep their numbers.
type slot struct {
	f  *os.File
	fd int
	id int // the worker that holds it, 0 when free, -id while it closes
	w  *pool.Worker
}

// prevOwner is the worker that had a bucket before it moved.
type prevOwner struct {
	w     *pool.Worker
	until int64 // unix ns
}

// view is what the door reads on its goroutine, swapped whole.
type view struct {
	gen    int
	direct bool
	owner  [steer.Buckets]*pool.Worker
	prev   [steer.Buckets]prevOwner
}

// counterWords are the counters of the workers' pages that the supervisor
// adds up per group.
var counterWords = func() []int {
	w := []int{wire.OffDirectRead}
	for k := range Kinds {
		w = append(w, wire.OffDoorAdmitted+8*k)
	}
	for r := range int(overload.NumRefusals) {
		w = append(w, wire.OffDoorRefused+8*r)
	}
	for i := range wire.DoorMalformed + int(sipscan.NumErrors) {
		w = append(w, wire.OffDoorCounters+8*i)
	}
	return w
}()

// New makes a port's direct reads and installs the door's program: until
// the first refresh every datagram is the door's, since without a program
// the kernel would spread them over the members by address.
func New(o Options) *Port {
	p := &Port{o: o, sent: map[int]int{}, retired: map[int]uint64{}}
	p.pacer.init()
	p.view.Store(&view{})
	if err := p.attach(steer.DoorProgram()); err != nil {
		o.Log.Warn("steering program not installed; the kernel spreads datagrams by address until it is", "group", o.Group, "error", err)
	}
	return p
}

// WorkerFiles gives a worker about to start its socket of the group: a free
// slot's, or a new member's (pool.GroupOptions.WorkerFiles).
func (p *Port) WorkerFiles(id int) ([]*os.File, []string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := slices.IndexFunc(p.slots, func(sl *slot) bool { return sl.id == 0 })
	if k < 0 {
		f, err := listeners.JoinGroup(p.o.Socket)
		if err != nil {
			return nil, nil, err
		}
		// Not f.Fd(), which would make the socket blocking for the
		// workers too: the flag belongs to the socket, not the descriptor.
		fd := -1
		if rc, err := f.SyscallConn(); err == nil {
			rc.Control(func(x uintptr) { fd = int(x) })
		}
		p.slots = append(p.slots, &slot{f: f, fd: fd})
		k = len(p.slots) - 1
	}
	p.slots[k].id = id
	p.slots[k].w = nil
	return []*os.File{p.slots[k].f}, []string{fmt.Sprintf("%s=%d:%d", wire.EnvDirect, p.o.UDPIndex, k+1)}, nil
}

// Members is how many workers the program places datagrams on: 0 while
// every datagram goes to the door.
func (p *Port) Members() int { return int(p.members.Load()) }

// Refresh writes the gate into every worker's page, places the buckets,
// installs the program and tells the workers when the table changed: it
// reads the inputs, plans (Plan) and applies the plan.
func (p *Port) Refresh(now time.Time) {
	// One refresh at a time, from reading the state to writing the pages:
	// two interleaved could leave an older gate in force. refreshMu is
	// never held by one who holds the group's lock (WorkerFiles runs under
	// it and takes p.mu), and the group's lock is never taken under p.mu.
	p.refreshMu.Lock()
	defer p.refreshMu.Unlock()
	ws := p.o.Workers()
	in := Inputs{Now: now, Ramps: p.o.Ramps.Len()}
	ReadAdmission(&in, p.o.Admission, p.o.Gate, p.o.RetryAfter, p.o.RetryAfterDrawn)
	in.HandedOver = p.o.HandedOver != nil && p.o.HandedOver()
	if p.o.MaxCallDuration != nil {
		in.MaxCallDuration = uint64(p.o.MaxCallDuration())
	}
	p.found(in.Closed)

	p.mu.Lock()
	defer p.mu.Unlock()
	byID := make(map[int]*pool.Worker, len(ws))
	in.Workers = make([]Worker, len(ws))
	for i, w := range ws {
		byID[w.ID] = w
		in.Workers[i] = Worker{ID: w.ID, Sent: p.sent[w.ID]}
		for k := range Kinds {
			in.Workers[i].Admitted[k] = w.Page().Load(wire.OffDoorAdmitted + 8*k)
		}
	}
	// A slot keeps its worker once it has it, gone or not, until Exited
	// frees it: the group's counters add up the workers' pages through it.
	in.Slots = make([]Slot, len(p.slots))
	for i, sl := range p.slots {
		if w := byID[sl.id]; sl.id > 0 && w != nil {
			sl.w = w
		}
		if sl.w != nil {
			in.Slots[i] = Slot{Worker: sl.w.ID, Ready: sl.w.State() == pool.Ready}
		}
	}
	for b := range steer.Buckets {
		in.Placed[b], in.Fresh[b] = p.placed[b].Load(), p.fresh[b].Load()
	}
	in.ViewGen = p.view.Load().gen
	in.Last = p.state
	p.apply(Plan(in), ws)
}

// ReadAdmission reads into in what a refresh weighs of admission's state
// for the group of g: whether it is open to all, the room the limits
// leave, whether it refuses every new session, the Retry-After, and the
// queue guards the workers apply themselves.
func ReadAdmission(in *Inputs, ov *overload.Admission, g *overload.Gate, retryAfter func() int, drawn func() bool) {
	in.RetryAfterDrawn = drawn != nil && drawn()
	in.Closed, in.Room = ov.Closed(g), ov.Room(g)
	in.QueueDelay = uint64(max(ov.Limits().QueueDelay.Load(), 0))
	in.QueueAdmission = ov.Limits().QueueAdmission.Load() > 0
	in.ProbesRefused, in.RetryAfter = ov.ProbeRefused()
	if !in.ProbesRefused {
		in.RetryAfter = retryAfter()
	}
}

// apply does what a plan says, under p.mu, ws being the workers planned
// for. A program that cannot be installed leaves the table as it was and
// the workers unsent until the next refresh.
func (p *Port) apply(a Actions, ws []*pool.Worker) {
	// A refresh from elsewhere than the loop may find the pace should
	// quicken: the loop, asleep for the quiet pace, is told.
	pace := a.Pace
	defer func() {
		if old := time.Duration(p.pace.Swap(int64(pace))); pace < old {
			p.Poke()
		}
	}()
	for i, w := range ws {
		pg := w.Page()
		pg.Store(wire.OffQueueDelayLimit, a.QueueDelay)
		pg.Store(wire.OffMaxCallDuration, a.MaxCallDuration)
		for k, q := range a.Quotas[i] {
			pg.Store(wire.OffQuota+8*k, q)
		}
		// The gate last: a worker that sees it open sees its quota.
		pg.Store(wire.OffGate, a.Gate)
	}
	// A bucket that moved was given its new worker now, the moment the
	// door marks it fresh at.
	for _, b := range a.Fresh {
		p.fresh[b].Store(a.Next.Since[b])
	}
	last := p.state
	p.state = a.Next
	if a.Attach {
		prog := steer.DoorProgram()
		if a.Why == "" {
			prog = steer.Program(&a.Table)
		}
		if err := p.attach(prog); err != nil {
			p.o.Log.Warn("steering program not installed; datagrams keep their way", "group", p.o.Group, "error", err)
			p.state.Table, p.state.Direct, p.state.SentFresh = last.Table, last.Direct, last.SentFresh
			pace = Every
			return
		}
		switch direct := a.Why == ""; {
		case direct == last.Direct:
		case direct:
			p.o.Log.Info("direct reads", "group", p.o.Group, "on", true, "workers", a.Members)
		default:
			p.o.Log.Info("direct reads", "group", p.o.Group, "on", false, "reason", a.Why)
		}
	}
	if a.Publish {
		p.members.Store(int64(a.Members))
		v := &view{direct: p.state.Direct, gen: p.state.Gen}
		for b, m := range p.state.Shadow {
			if m != 0 {
				v.owner[b] = p.slots[m-1].w
			}
		}
		for b, pr := range p.state.Prev {
			v.prev[b] = prevOwner{w: p.worker(pr.Worker), until: pr.Until}
		}
		p.view.Store(v)
	}
	byID := make(map[int]*pool.Worker, len(ws))
	for _, w := range ws {
		byID[w.ID] = w
	}
	for _, id := range a.SendTo {
		if w := byID[id]; w != nil && w.SendOwn(a.Frame) == nil {
			p.sent[id] = p.state.Gen
		}
	}
	for id := range p.sent {
		if byID[id] == nil {
			delete(p.sent, id)
		}
	}
}

// worker is the worker of an ID that holds a slot, nil if none does (0,
// or it exited: it holds no call any more).
func (p *Port) worker(id int) *pool.Worker {
	if id == 0 {
		return nil
	}
	for _, sl := range p.slots {
		if sl.w != nil && sl.w.ID == id {
			return sl.w
		}
	}
	return nil
}

// attach installs prog for the port's group, through the supervisor's
// socket, which replaces the group's program at once.
func (p *Port) attach(prog []unix.SockFilter) error {
	rc, err := p.o.Socket.UDP.SyscallConn()
	if err != nil {
		return err
	}
	var aerr error
	if err := rc.Control(func(fd uintptr) { aerr = steer.Attach(int(fd), prog) }); err != nil {
		return err
	}
	return aerr
}

// Exited frees a worker's slot once the program no longer names it, and
// passes what is left in its socket through the door: datagrams the kernel
// queued for the worker before the table moved are not lost.
func (p *Port) Exited(w *pool.Worker) {
	p.mu.Lock()
	k := slices.IndexFunc(p.slots, func(sl *slot) bool { return sl.id == w.ID })
	if k < 0 {
		p.mu.Unlock()
		return
	}
	sl := p.slots[k]
	// Its count moves to retired at once, so that the total never dips;
	// the slot is closing (no worker, not free) until its socket is empty.
	for _, off := range counterWords {
		p.retired[off] += w.Page().Load(off)
	}
	sl.id, sl.w = -w.ID, nil
	p.mu.Unlock()
	p.Refresh(time.Now())
	if p.o.Drain != nil {
		p.o.Drain(sl.fd)
	}
	p.mu.Lock()
	sl.id = 0
	p.mu.Unlock()
}

// Pick is the door's choice for a message of a Call-ID it holds no
// affinity for: a call's message goes to the worker that had its bucket
// while the call may live there, else to the bucket's worker; a new
// session, to the bucket's worker while datagrams go to workers, so that
// its call's later messages meet it there. A draining worker may be the one
// that had the bucket: it still holds its calls. nil leaves the choice to
// the door.
func (p *Port) Pick(m *sipscan.Msg, newSession bool, now int64) *pool.Worker {
	v := p.view.Load()
	b := steer.Bucket(m.CallID)
	// A request outside a dialog that starts no session (an OPTIONS, a
	// MESSAGE; not an ACK or CANCEL, which belong to an INVITE) is a
	// transaction of its own and belongs to no call: the worker that had
	// its bucket could hold only its retransmissions, and those the door
	// placed there meet it by the door's affinity. It goes to the bucket's
	// worker at once, so that a worker the group just grew by takes its
	// share: kept on the previous workers for as long as a pending INVITE
	// may live there, the OPTIONS of every moved bucket stayed on the
	// workers that were too few, whose queues dropped them until their
	// clients gave up. A retransmission of one the previous worker read
	// itself is handled twice at worst.
	alone := !newSession && m.IsRequest && !m.HasToTag && m.Method != sipscan.Ack && m.Method != sipscan.Cancel
	if pr := v.prev[b]; !alone && pr.w != nil && now < pr.until && live(pr.w) {
		// A new session only within a transaction's lifetime of the move:
		// it may be a retransmission of a request that worker holds.
		if !newSession {
			return pr.w
		}
		if now < pr.until-int64(sessions.PendingInvite-sessions.TransactionLifetime) {
			p.markFresh(b, now)
			return pr.w
		}
	}
	// A new session goes to the bucket's worker unless slow start shapes
	// the pick, which weighs the workers' queues.
	if w := v.owner[b]; w != nil && w.State() == pool.Ready && (!newSession || v.direct || p.o.Ramps.Len() == 0) {
		p.placed[b].Store(now)
		if newSession {
			p.o.Ramps.Pick(w, p.o.Routable, true, time.Unix(0, now))
		}
		return w
	}
	if newSession {
		// The door places it as it would without direct reads: elsewhere
		// than its bucket's worker, maybe.
		p.markFresh(b, now)
	}
	return nil
}

// markFresh notes that the door placed a new session of bucket b on
// another worker than the bucket's: the workers must learn it within
// Every, as a worker that is sent it later may take a retransmission of
// that session as a new one.
func (p *Port) markFresh(b int, now int64) {
	p.fresh[b].Store(now)
	if p.Pace() > Every {
		p.Poke()
	}
}

// live reports whether w may still hold calls and take their messages: a
// draining worker does until it has drained and been sent its end.
func live(w *pool.Worker) bool {
	s := w.State()
	return (s == pool.Ready || s == pool.Draining) && !w.Ended()
}

// Sessions is the sessions in progress the group's workers follow, by kind.
func (p *Port) Sessions(k sipscan.Kind) int64 {
	var n int64
	for _, w := range p.o.Workers() {
		n += int64(w.Page().Load(wire.OffKindSessions + 8*int(k)))
	}
	return n
}

// Counter is the total of a counter of the workers' pages (the door's
// counts and wire.OffDirectRead) over the group's workers, those gone
// included.
func (p *Port) Counter(off int) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.retired[off]
	for _, sl := range p.slots {
		if sl.id > 0 && sl.w != nil {
			n += sl.w.Page().Load(off)
		}
	}
	return n
}

// SocketUsage is how full the fullest of the workers' sockets is, in
// percent of its receive buffer: with direct reads the socket is a worker's
// queue, and what queue admission and the event_queue_usage monitor weigh.
func (p *Port) SocketUsage() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var u float64
	for _, sl := range p.slots {
		if sl.id <= 0 || sl.fd < 0 {
			continue
		}
		// SO_MEMINFO: the bytes queued (SK_MEMINFO_RMEM_ALLOC) and the
		// buffer (SK_MEMINFO_RCVBUF), as 32-bit words.
		queued, size, e := rawio.SocketMemory(sl.fd)
		if e != 0 {
			continue
		}
		if size > 0 {
			u = max(u, 100*float64(queued)/float64(size))
		}
	}
	return u
}

// LongestWait is the longest a datagram waited in a worker's socket lately.
func (p *Port) LongestWait() time.Duration {
	var d uint64
	for _, w := range p.o.Routable() {
		d = max(d, w.Page().Load(wire.OffWait))
	}
	return time.Duration(d)
}
